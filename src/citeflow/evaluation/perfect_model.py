"""A perfect-model harness: a fake LLM whose citations are known right, or known wrong.

citeflow checks every sentence's ``[N]`` markers against the sources and may keep, move, add or
remove them (`citeflow.citations.repair`). To measure that check apart from any real model's
mistakes, `PerfectAuthor` answers from gold evidence (`Gold`): one sentence per source that holds
gold evidence, cited with a source that truly holds it (``verbatim``, ``paraphrase``) or with one
that does not (``wrong``), and knows, per sentence, which sources are correct. `score_answer`
compares what it wrote with the answer citeflow returned: correct citations kept, wrong ones
fixed or removed, wrong ones added. `PerfectModelLLM` is the author as a LlamaIndex LLM, so the
real workflow can run with it in-process (``citeflow eval``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from pydantic import PrivateAttr

from citeflow.citations.markers import find_markers, render, strip_footnotes, strip_markers
from citeflow.citations.text import split_sentences, term_set
from citeflow.prompts import NOT_COVERED_ANSWER

Variant = Literal["verbatim", "paraphrase", "wrong"]
#: a source sentence this long that stands in gold evidence makes its source supporting
MIN_WORDS = 6
#: a paraphrase keeps at most this many words (cut at a clause boundary)
MAX_WORDS = 25
YES_NO = frozenset({"yes", "no", "maybe"})
#: a conversation: OpenAI-style message dicts or LlamaIndex messages
Messages = Sequence[Mapping[str, Any] | ChatMessage]


@dataclass(frozen=True)
class Gold:
    """A question and its gold evidence texts (HotpotQA: paragraphs; SciFact: single sentences;
    PubMedQA: abstract sections), with its short answer when the dataset has one."""

    question: str
    evidence: tuple[str, ...]
    answer: str | None = None


@dataclass(frozen=True)
class AuthoredSentence:
    """One sentence the author wrote: its text without markers, the source numbers that truly
    support it, and the numbers it was written with."""

    text: str
    correct: frozenset[int]
    written: tuple[int, ...]


# --- the prompt ----------------------------------------------------------------------------------

_HEADER = re.compile(r"^(?:More sources|Sources):[ \t]*$", re.MULTILINE)
_NUMBERED = re.compile(r"^\[(\d+)\](.*)$", re.MULTILINE)
_TITLE = re.compile(r" \(.*\)[ \t]*")
_QUESTION = "\n\nQuestion: "


def parse_prompt(text: str) -> tuple[str, list[tuple[int, str]]]:
    """The question and the numbered sources ``(N, text)`` of a citation prompt (QA or refine
    template, markers or evidence mode). The worked example above ``Sources:`` is not read; a
    prompt of another shape gives ``("", [])``."""
    header = _HEADER.search(text)
    at = text.rfind(_QUESTION)
    if header is None or at < header.end():
        return "", []
    rest = text[at + len(_QUESTION) :]
    question = rest.rsplit("\n", 1)[0] if "\n" in rest else rest  # the instruction line follows
    context = text[header.end() : at]
    heads = list(_NUMBERED.finditer(context))
    sources: list[tuple[int, str]] = []
    for i, head in enumerate(heads):
        body = context[head.end() : heads[i + 1].start() if i + 1 < len(heads) else len(context)]
        line = head.group(2)
        if line.strip() and not _TITLE.fullmatch(line):  # "[N] text": evidence mode
            body = line + body
        sources.append((int(head.group(1)), body.strip()))
    return question.strip(), sources


def _user_prompt(messages: Messages) -> str:
    """The last user message's text (OpenAI-style dicts or LlamaIndex messages)."""
    for message in reversed(messages):
        if isinstance(message, Mapping):
            role, content = message.get("role"), message.get("content")
        else:
            role, content = message.role, message.content
        if str(getattr(role, "value", role)) != "user":
            continue
        if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
            return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
        return str(content or "")
    return ""


# --- writing ------------------------------------------------------------------------------------


def _norm(text: str) -> str:
    """Whitespace and case normalised, without document footnotes (as the prompt shows them)."""
    return " ".join(strip_footnotes(text).split()).lower()


def _question_key(question: str) -> str:
    return " ".join(question.split())


_END = re.compile(r"[.!?][\"')\]]*$")


def _ended(sentence: str) -> str:
    """``sentence`` with final punctuation (a period when it has none)."""
    sentence = " ".join(sentence.split())
    return sentence if _END.search(sentence) else sentence.rstrip(",;: ") + "."


