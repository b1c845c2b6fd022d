"""Finding, validating and rewriting the citation markers an LLM writes in its answers.

Answers cite with ``[1]``, ``[1, 2]``, ``[1][2]`` or a range ``[1-3]`` / ``[1–3]`` / ``[1]-[3]``;
models also write ``[Source 1]``, ``(Source 1)``, ``(Sources: 1, 2)``, ``(see Source 1)``, ``[^1]``,
``【1】``, ``【1†source】``, ``[1†source]`` and, closing a clause, a bare ``(1)`` or ``(1, 2)``: all
name the same source numbers. A range names each of its numbers only when it counts up and is at
most `MAX_RANGE` long ("[1-999]" names 1 and 999). A false marker would delete text, so the bare
form is read only after a word or a bracket and a space, or after a closing quote, and right before
``.``, ``,``, ``;``, ``!`` or ``?``: never opening a line or list item, after a colon, after a word
such as "step" ("Step 2 (3)") or a function word ("choose (1) or (2)."), as 0, with a leading zero
or with four digits (a year). No form is read in a number such as ``(1,000)``, inside code
(backticks), as a link (``[1](url)``) or as a link or footnote definition (``[^1]:`` opening a
line). Bracketed numbers in the documents themselves (footnotes such as ``[15]``) are removed from
the text the model sees (`citeflow.citations.sources.strip_footnotes`), so the only numbers in
brackets the model has seen are source numbers.

Removing a marker (`strip_markers`, `remove_markers`, `renumber`) repairs the text only where a
marker was, so the answer's own wording (".NET", "cd ..") is never touched: no space before
punctuation, no doubled stop ('first, [3].', 'photography." [2].'; an ellipsis stays), no
emptied bracket ("([1])", "(see [1])"), no double or trailing space, no dangling clause of
function words (", which is [2].") or word left without its object ("as reported in [3]."), no
sentence left without its subject ("[2] shows that X." keeps "Source 2 shows that X."), no
joined lines; list items and table cells keep their bullets and pipes. The words that only say
where go with the marker (`citeflow.citations.saying`): the label ("in Source [2]"; "Sources [1]
and [3] say" without 3 is "Source [1] says"), an opening phrase ("According to [2], x" is "X")
and a closing one ("X, as stated in [2]." is "X.").

Placing a marker (`insert_marker`, `markers_last`) puts it at the end of its sentence, before the
closing punctuation, never inside a quotation or after an abbreviation's full stop.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from citeflow.citations.saying import LABEL_BEFORE, SAID, label_end, one_left, opening_phrase
from citeflow.citations.text import (
    SENTENCE_OPENING,
    STOP_CLOSERS,
    closes_abbreviation,
    is_table_row,
)

_NUM = r"\d{1,3}(?:[ \t]*[-–][ \t]*\d{1,3})?"
_NUMS = rf"{_NUM}(?:[ \t]*(?:,|;|and|&)[ \t]*(?:Sources?[ \t]*)?{_NUM})*"
_BARE = r"\([1-9]\d{0,2}(?:[ \t]*,[ \t]*[1-9]\d{0,2})*\)"
MARKER_RE = re.compile(
    rf"\[[ \t]*(?P<f>\d{{1,3}}[ \t]*\][ \t]*[-–][ \t]*\[[ \t]*\d{{1,3}})[ \t]*\](?!\()"  # [1]-[3]
    rf"|\[[ \t]*(?:Sources?[ \t]*:?[ \t]*)?(?P<a>{_NUMS})[ \t]*(?:†[^\]\n]*)?\](?!\()"
    rf"|\([ \t]*(?:see[ \t]+(?:also[ \t]+)?)?Sources?[ \t]*:?[ \t]*(?P<b>{_NUMS})[ \t]*\)"
    rf"|\[[ \t]*\^[ \t]*(?P<c>\d{{1,3}})[ \t]*\](?!\()"
    rf"|【[ \t]*(?P<d>{_NUMS})[ \t]*(?:†[^】\n]*)?】"
    # a bare "(2)" closing a clause: after a word or bracket and a space, or after a closing quote
    rf"|(?:(?<=[\w)][ \t])|(?<=[\"'”’])|(?<=[\"'”’][ \t]))"
    rf"(?P<e>{_BARE}(?:[ \t]?{_BARE})*)(?=[ \t]?[.,;!?](?:\s|$))",
    re.IGNORECASE | re.MULTILINE,
)
#: words after which "(2)" names a step, an item or a part of a text, not a source
_ENUMERATING = re.compile(
    r"\b(?:step|option|item|case|phase|stage|part|point|no|number|question|example|exercise"
    r"|figure|fig|table|equation|eq|section|chapter|article|paragraph|clause|rule|page|line"
    r"|appendix|level|round|version|type)s?\.?(?:[ \t]+\d+[a-z]?)?[ \t]*$",
    re.IGNORECASE,
)
_RANGE = re.compile(r"(\d{1,3})\s*[-–]\s*(\d{1,3})")
_BRACKETS = str.maketrans("", "", "[]")
_THOUSANDS = re.compile(r"\d,\d{3}(?!\d)")  # "(1,000)" is a number, not sources 1 and 0
_CODE = re.compile(r"^[ \t]*(`{3,}|~{3,})[^`\n]*$.*?(?:^[ \t]*\1|\Z)|(`+)[^`\n]+\2", re.M | re.S)
#: a range longer than this names only its two ends
MAX_RANGE = 20

_FUNCTION = (
    "which|that|who|is|are|was|were|and|or|but|as|of|to|in|on|at|by|for|with|from|the|a|an"
    "|this|these|it|its|be|been|being|such|also"
)
_AFTER_FUNCTION = re.compile(rf"\b(?:{_FUNCTION}|between)[ \t]*$", re.I)  # "(1) or (2)."
# where a marker was removed: the text before it (``left``) and after it
_DANGLING = re.compile(rf"[ \t]*[,;:]+(?:[ \t]+(?:{_FUNCTION}))*[ \t]*\Z", re.I)
#: words whose object a marker can be ("conducted in [1]."), as a regex alternation
OBJECT_WORDS = "in|on|at|by|for|with|from|of|to|see|and|or|the|a|an"
_ORPHANED = re.compile(rf"(?:[ \t]+(?:{OBJECT_WORDS}))+[ \t]*\Z", re.I)
#: the words that may go with a removed marker (", which is [2].", "reported in [3].")
TIDIED_WORDS = frozenset(f"{_FUNCTION}|{OBJECT_WORDS}".split("|"))
#: what joins a marker to the next one ("[2] and [3]", "[2], [3]"), and to the one before
_JOINER = re.compile(r",[ \t]*(?:(?:and|or|&)[ \t]+)?|(?:and|or|&)[ \t]+", re.I)
_JOINED = re.compile(r"(?<=\])[ \t]*(?:,[ \t]*)?(?:and|or|&)[ \t]*\Z", re.I)
_STOPPED = re.compile(rf"[.!?][{STOP_CLOSERS}]*\Z")
#: what an aside holding only markers opens with, after its bracket or dash: "(see ", "— cf. "
_ASIDE_OPENS = r"[ \t]*(?:see(?: also)?|cf\.|sources?)?[ \t,;:]*\Z"
_OPENED = re.compile(rf"[(\[【]{_ASIDE_OPENS}", re.I)
CLOSING_BRACKET = re.compile(r"[ \t,;]*[)\]】]")  # after a marker in brackets
_DASHES = ("—", "–")
_DASHED = re.compile(rf"[ \t]*[—–]{_ASIDE_OPENS}", re.I)
_CLOSERS = ".,;:!?)]}】”’\r\n"
#: a marker that opens a sentence as its subject ("[2] shows that ..."), not a list item
_SENTENCE_START = re.compile(rf"{SENTENCE_OPENING}\Z")
_VERB_NEXT = re.compile(r"[ \t]+(?!(?:and|or)\b)[a-z]{2}")


@dataclass(frozen=True, slots=True)
class Marker:
    """One marker occurrence: its span in the text and the source numbers it names."""

    start: int
    end: int
    numbers: tuple[int, ...]


def _numbers(group: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in re.split(r"[,;&()]|and|sources?", group.translate(_BRACKETS), flags=re.I):
        span = _RANGE.fullmatch(part := part.strip())
        if span:
            a, b = int(span.group(1)), int(span.group(2))
            out += range(a, b + 1) if a <= b and b - a < MAX_RANGE else [a, b]
        elif part.isdigit():
            out.append(int(part))
    return tuple(dict.fromkeys(out))


def _group(match: re.Match[str]) -> str | None:
    """The numbers' text of a marker match, or None when it is no citation after all."""
    text, start, end = match.string, match.start(), match.end()
    before = text[max(0, start - 32) : start]
    if match.group("e") is not None and (
        _ENUMERATING.search(before) or _AFTER_FUNCTION.search(before)
    ):
        return None
    line_start = text.rfind("\n", 0, start) + 1
    if text[end : end + 1] == ":" and not text[line_start:start].strip():
        return None  # "[1]: https://…", "[^1]: note" define a link or a footnote
    group = next((g for g in match.group("a", "b", "c", "d", "e", "f") if g is not None), "")
    return None if _THOUSANDS.search(group) else group


