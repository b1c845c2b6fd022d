"""Finding, validating and rewriting ``[N]`` citation markers.

Answers cite with ``[1]``, ``[1, 2]``, ``[1][2]`` or a range ``[1-3]``; models also write
``[Source 1]``, ``(Source 1)``, ``[^1]``, ``【1】`` / ``【1†source】`` and, at the end of a clause,
``(1)``; all are read as the same thing. A bare ``(N)`` counts only right after a word or closing
quote and before punctuation or the end of the line, never opening a line or a list item, never
after a word such as "step", and never with four digits (a year): a false marker would delete
text. Bracketed numbers that stand in the documents themselves (footnotes such as ``[15]``) are
removed from the text the model sees (`strip_footnotes`), so that the only numbers in brackets
the model has seen are source numbers.

Removing a marker never leaves broken text behind (`tidy`): no space before punctuation, no
doubled punctuation, no empty bracket, no trailing clause of function words (", which is."), and
lists and tables keep their structure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_NUM = r"\d{1,3}(?:\s*[-–]\s*\d{1,3})?"
_NUMS = rf"{_NUM}(?:\s*(?:,|;|and|&)\s*(?:Source\s*)?{_NUM})*"
MARKER_RE = re.compile(
    rf"\[\s*(?:Sources?\s*)?(?P<a>{_NUMS})\s*\]"
    rf"|\(\s*Sources?\s*(?P<b>{_NUMS})\s*\)"
    rf"|\[\s*\^\s*(?P<c>\d{{1,3}})\s*\]"
    rf"|【\s*(?P<d>{_NUMS})\s*(?:†[^】]*)?】"
    # a bare "(2)" closing a clause: after a word or a closing quote, before punctuation or EOL
    rf"|(?<=[\w\"'”’)])[ \t]?\((?P<e>\d{{1,3}}(?:\s*,\s*\d{{1,3}})*)\)(?=[ \t]*(?:[.,;:!?]|$))",
    re.IGNORECASE | re.MULTILINE,
)
#: words after which "(2)" names a step or an item, not a source
_ENUMERATING = re.compile(r"\b(?:step|option|item|case|phase|stage|part|point|no)\.?\s*$", re.I)
_RANGE = re.compile(r"(\d{1,3})\s*[-–]\s*(\d{1,3})")
_FOOTNOTE_RE = re.compile(r"\[\s*\d{1,3}\s*\]")
#: a range longer than this names only its two ends
MAX_RANGE = 20

_FUNCTION = (
    "which|that|who|is|are|was|were|and|or|but|as|of|to|in|on|at|by|for|with|from|the|a|an"
    "|this|these|it|its|be|been|being|such|also"
)
_TIDY = (
    (re.compile(r"\[\s*[,;]?\s*\]|\(\s*[,;]?\s*\)|【\s*】"), ""),  # emptied brackets
    (re.compile(r"[ \t]+([.,;:!?])"), r"\1"),  # no space before punctuation
    # a clause of function words left at a sentence's end: "1971, which is." -> "1971."
    (re.compile(rf",\s+(?:(?:{_FUNCTION})\s+)*(?:{_FUNCTION})\s*(?=[.!?](?:\s|$))", re.I), ""),
    (re.compile(r"[,;:]+(?=[.!?](?:\s|$))"), ""),  # "first,." -> "first."
    (re.compile(r"([.!?][\"'”’)\]])[.]"), r"\1"),  # 'photography."' + '.' -> 'photography."'
    (re.compile(r"(?<![.])\.\.(?![.])"), "."),  # doubled full stop (an ellipsis stays)
    (re.compile(r"([,;])[,;]+"), r"\1"),
    (re.compile(r"[ \t]+(?=\n)"), ""),  # trailing spaces before a line break
    (re.compile(r"(?<=\S)[ \t]{2,}"), " "),  # double spaces (indentation stays)
)


@dataclass(frozen=True, slots=True)
class Marker:
    """One marker occurrence: its span in the text and the source numbers it names."""

    start: int
    end: int
    numbers: tuple[int, ...]


def _numbers(group: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in re.split(r"\s*(?:,|;|and|&)\s*", group, flags=re.IGNORECASE):
        part = re.sub(r"(?i)source\s*", "", part).strip()
        span = _RANGE.fullmatch(part)
        if span:
            a, b = int(span.group(1)), int(span.group(2))
            out += range(a, b + 1) if a <= b and b - a < MAX_RANGE else [a, b]
        elif part.isdigit():
            out.append(int(part))
    return tuple(dict.fromkeys(out))


def _group(match: re.Match[str]) -> str | None:
    """The numbers' text of a marker match, or None when a bare "(N)" names an item."""
    if match.group("e") is not None and _ENUMERATING.search(match.string[: match.start()]):
        return None
    return next((g for g in match.group("a", "b", "c", "d", "e") if g is not None), None)


def find_markers(text: str) -> list[Marker]:
    """All citation markers in ``text``, in order."""
    out: list[Marker] = []
    for match in MARKER_RE.finditer(text):
        group = _group(match)
        if group is not None:
            out.append(Marker(match.start(), match.end(), _numbers(group)))
    return out


def cited_numbers(text: str) -> list[int]:
    """Source numbers cited in ``text``, unique, in order of first citation."""
    seen: dict[int, None] = {}
    for marker in find_markers(text):
        for n in marker.numbers:
            seen.setdefault(n, None)
    return list(seen)


def tidy(text: str) -> str:
    """Fix what removed markers leave behind (see the module's docstring)."""
    for pattern, replacement in _TIDY:
        text = pattern.sub(replacement, text)
    return text


def render(numbers: Iterable[int]) -> str:
    """Canonical marker text: ``[1][3]``."""
    return "".join(f"[{n}]" for n in numbers)


def _rewrite(text: str, keep: dict[int, int] | None) -> str:
    """Every marker rewritten through ``keep`` (old → new; None: all removed), then tidied."""

    def sub(match: re.Match[str]) -> str:
        group = _group(match)
        if group is None:
            return match.group(0)
        if keep is None:
            return ""
        new = [keep[n] for n in _numbers(group) if n in keep]
        return render(dict.fromkeys(new))

    rewritten = tidy(MARKER_RE.sub(sub, text))
    # a marker that ended the text leaves no space behind (a text that ended in one keeps it)
    return rewritten if text[-1:].isspace() else rewritten.rstrip(" \t")


def strip_markers(text: str) -> str:
    """``text`` without its citation markers, tidied."""
    return _rewrite(text, None)


def remove_markers(text: str, numbers: Iterable[int] | None = None) -> str:
    """``text`` without the markers of ``numbers`` (None: all), the rest rendered canonically."""
    if numbers is None:
        return strip_markers(text)
    gone = set(numbers)
    return _rewrite(text, {n: n for n in cited_numbers(text) if n not in gone})


def renumber(text: str, mapping: dict[int, int]) -> str:
    """Rewrite markers through ``mapping`` (old → new); numbers not in it are dropped."""
    return _rewrite(text, mapping)


def strip_footnotes(text: str) -> str:
    """Remove bracketed numbers that belong to a document (footnotes) before prompting; only
    the spacing they leave is fixed (a document's own wording is not touched)."""
    text = _TIDY[1][0].sub(_TIDY[1][1], _FOOTNOTE_RE.sub("", text))
    return _TIDY[-1][0].sub(_TIDY[-1][1], text)
