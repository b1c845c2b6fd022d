"""Query rewriting: a standalone query from a chat, and new queries when a search fails."""

from __future__ import annotations

from collections.abc import Sequence

from llama_index.core.llms import LLM, ChatMessage

from citeflow.prompts import RETRY_HYPOTHETICAL_PROMPT, RETRY_KEYWORDS_PROMPT, REWRITE_PROMPT

_MAX_TURN_CHARS = 600


def _first_line(text: str, fallback: str) -> str:
    for line in text.strip().splitlines():
        cleaned = line.strip().strip('"').strip()
        for prefix in ("Standalone query:", "Query:", "Keywords:", "Sentences:"):
            if cleaned.lower().startswith(prefix.lower()):
                cleaned = cleaned[len(prefix) :].strip()
        if cleaned:
            return cleaned
    return fallback


#: output caps of the short calls: a query is one line, a hypothetical answer a short paragraph
#: (without them a small model that rambles costs seconds per call at ~20 tokens/s)
QUERY_MAX_TOKENS = 64
HYPOTHETICAL_MAX_TOKENS = 160


async def condense(llm: LLM, query: str, history: Sequence[ChatMessage]) -> str:
    """One standalone search query from the chat history and the last question.

    A question without history is passed through untouched (no LLM call).
    """
    turns = [m for m in history if m.role.value in ("user", "assistant") and m.content]
    if not turns:
        return query
    history_str = "\n".join(
        f"{m.role.value}: {(m.content or '')[:_MAX_TURN_CHARS]}" for m in turns[-6:]
    )
    prompt = REWRITE_PROMPT.format(history_str=history_str, query_str=query)
    return _first_line(await ask(llm, prompt, QUERY_MAX_TOKENS), query)


async def reformulate(llm: LLM, query: str, failed_query: str, round_: int) -> str:
    """A differently worded query for retrieval round ``round_`` (2: keywords, 3+: HyDE)."""
    if round_ <= 2:
        prompt = RETRY_KEYWORDS_PROMPT.format(query_str=query, failed_query=failed_query)
        return _first_line(await ask(llm, prompt, QUERY_MAX_TOKENS), query)
    prompt = RETRY_HYPOTHETICAL_PROMPT.format(query_str=query)
    reply = await ask(llm, prompt, HYPOTHETICAL_MAX_TOKENS)
    return " ".join(reply.split()) or query


async def ask(llm: LLM, prompt: str, max_tokens: int) -> str:
    """The LLM's reply to one user message of ``prompt``, at most ``max_tokens`` long."""
    reply = await llm.achat([ChatMessage(role="user", content=prompt)], max_tokens=max_tokens)
    return reply.message.content or ""
