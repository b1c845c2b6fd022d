"""The words around a citation marker that only say where its sentence is from.

Models write where as well as what: the prompt's label ("as stated in Source [2]"), an opening
phrase ("According to [2], X", "X, and as [3] notes, Y") and a closing one ("X, as stated in
[2]."). When a marker is removed these words go with it (`citeflow.citations.markers` removes
it); when it moves they stay ("According to Source [1], X"). A plural label left with one marker
becomes singular, and so does its verb ("Sources [1] and [3] say" without 3: "Source [1] says").
"""

from __future__ import annotations

import re

from citeflow.citations.text import PLURAL_VERB, SENTENCE_OPENING, one_source_says

__all__ = ["CONJUNCTION", "LABEL_BEFORE", "SAID", "label_end", "one_left", "opening_phrase"]

#: the prompt's label written before a marker ("as stated in Source [2]"): it goes with it
_LABEL_WORD = r"Sources?[ \t]*:?[ \t]+"
LABEL_BEFORE = re.compile(rf"(?<![\w-]){_LABEL_WORD}\Z")
#: the words of a sentence's opening phrase that only says where ("According to [2], ...",
#: "As [2] notes, ...", "Based on the study [3], ...")
_SAYING = (
    "according|to|as|in|on|by|from|of|per|see|based|the|a|an|this|that|these|its|their|and|also"
    "|shown|stated|reported|noted|described|mentioned|explained|discussed|found|cited|shows"
    "|states|reports|notes|says|explains|describes|mentions|suggests|indicates|finds|show|state"
    "|report|note|say|explain|describe|mention|suggest|indicate|find"
    "|source|sources|document|documents|study|studies|text|passage|passages|article|paper"
)
#: a conjunction that opens a clause, before which such a phrase may stand ("X, and as [2] notes,")
CONJUNCTION = r"\b(?:and|but|while|whereas|although|though|yet)"
_PHRASE_BEFORE = re.compile(  # opening on a preposition: "The study [2], however," is a subject
    rf"(?:(?P<sentence>{SENTENCE_OPENING})|[,;][ \t]*|[ \t]+{CONJUNCTION}[ \t]+)"  # or a clause
    rf"(?P<phrase>(?:according|as|in|on|by|from|per|based|see)[ \t]+"
    rf"(?:(?:{_SAYING})[ \t]+){{0,4}})\Z",
    re.I,
)
_COMMA_AFTER = re.compile(rf"({CONJUNCTION}),(?=[ \t]*\Z)", re.I)  # "while, as [1] notes, X"
_PHRASE_AFTER = re.compile(rf"(?:[ \t]+(?:{_SAYING})){{0,2}}[ \t]*,[ \t]*(?=[^\W\d_])", re.I)
_LABEL_NEXT = re.compile(_LABEL_WORD)
#: a plural label left with one marker after its others were removed
_ONE_LEFT = re.compile(
    r"(?<![\w-])Sources(:?[ \t]+\[\d+\])(?![ \t]*(?:,[ \t]*)?(?:(?:and|or|&)[ \t]+)?\[)"
    rf"(?P<verb>{PLURAL_VERB})?"
)
SAID = re.compile(rf"[ \t]*,(?:[ \t]+(?:{_SAYING}))+[ \t]*\Z", re.I)  # "X, as stated in [2]."


def opening_phrase(out: str, text: str, end: int) -> tuple[str, int] | None:
    """Where a removed marker ends a sentence's or a clause's opening phrase that only said where
    ("According to [2], X" is "X", "A, and according to [2], B" is "A, and B"): ``out`` without
    the phrase (a sentence's next letter capitalised), and where ``text`` goes on; None when the
    marker ends no such phrase."""
    before, after = _PHRASE_BEFORE.search(out), _PHRASE_AFTER.match(text, end)
    if before is None or after is None:
        return None
    j, head = after.end(), out[: before.start("phrase")]
    if before["sentence"] is None:
        return _COMMA_AFTER.sub(r"\1", head), j
    return head + text[j : j + 1].upper(), j + 1


def label_end(text: str, k: int) -> int:
    """Where a marker written at ``k`` would start, after its label ("Source [3]")."""
    label = _LABEL_NEXT.match(text, k)
    return label.end() if label else k


def one_left(text: str) -> str:
    """``text`` with each plural label left with one marker singular, its verb agreeing."""
    return _ONE_LEFT.sub(_singular, text)


def _singular(sources: re.Match[str]) -> str:
    """A plural label left with one marker, singular: "Source [1] says"."""
    return f"Source{sources[1]}" + (one_source_says(sources["verb"]) if sources["verb"] else "")
