"""Reading a citation prompt: the question and the numbered sources the model is shown."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage

__all__ = ["Messages", "parse_prompt", "question_key", "user_prompt"]

#: a conversation: OpenAI-style message dicts or LlamaIndex messages
Messages = Sequence[Mapping[str, Any] | ChatMessage]

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
    question = rest.rsplit("\n", 1)[0]  # the instruction line follows
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


def user_prompt(messages: Messages) -> str:
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


def question_key(question: str) -> str:
    """A question with its whitespace normalised (how the author looks it up)."""
    return " ".join(question.split())
