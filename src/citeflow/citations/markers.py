"""Finding, validating and rewriting ``[N]`` citation markers.

Answers cite with ``[1]``, ``[1, 2]`` or ``[1][2]``; small models also write ``[Source 1]`` or
``(Source 1)``, which are read as the same thing. Bracketed numbers that stand in the documents
themselves (footnotes such as ``[15]``) are removed from the text the model sees
(`strip_footnotes`), so that the only numbers in brackets the model has seen are source numbers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_NUMS = r"\d{1,3}(?:\s*(?:,|;|and|&)\s*(?:Source\s*)?\d{1,3})*"
MARKER_RE = re.compile(
    rf"\[\s*(?:Sources?\s*)?(?P<a>{_NUMS})\s*\]"
    rf"|\(\s*Sources?\s*(?P<b>{_NUMS})\s*\)"
    rf"|\[\s*\^\s*(?P<c>\d{{1,3}})\s*\]",
    re.IGNORECASE,
)
_FOOTNOTE_RE = re.compile(r"\[\s*\d{1,3}\s*\]")
_SPACE_BEFORE_PUNCT = re.compile(r"[ \t]+([.,;:!?])")
_DOUBLE_SPACE = re.compile(r"[ \t]{2,}")


@dataclass(frozen=True, slots=True)
class Marker:
    """One marker occurrence: its span in the text and the source numbers it names."""

    start: int
    end: int
    numbers: tuple[int, ...]


def find_markers(text: str) -> list[Marker]:
    """All citation markers in ``text``, in order."""
    out: list[Marker] = []
    for match in MARKER_RE.finditer(text):
        group = match.group("a") or match.group("b") or match.group("c") or ""
        numbers = tuple(int(n) for n in re.findall(r"\d+", group))
        out.append(Marker(match.start(), match.end(), numbers))
    return out


def cited_numbers(text: str) -> list[int]:
    """Source numbers cited in ``text``, unique, in order of first citation."""
    seen: dict[int, None] = {}
    for marker in find_markers(text):
        for n in marker.numbers:
            seen.setdefault(n, None)
    return list(seen)


def strip_markers(text: str) -> str:
    """``text`` without its citation markers, spacing tidied."""
    return tidy(MARKER_RE.sub("", text))


def tidy(text: str) -> str:
    """Fix the spacing left behind by removed markers (no space before punctuation)."""
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", text)
    return _DOUBLE_SPACE.sub(" ", text)


def render(numbers: Iterable[int]) -> str:
    """Canonical marker text: ``[1][3]``."""
    return "".join(f"[{n}]" for n in numbers)


def strip_footnotes(text: str) -> str:
    """Remove bracketed numbers that belong to a document (footnotes) before prompting."""
    return tidy(_FOOTNOTE_RE.sub("", text))


def renumber(text: str, mapping: dict[int, int]) -> str:
    """Rewrite markers through ``mapping`` (old → new); numbers not in it are dropped."""

    def _sub(match: re.Match[str]) -> str:
        group = match.group("a") or match.group("b") or match.group("c") or ""
        new = [mapping[int(n)] for n in re.findall(r"\d+", group) if int(n) in mapping]
        return render(dict.fromkeys(new))

    return tidy(MARKER_RE.sub(_sub, text))