@lru_cache(maxsize=1024)
def _markers(text: str) -> tuple[Marker, ...]:
    """The markers of ``text``, cached: checking one sentence reads its markers about four
    times (find, strip, renumber, move last)."""
    code = [span.span() for span in _CODE.finditer(text)] if "`" in text or "~" in text else []
    markers: list[Marker] = []
    for match in MARKER_RE.finditer(text):
        group = _group(match)
        if group and not any(a <= match.start() < b for a, b in code):
            markers.append(Marker(match.start(), match.end(), _numbers(group)))
    return tuple(markers)


def find_markers(text: str) -> list[Marker]:
    """All citation markers in ``text``, in order."""
    return list(_markers(text))


def cited_numbers(text: str) -> list[int]:
    """Source numbers cited in ``text``, unique, in order of first citation."""
    return list(dict.fromkeys(n for marker in find_markers(text) for n in marker.numbers))


def marker_is_an_object(text: str) -> bool:
    """Whether a marker of ``text`` is the object of a word ("stated in [2]", "see [1]")."""
    return any(_ORPHANED.search(" " + text[: m.start]) for m in _markers(text))


def render(numbers: Iterable[int]) -> str:
    """Canonical marker text: ``[1][3]``."""
    return "".join(f"[{n}]" for n in numbers)


