"""Citing by construction: the model answers in JSON where every sentence names its sources.

The reply is constrained to `ANSWER_SCHEMA` (llama.cpp turns the schema into a grammar for the
local model; OpenAI and Azure OpenAI take it as a strict structured output, `response_format`)::

    {"sentences": [{"sources": [1, 3], "text": "Paris is the capital of France."}, ...]}

``sources`` comes before ``text`` on purpose: the model commits to its evidence before it writes
the sentence. `answer_schema` restricts the numbers to the sources shown (an ``enum``, which both
llama.cpp and OpenAI's strict mode enforce); an empty list is allowed, for a sentence that states
nothing from the sources ("The documents do not cover this.").

`StructuredSentenceStream` reads that JSON as it streams and gives back each sentence as soon as
its object is complete, as answer text with its markers (``"Paris is the capital [1][3]. "``), so
the rest of the pipeline (`citeflow.citations.answer.RepairedAnswer`) checks it like any answer
text. A reply that is not JSON (a model that ignored the schema) is passed through unchanged.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from citeflow.citations.markers import cited_numbers, insert_marker, render

__all__ = [
    "ANSWER_SCHEMA",
    "RESPONSE_FORMAT_NAME",
    "StructuredSentenceStream",
    "answer_schema",
    "render_sentence",
    "response_format",
]


def answer_schema(source_count: int) -> dict[str, Any]:
    """The JSON schema of a cited answer with the source numbers restricted to
    ``1..source_count`` (an ``enum``).

    With no sources (``source_count < 1``) the numbers are left unrestricted (an empty ``enum``
    is not a valid schema everywhere): that is `ANSWER_SCHEMA`. The citation repair drops
    numbers out of range anyway.
    """
    number: dict[str, Any] = {"type": "integer"}
    if source_count >= 1:
        number["enum"] = list(range(1, source_count + 1))
    sentence = {
        "type": "object",
        "properties": {"sources": {"type": "array", "items": number}, "text": {"type": "string"}},
        "required": ["sources", "text"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {"sentences": {"type": "array", "items": sentence}},
        "required": ["sentences"],
        "additionalProperties": False,
    }


#: The JSON schema of a cited answer: sentences, each with its source numbers, then its text.
ANSWER_SCHEMA: dict[str, Any] = answer_schema(0)

#: The schema's name in an OpenAI-style ``response_format``.
RESPONSE_FORMAT_NAME = "cited_answer"


def response_format(source_count: int) -> dict[str, Any]:
    """The OpenAI-style ``response_format`` asking for `answer_schema` (strict structured
    output); llama.cpp's chat completions take the same object."""
    return {
        "type": "json_schema",
        "json_schema": {
            "name": RESPONSE_FORMAT_NAME,
            "strict": True,
            "schema": answer_schema(source_count),
        },
    }


_SURROGATE = re.compile("[\ud800-\udfff]")
_SOURCES_KEY = re.compile(r'"sources"\s*:\s*\[([^\]"{}]*)(\]?)')
# the content of the "text" string: up to its closing quote, else to the end (a dangling escape
# too, which `_decode_partial` drops)
_TEXT = re.compile(r'"text"\s*:\s*"((?:[^"\\]|\\.)*\\?)', re.DOTALL)
_COMPLETE_NUMBER = re.compile(r"-?\d+(?=\s*,)")


