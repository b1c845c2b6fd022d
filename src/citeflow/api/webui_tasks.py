"""Open WebUI's tasks (a chat's title, tags, follow-up questions) answered by the LLM alone."""

from __future__ import annotations

import json
from collections.abc import Sequence

from llama_index.core.llms import LLM, ChatMessage

from citeflow.workflows.upstream import upstream


async def answer_task(llm: LLM, messages: Sequence[ChatMessage]) -> str:
    """The LLM's reply to a task; the task asks for a JSON object, so when the reply is not
    valid JSON but contains one, that object (`extract_json`).

    Raises:
        UpstreamError: the LLM failed.
    """
    with upstream("LLM"):
        reply = await llm.achat(list(messages))
    return extract_json(reply.message.content or "")


def extract_json(text: str) -> str:
    """``text`` if it is JSON, else the first JSON object in it, else ``text`` unchanged."""
    stripped = text.strip()
    try:
        json.loads(stripped)
        return stripped
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    start = stripped.find("{")
    while start != -1:
        try:  # what parses from a "{" is an object
            end = decoder.raw_decode(stripped, start)[1]
            return stripped[start:end]
        except ValueError:
            start = stripped.find("{", start + 1)
    return stripped
