"""The SciFact answers `citeflow eval` recorded, as the named sets the benches replay (no model).

- the test claims with gold sentences, split into the calibration and held-out halves;
- the first ``train`` train claims of the evaluation half (``--split train --citations N``);
- the first ``fresh`` train claims of the calibration half (``--split train --half calibration
  --citations N``), the second untouched set; none when 0.

Train claims are checked at document level (no gold sentences). A claim never answered is an
error: run the `citeflow eval` command first.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from citeflow.evaluation.citations import (  # noqa: E402
    evidence_queries,
    judged_queries,
    recorded_answers,
    split_of,
)
from citeflow.evaluation.dataset import BeirDataset, load_beir  # noqa: E402
from citeflow.evaluation.dense import default_cache_dir  # noqa: E402
from citeflow.evaluation.runner import EvalContext  # noqa: E402
from citeflow.settings import Settings  # noqa: E402

SCIFACT = ROOT.parent / "shared" / "data" / "scifact"
#: the citation metrics the benches print, in order
KEYS = ("citations", "precision", "precision_stance", "doc_precision", "recall", "no_citation_rate")

RecordedSets = dict[str, tuple[BeirDataset, dict[str, dict[str, Any]]]]


def recorded_sets(settings: Settings, *, train: int, fresh: int = 0) -> RecordedSets:
    """The recorded answers by set name, each with its dataset (see the module's docstring)."""
    test = load_beir(SCIFACT)
    train_set = load_beir(SCIFACT, split="train")
    with ExitStack() as stack:
        context = EvalContext(settings=settings, cache_dir=default_cache_dir(), stack=stack)
        tested = recorded_answers(test, evidence_queries(test), context)
        sets: RecordedSets = {
            "test, calibration half": (
                test,
                {q: r for q, r in tested.items() if split_of(q) == "calibration"},
            ),
            "test, held-out half": (
                test,
                {q: r for q, r in tested.items() if split_of(q) == "evaluation"},
            ),
        }
        for half, count in (("evaluation", train), ("calibration", fresh)):
            ids = judged_queries(train_set, half)[:count]
            if ids:
                sets[f"train {len(ids)}, {half} half (doc)"] = (
                    train_set,
                    recorded_answers(train_set, ids, context),
                )
    return sets
