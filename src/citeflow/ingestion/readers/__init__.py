"""Turn files on disk into LlamaIndex `Document`s.

Two entry points:

* `discover` expands the paths a user gave (files and folders, recursively) into the files we can
  read, plus the ones we skip and why.
* `read_file` reads one file: one `Document` per page for a PDF, one `Document` otherwise.

The text of every `Document` is normalised the same way: Unix newlines, no trailing spaces, no
control characters, and paragraphs separated by exactly one blank line (the chunker splits on
blank lines, so paragraph breaks are kept and runs of blank lines are collapsed).

Any problem with a file becomes an `IngestError` whose message is one line naming the file and
what is wrong ("report.pdf: no extractable text (scanned PDF?)"); the caller skips that file and
reports the line. Library exceptions never escape (they are chained for debugging).

One module per concern: `discovery`, `dispatch` (`read_file`), a reader per format (`pdf`,
`docx_document`, `html_page`, `plain_text`), the shared `documents` metadata and
`text_cleanup`.
"""

from citeflow.ingestion.readers.discovery import discover
from citeflow.ingestion.readers.dispatch import SUPPORTED_SUFFIXES, read_file

__all__ = ["SUPPORTED_SUFFIXES", "discover", "read_file"]