def _cite(text: str, numbers: Iterable[int]) -> str:
    """``"X is Y."`` → ``"X is Y [2]."``: the markers before the final punctuation."""
    end = _END.search(text)
    cut = end.start() if end else len(text)
    return f"{text[:cut]} {render(numbers)}{text[cut:]}"


_ASIDE = re.compile(r"\s*\([^()]*\)")
_CONNECTIVE = re.compile(
    r"^(?:however|moreover|furthermore|in addition|additionally|thus|therefore|also)\s*,\s*",
    re.IGNORECASE,
)
_LEADING_PHRASE = re.compile(
    r"^((?:in|on|at|during|after|before|since|by|from|under|following|throughout|within|among)"
    r"\b[^,;]{1,60}),\s+",
    re.IGNORECASE,
)
_CONJUNCTIONS = frozenset({"and", "but", "which", "while", "whereas", "although", "who"})
#: generic English swaps (no dataset words): the wording changes, the facts stay
_SYNONYMS = {
    word: new
    for word, _, new in (
        pair.partition(">")
        for pair in "founded>established,located>situated,known as>called,began>started,"
        "begins>starts,largest>biggest,received>got,approximately>about,built>constructed,"
        "purchased>bought,primarily>mainly,commonly>often,frequently>often,several>a number of,"
        "demonstrated>showed,reduced>lowered,famous>well known,film>movie".split(",")
    )
}
_SYNONYM = re.compile(
    r"\b(" + "|".join(sorted(map(re.escape, _SYNONYMS), key=len, reverse=True)) + r")\b",
    re.IGNORECASE,
)


def _swap(match: re.Match[str]) -> str:
    word = match.group(0)
    new = _SYNONYMS[word.lower()]
    return new[0].upper() + new[1:] if word[0].isupper() else new


def _shorten(text: str) -> str:
    """At most `MAX_WORDS` words, cut after the last clause boundary (a comma, a semicolon, or
    before a conjunction) that keeps 8 or more; a sentence with no such boundary stays whole."""
    words = text.split()
    if len(words) <= MAX_WORDS:
        return text
    for i in range(MAX_WORDS - 1, 7, -1):
        if words[i][-1] in ",;:":
            return " ".join(words[: i + 1]).rstrip(",;:") + "."
        if words[i].lower() in _CONJUNCTIONS:
            return " ".join(words[:i]).rstrip(",;:") + "."
    return text


def paraphrase(sentence: str) -> str:
    """A deterministic light paraphrase: no parenthetical asides or leading connective
    ("However, "), at most ~25 words, a few generic synonyms, and a short leading prepositional
    phrase moved to the end ("In 1998, X did Y." → "X did Y in 1998.")."""
    text = _CONNECTIVE.sub("", _ASIDE.sub("", _ended(sentence)))
    text = _SYNONYM.sub(_swap, _shorten(text))
    end = _END.search(text)
    body, tail = (text[: end.start()], end.group(0)) if end else (text, ".")
    lead = _LEADING_PHRASE.match(body)
    rest = body[lead.end() :] if lead else ""
    if lead and len(lead.group(1).split()) <= 6 and len(rest.split()) >= 3 and "," not in rest:
        body = f"{rest} {lead.group(1)[0].lower()}{lead.group(1)[1:]}"
    return body[:1].upper() + body[1:] + tail


@dataclass(frozen=True)
class _GoldIndex:
    gold: Gold
    texts: tuple[str, ...]  # every evidence text, normalised
    sentences: tuple[tuple[str, str], ...]  # single-sentence evidence: (normalised, tidied)

    @classmethod
    def of(cls, gold: Gold) -> _GoldIndex:
        singles = tuple(
            (_norm(e), " ".join(strip_footnotes(e).split()))
            for e in gold.evidence
            if len(split_sentences(e.strip())) == 1
        )
        return cls(gold, tuple(_norm(e) for e in gold.evidence), singles)

    def sentences_in(self, source: str) -> list[str]:
        """The sentences of ``source`` that lie in gold evidence, in source order: a source
        sentence of `MIN_WORDS`+ words found in an evidence text, or a single-sentence evidence
        text found in the source."""
        whole = _norm(source)
        found: list[tuple[int, int, str]] = []
        for sentence in split_sentences(source):
            norm = _norm(sentence)
            if len(norm.split()) >= MIN_WORDS and any(norm in text for text in self.texts):
                found.append((whole.find(norm), 0, " ".join(sentence.split())))
        for norm, tidied in self.sentences:
            if norm and (at := whole.find(norm)) >= 0:
                found.append((at, 1, tidied))
        return list(dict.fromkeys(text for _, _, text in sorted(found)))


