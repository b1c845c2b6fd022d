"""Where an answer's sentence stands in its layout: the lines that state nothing to check.

The check takes an answer one sentence (one line of a table or a list) at a time. Two kinds of
line only name things: a table's first row names its columns ("| Drug | Effect |"), and the list
of sources a hosted model may close its answer with names documents ("Sources:" then "[1]
essay.txt", "- [2] report.pdf, page 3"; or footnotes, "[^1]: essay.txt"). Checked as statements,
they would be reported unsupported and their markers rewritten ("Source 1 essay.txt"); they are
kept as written.
"""

from __future__ import annotations

import re
from typing import Literal

from citeflow.citations.text import is_table_row

__all__ = ["Layout", "Place"]

Place = Literal["statement", "table header", "source list"]

#: a line that heads a list of sources: "Sources:", "**References**", "## Citations"
_LIST_HEADING = re.compile(
    r"[ \t#*_]*(?:sources?|references?|citations?|bibliography|works cited)[ \t*_]*:?[ \t*_]*\Z",
    re.IGNORECASE,
)
#: a footnote's or a link's definition: "[^1]: essay.txt", "[2]: https://example.com/report"
_DEFINITION = re.compile(r"[ \t]*\[\^?[ \t]*\d{1,3}[ \t]*\]:")
#: an entry of such a list: a marker or a number first ("[1] essay.txt", "- [^2] a.pdf", "3. x")
_LIST_ENTRY = re.compile(
    r"[ \t]*(?:[-*•][ \t]*)?"
    r"(?:\[\^?[ \t]*\d{1,3}[ \t]*\]|【[ \t]*\d{1,3}[^】\n]*】|\d{1,3}[.)])[ \t]*\S"
)


class Layout:
    """Follows one answer's lines in order; `place` says what each one is."""

    def __init__(self) -> None:
        self._in_table = False
        self._in_list = False

    def place(self, sentence: str) -> Place:
        """What ``sentence``, the answer's next, is: a table's first row, an entry of a list of
        sources (a line that opens with a marker or a number, after a heading such as "Sources:"
        or another entry; a footnote's definition anywhere), or a statement."""
        row = is_table_row(sentence)
        header, self._in_table = row and not self._in_table, row
        entry = self._in_list and _LIST_ENTRY.match(sentence) is not None
        entry = entry or _DEFINITION.match(sentence) is not None
        self._in_list = entry or _LIST_HEADING.match(sentence) is not None
        if header:
            return "table header"
        return "source list" if entry else "statement"
