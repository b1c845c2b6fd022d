"""Cutting a stream of LLM tokens into whole sentences, markers included.

A sentence is complete once its terminator (``.``, ``!``, ``?``), any citation markers after it,
the following whitespace and the first character of the next sentence have arrived, or at a line
break. A full stop that closes an abbreviation, or an exclamation mark in a name, ends no
sentence (`ends_no_sentence`). Each segment is returned with its trailing whitespace, so joining
the segments gives back the streamed text exactly.
"""

from __future__ import annotations

import re

from citeflow.citations.text import ends_no_sentence

_STOP = r"[.!?][\"')\]]*"  # a terminator and the quotes or brackets it closes
_MARKER = r"(?:\[[^\[\]\n]{1,24}\]|【[^】\n]{1,24}】)"
_SOURCES = r"\([ \t]*(?:see[ \t]+(?:also[ \t]+)?)?[Ss]ources?\b"  # "(Source", "(see Sources"
_BOUNDARY = re.compile(
    # markers after the stop that open the next sentence as its subject ("[2] further shows
    # that"): the sentence ends before them, as `citeflow.citations.text.sentence_spans` has it
    rf"{_STOP}[ \t]+(?={_MARKER}(?:[ \t]*{_MARKER})*[ \t]+[a-z])"
    # else markers after the stop on its line are the sentence's own ("He dropped out. [3]
    # Then ..."); those that open the next line open the next sentence ("out.\n[3] Then ...")
    # (a stop written again after them, "out. [3]. Then", is the same sentence's end)
    rf"|{_STOP}(?:[ \t]*{_MARKER}|[ \t]*{_SOURCES}[ \t]*:?[\d ,]+\))*"
    rf"(?:(?<=[\]】)])[.!?])?[ \t]+(?=[^\s\[【a-z])(?!{_SOURCES})"
    r"|\n+",
)


#: how a bracketed marker after a sentence's stop opens ("out. (Source 3)."), lower-cased
_MARKER_OPENINGS = ("(source", "(see source", "(see also source")


def _may_open_a_marker(rest: str) -> bool:
    """Whether ``rest``, all that has arrived after a possible sentence end, may still turn out
    to be a bracketed marker that belongs to the sentence before it."""
    said = " ".join(rest.lower().split()).replace("( ", "(")
    return bool(said) and any(opening.startswith(said) for opening in _MARKER_OPENINGS)


class SentenceStream:
    """Feed text deltas; get back complete sentence segments."""

    def __init__(self) -> None:
        self._buffer = ""

    def feed(self, delta: str) -> list[str]:
        """Add ``delta`` and return the segments it completed."""
        self._buffer += delta
        out: list[str] = []
        start = 0  # where to look for the next boundary
        while (match := _BOUNDARY.search(self._buffer, start)) is not None:
            if ends_no_sentence(self._buffer, match.start()):
                start = match.start() + 1
                continue
            end = match.end()
            # a run of newlines may go on in the next delta; take it whole only when followed
            if "\n" in match.group(0) and end == len(self._buffer):
                break
            # "et al. (" may go on "2019)", and "out. (S" "ource 3)": not yet a sentence's end
            if _may_open_a_marker(self._buffer[end:]):
                break
            out.append(self._buffer[:end])
            self._buffer = self._buffer[end:]
            start = 0
        return out

    def flush(self) -> list[str]:
        """Whatever is left at the end of the stream."""
        rest, self._buffer = self._buffer, ""
        return [rest] if rest else []