def _number(value: Any) -> int | None:
    """A source number as the model wrote it (``2``, ``2.0``, ``"2"``); None if not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    return None


def render_sentence(text: str, sources: Any) -> str:
    """One answer sentence as text: ``text`` with markers for ``sources`` before its final
    punctuation (``"Paris is the capital [1][3]."``); "" when the text is empty.

    Numbers are kept as given (out of range ones too: the citation repair drops them); numbers
    the text already cites with its own markers are not added twice.
    """
    text = _SURROGATE.sub("", text).strip()
    if not text:
        return ""
    values = sources if isinstance(sources, list) else []
    numbers = [n for v in values if (n := _number(v)) is not None]
    present = set(cited_numbers(text))
    missing = [n for n in dict.fromkeys(numbers) if n not in present]
    return insert_marker(text, render(missing)) if missing else text


def _decode_partial(content: str) -> str:
    """The text of a JSON string cut short (without its closing quote); a dangling escape at
    the end is dropped."""
    for cut in range(min(len(content), 6) + 1):
        try:
            decoded = json.loads(f'"{content[: len(content) - cut]}"', strict=False)
        except ValueError:
            continue
        return decoded if isinstance(decoded, str) else ""
    return ""


def _recover(fragment: str) -> str:
    """What can be read of one sentence object from its (possibly broken or cut-off) JSON."""
    text = _TEXT.search(fragment)
    if text is None:
        return ""
    sources: list[int] = []
    found = _SOURCES_KEY.search(fragment)
    if found is not None:
        inner = found.group(1) + ("," if found.group(2) else "")
        sources = [int(n) for n in _COMPLETE_NUMBER.findall(inner)]
    return render_sentence(_decode_partial(text.group(1)), sources)


Mode = Literal["start", "json", "plain", "done"]


class StructuredSentenceStream:
    """Feed the text deltas of a streamed `ANSWER_SCHEMA` reply; get back answer text.

    Each sentence object is returned as soon as it is complete, rendered by `render_sentence`
    and followed by one space, so that the pieces joined are the answer text. A sentence with
    empty text is skipped. A reply whose first non-space character is not ``{`` (a model that
    wrote prose; a ```` ```json ```` fence before the JSON is skipped) is passed through
    unchanged. At the end, `flush` gives what can be read of a sentence the reply cut short;
    nothing here raises on malformed JSON.

    A hand-written scanner: it tracks strings, escapes and the stack of open objects and arrays;
    an object that closes directly inside an array is a sentence, parsed with ``json``.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._mode: Mode = "start"
        self._buffer = ""
        self._pos = 0
        self._in_string = False
        self._escape = False
        self._stack: list[tuple[str, int]] = []  # open containers: "{" or "[", start index

    def feed(self, delta: str) -> list[str]:
        """Add ``delta``; the answer text of the sentences it completed."""
        if self._mode == "plain":
            return [delta] if delta else []
        if self._mode == "done" or not delta:
            return []
        self._buffer += delta
        if self._mode == "start" and (passed := self._decide()) is not None:
            return [passed]
        return self._scan() if self._mode == "json" else []

    def flush(self) -> list[str]:
        """The end of the reply: what is left (a cut-off sentence's readable text, or the text
        of a reply too short to tell). Resets the stream for another reply."""
        out: list[str] = []
        if self._mode == "start" and self._buffer.strip():
            out.append(self._buffer)  # never decided: not JSON
        elif self._mode == "json":
            item = self._open_item()
            if item is not None and (sentence := _recover(self._buffer[item:])):
                out.append(sentence + " ")
        self._reset()
        return out

    # --- the scanner -----------------------------------------------------------------------

    def _decide(self) -> str | None:
        """Look at the start of the reply: JSON (mode "json", the buffer cut to the opening
        brace), prose (mode "plain"; returns the text to pass on, never empty), or too soon to
        tell."""
        head = self._buffer.lstrip()
        if "```".startswith(head[:3]):  # nothing yet, or a code fence (or the start of one)
            newline = head.find("\n")
            if newline < 0:
                return None
            head = head[newline + 1 :].lstrip()  # what the fence holds
            if not head:
                return None
        if head.startswith("{"):
            self._buffer, self._mode = head, "json"
            return None
        self._mode = "plain"
        passed, self._buffer = self._buffer, ""
        return passed

    def _scan(self) -> list[str]:
        out: list[str] = []
        buffer = self._buffer
        for index in range(self._pos, len(buffer)):
            char = buffer[index]
            if self._in_string:
                if self._escape:
                    self._escape = False
                elif char == "\\":
                    self._escape = True
                elif char == '"':
                    self._in_string = False
            elif char == '"':
                self._in_string = True
            elif char in "{[":
                self._stack.append((char, index))
            elif char in "}]" and self._stack:
                opener, start = self._stack.pop()
                is_item = opener == "{" and self._stack and self._stack[-1][0] == "["
                if is_item and (sentence := self._sentence(buffer[start : index + 1])):
                    out.append(sentence + " ")
                if not self._stack:  # the answer object is complete: ignore what follows
                    self._mode = "done"
                    break
        self._pos = len(buffer)
        return out

    def _open_item(self) -> int | None:
        """Where the innermost sentence object still open starts."""
        for depth in range(len(self._stack) - 1, 0, -1):
            if self._stack[depth][0] == "{" and self._stack[depth - 1][0] == "[":
                return self._stack[depth][1]
        return None

    @staticmethod
    def _sentence(fragment: str) -> str:
        try:
            item = json.loads(fragment, strict=False)
        except ValueError:
            return _recover(fragment)
        if not isinstance(item, dict) or not isinstance(item.get("text"), str):
            return ""
        return render_sentence(item["text"], item.get("sources"))
