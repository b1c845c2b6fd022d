"""A scripted fake LLM: replies come from a list or a function of the prompt, streamed by word."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Sequence
from itertools import accumulate
from typing import Any

from llama_index.core.llms import (
    CompletionResponse,
    CompletionResponseGen,
    CustomLLM,
    LLMMetadata,
)
from llama_index.core.llms.callbacks import llm_completion_callback
from pydantic import PrivateAttr

from citeflow.testing.openai_replies import split_tokens

Reply = str | Callable[[str], str]


class ScriptedLLM(CustomLLM):
    """Answers from a script, records every prompt; streams word by word.

    ``replies`` is consumed in order (the last one repeats); a callable gets the prompt. A reply
    that is an Exception instance is raised instead, before anything is streamed.
    """

    delay: float = 0.0
    chunk_words: int = 1
    _replies: list[Reply | BaseException] = PrivateAttr(default_factory=list)
    _prompts: list[str] = PrivateAttr(default_factory=list)
    _kwargs: list[dict[str, Any]] = PrivateAttr(default_factory=list)

    def __init__(self, replies: Sequence[Reply | BaseException] = ("OK",), **kw: Any) -> None:
        super().__init__(**kw)
        self._replies = list(replies)

    @property
    def prompts(self) -> list[str]:
        return self._prompts

    @property
    def call_kwargs(self) -> list[dict[str, Any]]:
        """The keyword arguments of each call (e.g. ``max_tokens``), in order."""
        return self._kwargs

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            context_window=8192, num_output=256, is_chat_model=False, model_name="scripted"
        )

    def _next(self, prompt: str, kwargs: dict[str, Any] | None = None) -> str:
        self._prompts.append(prompt)
        self._kwargs.append(dict(kwargs or {}))
        reply = self._replies[0] if len(self._replies) == 1 else self._replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply(prompt) if callable(reply) else reply

    def _stream(self, prompt: str, kwargs: dict[str, Any]) -> list[CompletionResponse]:
        """The reply to ``prompt`` in pieces of ``chunk_words`` words, each with the text so far."""
        words = split_tokens(self._next(prompt, kwargs))
        size = max(1, self.chunk_words)
        pieces = ["".join(words[i : i + size]) for i in range(0, len(words), size)]
        texts = accumulate(pieces)
        return [CompletionResponse(text=t, delta=p) for t, p in zip(texts, pieces, strict=True)]

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=self._next(prompt, kwargs))

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        responses = self._stream(prompt, kwargs)
        return (r for r in responses)  # a generator, as llm_completion_callback expects

    @llm_completion_callback()
    async def astream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> AsyncGenerator[CompletionResponse, None]:
        responses = self._stream(prompt, kwargs)
        delay = self.delay

        async def gen() -> AsyncGenerator[CompletionResponse, None]:
            for response in responses:
                if delay:
                    await asyncio.sleep(delay)
                yield response

        return gen()