def _close(left: str, text: str, j: int) -> tuple[str, int]:
    """Join ``left`` (the rewritten text before a removed marker) to ``text[j:]`` (the text after
    it): the joined ``left`` and where in ``text`` to go on."""
    while True:
        core = left.rstrip(" \t")
        k = j
        while text[k : k + 1] in (" ", "\t"):
            k += 1
        opened, closed = _OPENED.search(core), CLOSING_BRACKET.match(text, k)
        dashed = text[k : k + 1] in _DASHES and _DASHED.search(core)
        if opened and closed:  # an emptied bracket: "([1])", "([1], [2])", "(see [1])"
            left, j = core[: opened.start()], closed.end()
        elif dashed:  # an emptied aside between dashes: "X — see [2] — and Y" is "X and Y"
            spaced = text[k + 1 : k + 2] in (" ", "\t", "\n", "")
            left, j = core[: dashed.start()] + ("" if spaced else " "), k + 1
        elif (not core or core.endswith("\n") or opened) and text[k : k + 1] in (",", ";"):
            left, j = core, k + 1  # a separator opening a line or bracket: "[1], [2] Text"
        elif core[-1:] in (",", ";") and text[k : k + 1] in (")", "]", "】"):
            left = core[:-1]  # a separator closing a bracket: "([1], [2])" without 2
        elif core[-1:] in (",", ";", ":") and text[k : k + 1] in (",", ";", ":"):
            left, j = core, k + 1  # "X, [1], Y"
        elif (
            core[-1:] not in (",", ";", ":")
            and (joiner := _JOINER.match(text, k))
            and any(m.start == label_end(text, joiner.end()) for m in _markers(text))
        ):
            j = joiner.end()  # "in [2] and [3]" without 2: its "and" goes with it
        elif joined := _JOINED.search(core):
            left = core[: joined.start()]  # "of [1] and [2] agree" without 2
        else:
            break
    pre, post, nxt = left[len(core) :], text[j:k], text[k : k + 1]
    if not nxt:
        return core + post, k  # the text's end keeps the space it ended with
    closing_quote = nxt in "\"'" and text[k + 1 : k + 2] in ("", " ", *_CLOSERS)
    if nxt in ".!?":
        # "first, [3]." "1971, which is [2]." "reported in [3]." "conducted in [1], and [2]."
        while dangling := _DANGLING.search(core) or _ORPHANED.search(core) or SAID.search(core):
            core = core[: dangling.start()]
        if nxt == "." and _STOPPED.search(core) and text[k : k + 2] != "..":
            k += 1  # 'photography." [2].'
    if nxt in _DASHES:
        return core + (post if core else ""), k  # its spacing kept: "X [2]—Y", "X [2] — Y"
    if nxt in _CLOSERS or closing_quote:
        return core, k
    if not core or core.endswith("\n"):
        return core + pre, k  # a line's start: its indentation stays
    if core[-1] in "([【":
        return core, k
    return core + (" " if pre or post else ""), k


