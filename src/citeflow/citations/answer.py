"""An answer checked sentence by sentence as its text arrives: what the workflow streams, and
what a re-check of a recorded answer rebuilds (`check_text`). Each sentence goes through a
`citeflow.citations.repair.CitationChecker`; the pieces come out in the answer's order."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from citeflow.citations.markers import find_markers, strip_markers
from citeflow.citations.repair import CheckedSentence, Citation, CitationChecker
from citeflow.citations.stream import SentenceStream
from citeflow.citations.text import word_terms


@dataclass(frozen=True, slots=True)
class AnswerPiece:
    """A checked piece of an answer (a sentence and the space after it) and the source numbers
    its markers name, in their order."""

    text: str
    citations: tuple[int, ...] = ()


class RepairedAnswer:
    """An answer checked sentence by sentence as its text arrives (`SentenceStream` segments,
    each checked by a `CitationChecker`): what the workflow streams and what a re-check of a
    recorded answer rebuilds.

    With a verifier that waits on a model (`CitationVerifier.waits`: the LLM judge), a
    sentence's check starts as soon as the sentence is complete and runs while the next ones
    arrive and are checked, up to `CHECKS_IN_FLIGHT` at once; pieces still come out in the
    answer's order. Other checks run in place.

    A sentence that repeats one of the answer's earlier sentences word for word (markers aside)
    says nothing new and is left out (`repeats` counts them); after `LOOP_REPEATS` of them the
    model is going round in a loop (`looping`): the workflow stops reading it, and a re-check of
    its recorded text leaves out the rest the same way.
    """

    #: sentences checked at once with a waiting verifier (each asks the judge 1-3 questions)
    CHECKS_IN_FLIGHT = 4
    #: repeated sentences after which an answer is taken to be looping
    LOOP_REPEATS = 2

    def __init__(self, checker: CitationChecker) -> None:
        self._checker = checker
        self._stream = SentenceStream()
        self._parts: list[str] = []
        self._space = ""  # the space after the last sentence kept, sent with the next one
        self._pending: deque[tuple[str, asyncio.Future[CheckedSentence]]] = deque()
        self.citations: list[Citation] = []
        self.unsupported: list[str] = []
        self._said: set[tuple[str, ...]] = set()
        self.repeats = 0

    async def feed(self, delta: str) -> list[AnswerPiece]:
        """The checked pieces ready once ``delta`` is in, in order (empty ones left out)."""
        for segment in self._stream.feed(delta):
            await self._start(segment)
        return self._ready()

    async def rest(self) -> AsyncIterator[AnswerPiece]:
        """The checked pieces of the rest of the answer, each as soon as its check and those
        before it have finished."""
        for segment in self._stream.flush():
            await self._start(segment)
        while self._pending:
            head = self._pending[0][1]
            if not head.done():  # a finished check (every word-support one) needs no wait
                await asyncio.wait([head])
            for piece in self._ready():
                yield piece

    async def flush(self) -> list[AnswerPiece]:
        """The checked pieces of the rest of the answer (`rest`, all at once)."""
        return [piece async for piece in self.rest()]

    def cancel(self) -> None:
        """Stop the checks still running (the answer was abandoned)."""
        for _, check in self._pending:
            check.cancel()
        self._pending.clear()

    @property
    def text(self) -> str:
        return "".join(self._parts)

    @property
    def looping(self) -> bool:
        """Whether the model has repeated itself `LOOP_REPEATS` times: it is going round."""
        return self.repeats >= self.LOOP_REPEATS

    async def _start(self, segment: str) -> None:
        if self.looping:  # what a looping model writes next is left out, as it is unread live
            return
        said = tuple(word_terms(strip_markers(segment)))
        if said in self._said:
            self.repeats += 1
            return
        if said:
            self._said.add(said)
        check = self._checker.check(segment.rstrip())
        if self._checker.verifier.waits:
            running = [c for _, c in self._pending if not c.done()]
            if len(running) >= self.CHECKS_IN_FLIGHT:
                await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            self._pending.append((segment, asyncio.ensure_future(check)))
            return
        done = asyncio.get_running_loop().create_future()
        done.set_result(await check)
        self._pending.append((segment, done))

    def _ready(self) -> list[AnswerPiece]:
        pieces = []
        while self._pending and self._pending[0][1].done():
            segment, check = self._pending.popleft()
            if piece := self._add(segment, check.result()):
                pieces.append(piece)
        return pieces

    def _add(self, segment: str, checked: CheckedSentence) -> AnswerPiece | None:
        tail = segment[len(segment.rstrip()) :]
        if not checked.text:  # left out: its space only counts between two sentences kept
            if "\n" in tail and "\n" not in self._space:
                self._space = tail
            return None
        # the space after a sentence goes out with the next one, so that the streamed text
        # never ends in space the answer does not have (the last sentence left out, a loop cut)
        piece = (self._space if self._parts else "") + checked.text
        self._space = tail
        self.citations.extend(checked.citations)
        if checked.unsupported:
            self.unsupported.append(strip_markers(checked.text).strip())
        self._parts.append(piece)
        return AnswerPiece(piece, checked.numbers)


async def check_text(checker: CitationChecker, text: str) -> RepairedAnswer:
    """Check a whole answer text exactly as the workflow checks it while streaming: re-checking
    a model's recorded reply gives the answer, citations and unsupported sentences the workflow
    returned."""
    answer = RepairedAnswer(checker)
    await answer.feed(text)
    await answer.flush()
    return answer


def citation_actions(citations: Sequence[Citation], raw_text: str) -> dict[str, int]:
    """What checking did to one answer's citations: the model's kept, moved to a supporting
    source, added where it cited none, and removed (the model's markers in ``raw_text`` that
    neither stayed nor moved)."""
    counts = {"kept": 0, "moved": 0, "added": 0}
    for citation in citations:
        counts["kept" if citation.origin == "model" else citation.origin] += 1
    written = sum(len(marker.numbers) for marker in find_markers(raw_text))
    counts["removed"] = max(0, written - counts["kept"] - counts["moved"])
    return counts
