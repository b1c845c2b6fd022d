"""A marker that closes a clause is held to that clause, not to its whole sentence.

Hosted models cite clause by clause: "Aspirin lowers fever [1], and paracetamol was discovered in
1877 [3]." Held to the whole sentence, Source 3 supports too little of it next to Source 1 and its
correct marker would go; held to "and paracetamol was discovered in 1877" it stays, and a marker
on the wrong source for its clause is moved to the one that says that clause. Each clause is
checked as `citeflow.citations.repair` checks a sentence, by the same rules ("; the answer is yes
[2]" is a decision), and its markers rewritten by its own verdict, so one number written on two
clauses can go two ways.

A marker closes a clause when a stop, comma, semicolon, colon or a conjunction that opens another
clause follows it, or nothing: "the study [2] which found X" cites the study, and is left to its
sentence, as is a marker after fewer than two content words ("According to [2], X"). A sentence
that no source says whole is read at its conjunctions the same way (`split_at_conjunctions`):
"X, and Y [1][3]." keeps [3] for Y and cites X on its own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from citeflow.citations.markers import (
    CLOSING_BRACKET,
    find_markers,
    insert_marker,
    render,
    renumber,
    strip_markers,
)
from citeflow.citations.text import content_terms, statement_of

__all__ = ["Clause", "ClauseVerdict", "clauses", "rewrite", "split_at_conjunctions"]

#: what follows a marker that closes a clause
_CLAUSE_ENDS = re.compile(
    r"[ \t]*(?:[.,;:!?)\]—–]|-(?=[ \t])|\Z"  # a dash too: "X [2]—Y [1]."
    r"|(?:and|but|or|yet|so|while|whereas|although|though|because)\b)",
    re.IGNORECASE,
)

#: the most words of an item of a list ("A, B, and C"), where ", and" closes the list
_LIST_ITEM = 4
#: the fewest content words of a clause cut out at a conjunction: one that says a fact of its own,
#: not a predicate of the sentence's subject ("X is a drink made of Y, and served hot")
_CLAUSE_WORDS = 3
#: where a clause of its own opens inside a sentence
_CONJUNCTION = re.compile(
    r"(?:(?:,[ \t]*(?:and|but|while|whereas|although|though)|;|[ \t]+(?:while|whereas))[ \t]+"
    r"|[ \t]*—[ \t]*|[ \t]+[–-][ \t]+)"  # or a dash: "X — and Y" (not a range, "1950–53")
    r"(?=[\w\[(【])",  # a word, or a marker that opens the clause ("and [1] says Y")
    re.IGNORECASE,
)
#: the bracket or quotation a marker stands in, closed after it ("(see [3])", "…interact [2]"")
_CLOSER = re.compile(rf"{CLOSING_BRACKET.pattern}|[\"”’]")
#: what stands between markers that name sources together ("[1], [2]", "[1] and [2]")
_JOINED = re.compile(r"[ \t]*(?:[,;][ \t]*)?(?:(?:and|or|&)[ \t]*)?", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Clause:
    """A piece of a sentence: ``text`` runs from the end of the clause before (or the sentence's
    start) to the end of the markers that close this one, whose numbers are ``numbers``; the
    words after the last such markers are a last piece with no numbers."""

    text: str
    numbers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ClauseVerdict:
    """What becomes of one clause's markers: ``mapping`` (number → the number it is rewritten
    to; a number missing from it is removed), and the number ``added`` to a clause that had no
    marker to a source that supports it."""

    mapping: dict[int, int]
    added: int | None = None


def clauses(sentence: str) -> list[Clause]:
    """``sentence`` cut after each group of markers that closes a clause of two content words or
    more (markers side by side, "[1][2]", "[1], [2]" or "[1] and [2]", close one together); none
    when no marker closes such a clause or one group closes the whole sentence."""
    groups: list[tuple[int, int, list[int]]] = []
    for marker in find_markers(sentence):
        if groups and _JOINED.fullmatch(sentence, groups[-1][1], marker.start):
            start, _, numbers = groups[-1]
            groups[-1] = (start, marker.end, numbers + list(marker.numbers))
        else:
            groups.append((marker.start, marker.end, list(marker.numbers)))
    if len(groups) < 2 and not (groups and content_terms(sentence[groups[0][1] :])):
        return []  # the common sentence: its markers, if any, close it together
    pieces: list[Clause] = []
    end = 0
    for _, group_end, numbers in groups:
        closer = _CLOSER.match(sentence, group_end)  # "(see [3])" closes with its bracket
        stop = closer.end() if closer else group_end
        if _CLAUSE_ENDS.match(sentence, stop) and _states_between(sentence, end, stop):
            pieces.append(Clause(sentence[end:stop], tuple(dict.fromkeys(numbers))))
            end = stop
    if not pieces or (len(pieces) == 1 and not content_terms(sentence[end:])):
        return []
    if sentence[end:]:
        pieces.append(Clause(sentence[end:], ()))
    return pieces


def split_at_conjunctions(sentence: str) -> list[Clause]:
    """``sentence`` cut before each conjunction that opens a clause of its own (", and", ", but",
    ", while", ", whereas", "; "; not the ", and" that closes a list of short items, "A, B, and
    C"), when each piece says something of its own; none when there is one piece. What a
    sentence whose markers all close it, or that has none, is checked by when no source supports
    all of it: "X, and Y [1][3]." keeps [3] for Y and cites X on its own."""
    cuts = [0]
    for boundary in _CONJUNCTION.finditer(sentence):
        if _in_quotation(sentence[: boundary.start()]):
            continue  # a quotation's own words, not a clause of the answer's
        before = sentence[cuts[-1] : boundary.start()]
        item = before.rsplit(",", 1)[1] if "," in before else ""
        if boundary[0].lower().startswith(", and") and 0 < len(item.split()) <= _LIST_ITEM:
            continue  # the ", and" closing a list, "A, B, and C"
        if _states_between(sentence, cuts[-1], boundary.start(), _CLAUSE_WORDS):
            cuts.append(boundary.start())
    if len(cuts) < 2 or not _states_between(sentence, cuts[-1], len(sentence), _CLAUSE_WORDS):
        cuts = cuts[:-1]
    if len(cuts) < 2:
        return []
    bounds = [*cuts, len(sentence)]
    return [Clause(sentence[a:b], ()) for a, b in pairwise(bounds)]


def _in_quotation(text: str) -> bool:
    """Whether ``text`` ends inside a quotation (an opening quotation mark not yet closed)."""
    return text.count('"') % 2 == 1 or text.count("“") > text.count("”")


def _states_between(sentence: str, start: int, stop: int, least: int = 2) -> bool:
    """Whether the words of ``sentence`` from ``start`` to ``stop`` say something of their own:
    ``least`` content words more than the rest of the sentence, each read with its markers out as
    the check reads it (so that "According to Source [2]," which only says where, says nothing)."""

    def terms(at: int) -> int:
        return len(content_terms(statement_of(strip_markers(sentence[at:]))))

    return terms(start) - terms(stop) >= least


def rewrite(pieces: Sequence[Clause], verdicts: Sequence[ClauseVerdict]) -> str:
    """The sentence with each clause's markers rewritten by its own verdict: rewritten whole,
    so that removing a marker tidies the words on both sides of it ("conducted in [3], which")."""
    texts, mappings, end = [], [], 0
    for piece, verdict in zip(pieces, verdicts, strict=True):
        text, mapping = piece.text, verdict.mapping
        if (number := verdict.added) is not None:
            text, mapping = insert_marker(text, render([number])), {**mapping, number: number}
        texts.append(text)
        end += len(text)
        mappings.append((end, mapping))
    sentence = "".join(texts)
    own = [
        next(m for end, m in mappings if marker.start < end) for marker in find_markers(sentence)
    ]
    return renumber(sentence, own)
