"""Sources named in prose follow the markers the check leaves.

Hosted models name their sources in words as well as in brackets: "Per Source 2, aspirin lowers
fever." The check reads what such a sentence states without those words (`text.statement_of`) and
cites the source that says it. When that is Source 1, the words must name Source 1 too: "Per Source
2, aspirin lowers fever [1]." would tell the reader one thing and the citation chip another. So
each number a sentence names in prose that its checked markers do not cite is rewritten to a cited
number the prose does not name yet, or dropped from the list it stands in (a label left naming no
number names the first cited source). A number that is no source's ("Document 7" among four
sources) is the sentence's content, not a reference, and stays; so does the prose of a sentence
left with no marker, which is reported unsupported as it stands.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from citeflow.citations.markers import find_markers
from citeflow.citations.text import NAMED_IN_PROSE, PLURAL_VERB, one_source_says

__all__ = ["follow_markers"]

_NUMBER = re.compile(r"\d{1,3}")
_PLURAL_VERB = re.compile(PLURAL_VERB, re.IGNORECASE)
#: one source named twice in a row, as a number dropped from its list can leave it ("Source 1 and
#: Source 1 show"): named once, its verb agreeing
_TWICE = re.compile(
    r"\b(?P<once>(?:source|document)s?[ \t]*#?[ \t]*(\d{1,3}))[ \t]*(?:,|and|&|or)[ \t]*"
    rf"(?:source|document)s?[ \t]*#?[ \t]*\2\b(?P<verb>{PLURAL_VERB})?",
    re.IGNORECASE,
)


def follow_markers(text: str, numbers: Sequence[int], count: int) -> str:
    """``text`` with the sources it names in prose ("Source 2", "Documents 1 and 3") among
    ``numbers``, the sources its markers cite after the check, of ``count`` sources."""
    if not numbers:
        return text
    markers = [(m.start, m.end) for m in find_markers(text)]  # "(Source 2)" is a marker
    found = [
        match
        for match in NAMED_IN_PROSE.finditer(text)
        if not any(start <= match.start() < end for start, end in markers)
    ]
    named = {int(n) for match in found for n in _NUMBER.findall(match["numbers"])}
    spare = [n for n in numbers if n not in named]
    pieces, end = [], 0
    for match in found:
        written = [int(n) for n in _NUMBER.findall(match["numbers"])]
        kept: list[int] = []
        for number in written:
            if number in numbers or not 1 <= number <= count:
                kept.append(number)
            elif spare:
                kept.append(spare.pop(0))
        kept = list(dict.fromkeys(kept)) or [numbers[0]]
        if kept != written:
            pieces += [text[end : match.start()], _named(match["label"], match["gap"], kept)]
            end = match.end()
            if len(kept) == 1 and len(written) > 1 and (verb := _PLURAL_VERB.match(text, end)):
                pieces.append(one_source_says(verb[0]))
                end = verb.end()
    return _TWICE.sub(_once, "".join([*pieces, text[end:]])) if pieces else text


def _once(twice: re.Match[str]) -> str:
    return twice["once"] + (one_source_says(twice["verb"]) if twice["verb"] else "")


def _named(label: str, gap: str, numbers: Sequence[int]) -> str:
    """The label ("Source", "documents") in the number it now needs, and ``numbers`` listed."""
    singular = label[:-1] if label[-1] in "sS" else label
    plural = singular + ("S" if singular.isupper() else "s")
    listed = [str(n) for n in numbers]
    if len(listed) == 1:
        return f"{singular}{gap}{listed[0]}"
    return f"{plural}{gap}{', '.join(listed[:-1])} and {listed[-1]}"
