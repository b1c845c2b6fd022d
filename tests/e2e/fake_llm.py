"""The e2e test's LLM: a deterministic reply function for `FakeOpenAIServer`.

Answer prompts (citeflow's ``CITATION_QA_TEMPLATE``: ``[N] (title)`` blocks under ``Sources:``)
get one sentence copied from two different sources, each followed by its marker: from the first
source and from the first source of another document (else the second source), e.g.
``"<sentence of source 1> [1]. <sentence of source 3> [3]."``; from each, the plain sentence that
shares most words with the question, as an answer would. Copied sentences are fully supported and
bear on the question, so citeflow's citation check keeps both markers, and the sources that were
given but not used are the ones Open WebUI must not list. Open WebUI's ``### Task:`` requests
(title, tags, follow-ups) get a small JSON object valid for each of them.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field

from citeflow.testing.openai_replies import RecordedRequest, default_reply, last_user_text

TASK_PREFIX = "### Task:"
TASK_REPLY = json.dumps(
    {"title": "Ducks and the essay", "tags": ["e2e"], "follow_ups": ["What else?"]}
)

_HEADING = re.compile(r"^\[(\d+)\](?: \(([^\n]*)\))?\n", re.MULTILINE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
#: plain prose: no Markdown, brackets or quotes that rendering or marker parsing could change
_PLAIN = re.compile(r"[A-Z][A-Za-z0-9 ,;:'’()-]+\.")


@dataclass(frozen=True)
class Block:
    """One ``[N] (title)`` source block of a prompt."""

    number: int
    title: str
    text: str


@dataclass(frozen=True)
class Answer:
    """What the fake answered to one answer prompt."""

    sources: list[Block]
    #: (source number in the prompt, copied sentence), in answer order
    cited: list[tuple[int, str]]
    text: str


@dataclass
class CitingLLM:
    """The reply function (call it with a `RecordedRequest`); keeps every `Answer` it gave."""

    answers: list[Answer] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: RecordedRequest) -> str:
        prompt = last_user_text(request)
        if prompt.lstrip().startswith(TASK_PREFIX):
            return TASK_REPLY
        blocks = source_blocks(prompt)
        if not blocks:
            return default_reply(request)
        answer = cite_two(blocks, question_of(prompt))
        with self._lock:
            self.answers.append(answer)
        return answer.text


def source_blocks(prompt: str) -> list[Block]:
    """The ``[N] (title)`` blocks between ``Sources:`` and ``Question:`` (the example that comes
    before them is skipped)."""
    start = prompt.rfind("\nSources:\n")
    end = prompt.rfind("\n\nQuestion:")
    if start < 0 or end < start:
        return []
    section = prompt[start + len("\nSources:\n") : end]
    headings = list(_HEADING.finditer(section))
    blocks = []
    for i, heading in enumerate(headings):
        stop = headings[i + 1].start() if i + 1 < len(headings) else len(section)
        text = section[heading.end() : stop].strip()
        blocks.append(Block(int(heading.group(1)), heading.group(2) or "", text))
    return blocks


def question_of(prompt: str) -> str:
    """The question line of an answer prompt (after the sources)."""
    at = prompt.rfind("\n\nQuestion:")
    return prompt[at + len("\n\nQuestion:") :].strip().split("\n", 1)[0] if at >= 0 else ""


def _words(text: str) -> set[str]:
    return {w[:5] for w in re.findall(r"[a-z]{4,}", text.lower())}  # crude stems


def plain_sentence(text: str, question: str = "") -> str | None:
    """The sentence of ``text`` that is plain prose of 6 to 40 words within one line and shares
    most words with ``question`` (the first of them on a tie)."""
    asked = _words(question)
    best: tuple[int, str] | None = None
    for line in text.splitlines():
        for sentence in _SENTENCE_END.split(" ".join(line.split())):
            if _PLAIN.fullmatch(sentence) and 6 <= len(sentence.split()) <= 40:
                shared = len(asked & _words(sentence))
                if best is None or shared > best[0]:
                    best = (shared, sentence)
    return best[1] if best else None


def cite_two(blocks: list[Block], question: str = "") -> Answer:
    """Cite the first usable source, then the usable one of another document (else any other
    one) whose sentence shares most words with the question."""
    usable = [(b, s) for b in blocks if (s := plain_sentence(b.text, question)) is not None]
    if not usable:
        return Answer(blocks, [], "The documents do not cover this question.")
    first = usable[0]
    others = [u for u in usable[1:] if u[0].title != first[0].title] or usable[1:2]
    asked = _words(question)
    others.sort(key=lambda u: -len(asked & _words(u[1])))  # stable: the first on a tie
    picks = [first, *others[:1]]
    text = " ".join(f"{sentence[:-1]} [{block.number}]." for block, sentence in picks)
    return Answer(blocks, [(block.number, sentence) for block, sentence in picks], text)
