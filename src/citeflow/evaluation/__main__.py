"""``python -m citeflow.evaluation DATASET [options]``: see `citeflow.evaluation.cli`."""

import sys

from citeflow.evaluation.cli import main

sys.exit(main())