class PerfectAuthor:
    """Writes answers whose citations are known: each sentence from gold evidence, cited with
    its own source (``verbatim``: copied; ``paraphrase``: reworded by `paraphrase`) or with a
    source that does not support it (``wrong``). A refine prompt is answered from its own sources
    only (the existing answer is not repeated): score runs whose sources fit one prompt."""

    def __init__(self, golds: Iterable[Gold], variant: Variant) -> None:
        self.variant = variant
        self._golds = {_question_key(g.question): _GoldIndex.of(g) for g in golds}

    def reply(self, messages: Messages) -> str:
        """The answer to the prompt in ``messages``' last user message, markers in place."""
        return render_reply(self.authored(messages))

    def authored(self, messages: Messages) -> list[AuthoredSentence]:
        """The sentences `reply` writes (none: the documents do not cover the question)."""
        question, sources = parse_prompt(_user_prompt(messages))
        index = self._golds.get(_question_key(question))
        if index is None or not sources:
            return []
        found = {number: index.sentences_in(text) for number, text in sources}
        supporting = [number for number, _ in sources if found[number]]
        norms = {number: _norm(text) for number, text in sources}
        numbers = [number for number, _ in sources]
        out: list[AuthoredSentence] = []
        seen: set[str] = set()
        for number in supporting:  # one sentence per source, none written twice
            sentence = next((s for s in found[number] if _norm(s) not in seen), None)
            if sentence is None:
                continue
            seen.add(_norm(sentence))
            correct = frozenset(n for n in supporting if _norm(sentence) in norms[n])
            text = paraphrase(sentence) if self.variant == "paraphrase" else _ended(sentence)
            out.append(
                AuthoredSentence(text, correct, (self._number(number, numbers, supporting),))
            )
        answer = " ".join((index.gold.answer or "").split())
        if out and answer:
            if answer.lower() in YES_NO:
                holders, answer = supporting, answer.lower()
            else:
                holders = [n for n in supporting if answer.lower() in norms[n]]
            if holders:
                text = f"The answer is {answer.rstrip('.')}."
                written = (self._number(holders[0], numbers, supporting),)
                # any supporting source that names the answer in its own words ("Pasek and
                # Paul" for "Pasek & Paul") supports the sentence too
                terms = term_set(answer)
                named = {n for n, t in sources if n in supporting and terms <= term_set(t)}
                correct = frozenset(holders) | (named if terms else frozenset())
                out.append(AuthoredSentence(text, correct, written))
        return out

    def _number(self, number: int, numbers: list[int], supporting: list[int]) -> int:
        """The number to cite a sentence of source ``number`` with: itself, or (``wrong``) the
        next source that supports nothing, cyclically, else a number past the last source."""
        if self.variant != "wrong":
            return number
        at = numbers.index(number)
        ring = numbers[at + 1 :] + numbers[: at + 1]
        return next((n for n in ring if n not in supporting), max(numbers) + 1)


def render_reply(authored: Sequence[AuthoredSentence]) -> str:
    """The reply text of ``authored`` sentences (each cited as written), or the not-covered
    answer when there are none."""
    if not authored:
        return NOT_COVERED_ANSWER
    return " ".join(_cite(s.text, s.written) for s in authored)


