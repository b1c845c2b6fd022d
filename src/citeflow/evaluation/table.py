"""Plain-text tables for `citeflow eval`: first column left-aligned, the others right-aligned."""

from __future__ import annotations

from collections.abc import Sequence


def text_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """``title``, then ``columns`` and ``rows`` between dashed rules."""
    widths = [max(len(r[i]) for r in [columns, *rows]) for i in range(len(columns))]

    def fmt(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest])

    rule = "-" * len(fmt(columns))
    return "\n".join([title, rule, fmt(columns), rule, *(fmt(r) for r in rows), rule])