def _in_words(numbers: Sequence[int]) -> str:
    """Markers that are a sentence's subject, as words: "Source 2", "Sources 1, 3"."""
    return ("Sources " if len(numbers) > 1 else "Source ") + ", ".join(map(str, numbers))


def _run(text: str, marker: Marker) -> list[Marker]:
    """The markers joined to ``marker`` and after it ("[1] and [2]", "[1], Source [2]", side by
    side), ``marker`` first."""
    run = [marker]
    for after in _markers(text):
        if after.start < run[-1].end:
            continue
        k = run[-1].end
        while text[k : k + 1] in (" ", "\t"):
            k += 1
        joiner = _JOINER.match(text, k)  # joined as `_close` joins them
        if label_end(text, joiner.end() if joiner else k) != after.start:
            break
        run.append(after)
    return run


def _rewrite(
    text: str, keeps: Sequence[dict[int, int] | None], *, name_subjects: bool = True
) -> str:
    """Every marker rewritten through its own of ``keeps`` (old → new; None: removed), the
    text joined cleanly where one was removed. A sentence's subject left without a marker is
    named in words ("Source 2 shows ..."), or with ``name_subjects`` off left out, which is
    what the sentence states ("shows ...")."""
    out, i = "", 0
    for marker, keep in zip(_markers(text), keeps, strict=True):
        if marker.start < i:
            continue  # named with the subject before it
        out += text[i : marker.start]
        numbers = marker.numbers
        new = "" if keep is None else render(dict.fromkeys(keep[n] for n in numbers if n in keep))
        run = [marker] if new else _run(text, marker)
        stays = keep is not None and any(n in keep for m in run for n in m.numbers)
        label = None if new else LABEL_BEFORE.search(out)
        if label and not (stays and label[0].lower().startswith("sources")):
            out = out[: label.start()]  # "Sources [2] and [3]" keeps it while one stays
        end = run[-1].end
        if not new and not stays and _SENTENCE_START.search(out) and _VERB_NEXT.match(text, end):
            # the sentence's subject: named in words, so that the sentence keeps one
            named = (out + _in_words(list(dict.fromkeys(n for m in run for n in m.numbers))), end)
            out, i = named if name_subjects else _close(out, text, end)
            continue
        if not new and not stays and (phrase := opening_phrase(out, text, end)):
            out, i = phrase
            continue
        elif not new:
            out, i = _close(out, text, marker.end)
            continue
        if out[-1:].isalnum():
            new = " " + new  # "fever【2†source】" is "fever [1]"
        out, i = out + new, marker.end
        spaced = re.match(r"[ \t]+(?=[.,;:!?])", text[i : i + 8])  # "[2] ." -> "[2]."
        i += spaced.end() if spaced else 0
    out += text[i:]
    each = zip(_markers(text), keeps, strict=True)
    if any(k is not None and n not in k for m, k in each for n in m.numbers):
        out = one_left(out)  # "Sources [1] and [3] say" without 3
    return out