# --- scoring ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PerfectScore:
    """What citeflow did with an author's markers (one answer, or a sum of them)."""

    sentences: int = 0  # authored sentences
    unaligned: int = 0  # authored sentences not found in the final text
    correct_written: int = 0
    correct_kept: int = 0  # still on their sentence
    wrong_written: int = 0
    wrong_kept: int = 0  # still on their sentence
    wrong_fixed: int = 0  # gone, and the sentence cites a correct source
    wrong_removed: int = 0  # gone, and no correct source added
    wrong_added: int = 0  # numbers on a final sentence neither written nor correct

    def merge(self, other: PerfectScore) -> PerfectScore:
        """The field-by-field sum of two scores."""
        return PerfectScore(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    @classmethod
    def total(cls, scores: Iterable[PerfectScore]) -> PerfectScore:
        """The sum of ``scores`` (over answers)."""
        return functools.reduce(cls.merge, scores, cls())

    @property
    def kept_rate(self) -> float | None:
        """Share of correct markers kept (None: none written)."""
        return self.correct_kept / self.correct_written if self.correct_written else None

    @property
    def fixed_or_removed_rate(self) -> float | None:
        """Share of wrong markers fixed or removed (None: none written)."""
        done = self.wrong_fixed + self.wrong_removed
        return done / self.wrong_written if self.wrong_written else None


def _key(text: str) -> str:
    """A sentence's words, lower-cased, without markers or punctuation: what tidying keeps."""
    return " ".join(re.findall(r"\w+", strip_markers(text).lower()))


def _final_sentences(text: str) -> list[tuple[str, set[int]]]:
    """The final text's sentences as (key, cited numbers); a sentence of markers only (a marker
    after the period) belongs to the sentence before it."""
    out: list[tuple[str, set[int]]] = []
    for sentence in split_sentences(text):
        numbers = {n for marker in find_markers(sentence) for n in marker.numbers}
        key = _key(sentence)
        if not key and out:
            out[-1][1].update(numbers)
        else:
            out.append((key, numbers))
    return out


def _align(key: str, finals: list[tuple[str, set[int]]], cursor: int) -> tuple[int, int] | None:
    """The first run of final sentences from ``cursor`` (up to 4: a split sentence) whose keys
    join to ``key``."""
    for start in range(cursor, len(finals)):
        joined = ""
        for stop in range(start + 1, min(start + 4, len(finals)) + 1):
            joined = f"{joined} {finals[stop - 1][0]}".strip()
            if joined == key:
                return start, stop
            if not key.startswith(joined):
                break
    return None


def score_answer(authored: Sequence[AuthoredSentence], final_text: str) -> PerfectScore:
    """Compare the authored sentences with citeflow's final answer, sentence by sentence in
    order (matched by their marker-free words, so tidied punctuation and moved markers count as
    the same sentence)."""
    finals = _final_sentences(final_text)
    counts = dict.fromkeys((f.name for f in fields(PerfectScore)), 0)
    counts["sentences"] = len(authored)
    cursor = 0
    for sentence in authored:
        span = _align(_key(sentence.text), finals, cursor)
        cited: set[int] | None = None
        if span is None:
            counts["unaligned"] += 1
        else:
            cursor = span[1]
            cited = set().union(*(finals[i][1] for i in range(*span)))
            counts["wrong_added"] += len(cited - set(sentence.written) - sentence.correct)
        for number in sentence.written:
            kind = "correct" if number in sentence.correct else "wrong"
            counts[f"{kind}_written"] += 1
            if cited is None:
                continue
            if number in cited:
                counts[f"{kind}_kept"] += 1
            elif kind == "wrong":
                counts["wrong_fixed" if cited & sentence.correct else "wrong_removed"] += 1
    return PerfectScore(**counts)


# --- the LLM -----------------------------------------------------------------------------------


class PerfectModelLLM(CustomLLM):
    """`PerfectAuthor` as a LlamaIndex chat LLM: every chat is answered with its reply, streamed
    word by word. `authored_for` gives what it wrote for a question (its last prompt's)."""

    context_window: int = 32768
    _author: PerfectAuthor = PrivateAttr()
    _authored: dict[str, list[AuthoredSentence]] = PrivateAttr(default_factory=dict)

    def __init__(self, author: PerfectAuthor, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._author = author

    @classmethod
    def class_name(cls) -> str:
        """LlamaIndex's name for this class."""
        return "citeflow_perfect_model"

    @property
    def metadata(self) -> LLMMetadata:
        """A chat model with a context large enough for any citation prompt."""
        return LLMMetadata(
            context_window=self.context_window,
            num_output=1024,
            is_chat_model=True,
            model_name=f"perfect-{self._author.variant}",
            system_role=MessageRole.SYSTEM,
        )

    def authored_for(self, question: str) -> list[AuthoredSentence]:
        """The sentences of the last reply to ``question`` (none if it was never asked)."""
        return list(self._authored.get(_question_key(question), []))

    def _reply(self, messages: Messages) -> str:
        authored = self._author.authored(messages)
        question, _ = parse_prompt(_user_prompt(messages))
        self._authored[_question_key(question)] = authored
        return render_reply(authored)

    def _pieces(self, messages: Messages) -> list[str]:
        return re.findall(r"\S+\s*|\s+", self._reply(messages))

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """The reply to ``prompt`` taken as the user message."""
        return CompletionResponse(text=self._reply([{"role": "user", "content": prompt}]))

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        """`complete`, word by word."""
        words = self._pieces([{"role": "user", "content": prompt}])
        return (
            CompletionResponse(text="".join(words[: i + 1]), delta=w) for i, w in enumerate(words)
        )

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """The reply to the last user message."""
        return ChatResponse(message=_assistant(self._reply(messages)))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        """`chat`, word by word (the async methods stream through it)."""
        words = self._pieces(messages)
        return (
            ChatResponse(message=_assistant("".join(words[: i + 1])), delta=w)
            for i, w in enumerate(words)
        )


def _assistant(text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.ASSISTANT, content=text)