def strip_markers(text: str, *, name_subjects: bool = True) -> str:
    """``text`` without its citation markers, joined cleanly where they were; markers that are
    a sentence's subject named in words ("[2] shows X." is "Source 2 shows X."), or with
    ``name_subjects`` off left out ("shows X.": what the sentence states)."""
    return _rewrite(text, [None] * len(_markers(text)), name_subjects=name_subjects)


def remove_markers(text: str, numbers: Iterable[int] | None = None) -> str:
    """``text`` without the markers of ``numbers`` (None: all), joined cleanly where they were;
    the markers left are rendered canonically ("[1, 2, 3]" without 2 is "[1][3]")."""
    if numbers is None:
        return strip_markers(text)
    gone = set(numbers)
    return renumber(text, {n: n for n in cited_numbers(text) if n not in gone})


def renumber(text: str, mapping: dict[int, int] | Sequence[dict[int, int]]) -> str:
    """Rewrite markers through ``mapping`` (old → new) or one each; other numbers are dropped."""
    return _rewrite(text, [mapping] * len(_markers(text)) if isinstance(mapping, dict) else mapping)


#: canonical markers after a sentence's closing stop
_AFTER_STOP = re.compile(
    rf"(?:(?<=[.!?])|(?<=[.!?][{STOP_CLOSERS}]))[ \t]*((?:\[\d+\][ \t]*)+)(?:[.!?][ \t]*)?\Z"
)
_END_PUNCT = re.compile(rf"([.!?:;]+)([{STOP_CLOSERS}]*)\s*$")


def markers_last(sentence: str) -> str:
    """A sentence the model opened with its markers ("[1] The two main things ...") gets them at
    its end, where a reader expects them (and where Open WebUI's chips read naturally); markers
    that are the sentence's subject stay named in words ("[1] shows that X." → "Source 1 shows
    that X [1]."); markers written after its closing stop ("He dropped out. [3]") go before it.
    A number the sentence already cites is not written twice ("[1] He dropped out. [1]" keeps
    one)."""
    moved: list[int] = []
    after = _AFTER_STOP.search(sentence)
    if after:
        moved = [n for m in find_markers(after.group(1)) for n in m.numbers]
        sentence = sentence[: after.start()]
    stripped = sentence.lstrip()
    opening: list[int] = []
    end = 0
    for marker in find_markers(stripped):
        if stripped[end : marker.start].strip(" ,"):
            break
        opening.extend(marker.numbers)
        end = marker.end
    rest = stripped[end:].lstrip(" ,")
    if opening and rest.strip():
        if _VERB_NEXT.match(" " + rest):  # "[1] shows that X": the sentence's subject, in words
            rest = f"{_in_words(list(dict.fromkeys(opening)))} {rest}"
        sentence = sentence[: len(sentence) - len(stripped)] + rest
        moved = opening + moved
    present = {n for m in find_markers(sentence) for n in m.numbers}
    numbers = [n for n in dict.fromkeys(moved) if n not in present]
    return insert_marker(sentence, render(numbers)) if numbers else sentence


def insert_marker(sentence: str, marker: str) -> str:
    """Put ``marker`` at the end of the sentence, before its closing punctuation; a closing quote
    or bracket after the stop goes before the marker (``"data processing" [1].``), so the marker
    never lands inside a quotation, and the full stop of an abbreviation stays with it
    (``Washington, D.C. [1].``)."""
    stripped = sentence.rstrip()
    trailing = sentence[len(stripped) :]
    if is_table_row(stripped):  # in the row's last cell
        return f"{insert_marker(stripped[:-1].rstrip(), marker)} |{trailing}"
    match = _END_PUNCT.search(stripped)
    if match and match[1] == "." and closes_abbreviation(stripped, match.start()):
        return f"{stripped} {marker}.{trailing}"
    if match:
        return f"{stripped[: match.start()].rstrip()}{match[2]} {marker}{match[1]}{trailing}"
    return f"{stripped} {marker}{trailing}"
