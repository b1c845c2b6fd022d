"""`PerfectModelLLM`: the perfect author as a LlamaIndex chat LLM, for in-process runs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.generic_utils import (
    completion_response_to_chat_response,
    stream_completion_response_to_chat_response,
)
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

from citeflow.evaluation.perfect_model.author import AuthoredSentence, PerfectAuthor
from citeflow.evaluation.perfect_model.prompt import (
    Messages,
    parse_prompt,
    question_key,
    user_prompt,
)

__all__ = ["PerfectModelLLM"]


class PerfectModelLLM(CustomLLM):
    """`PerfectAuthor` as a LlamaIndex chat LLM: every chat is answered with its reply, streamed
    word by word. `authored_for` gives what it wrote for a question (its last prompt's)."""

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
            context_window=32768,
            num_output=1024,
            is_chat_model=True,
            model_name=f"perfect-{self._author.variant}",
            system_role=MessageRole.SYSTEM,
        )

    def authored_for(self, question: str) -> list[AuthoredSentence]:
        """The sentences of the last reply to ``question`` (none if it was never asked)."""
        return list(self._authored.get(question_key(question), []))

    def _reply(self, messages: Messages) -> str:
        authored = self._author.authored(messages)
        question, _ = parse_prompt(user_prompt(messages))
        self._authored[question_key(question)] = authored
        return self._author.render(authored)

    def _stream(self, messages: Messages) -> CompletionResponseGen:
        """The reply, word by word: each response has the text so far and the new word."""
        words = re.findall(r"\S+\s*|\s+", self._reply(messages))
        return (
            CompletionResponse(text="".join(words[: i + 1]), delta=w) for i, w in enumerate(words)
        )

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """The reply to ``prompt`` taken as the user message."""
        return CompletionResponse(text=self._reply([{"role": "user", "content": prompt}]))

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        """`complete`, word by word."""
        return self._stream([{"role": "user", "content": prompt}])

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """The reply to the last user message."""
        return completion_response_to_chat_response(CompletionResponse(text=self._reply(messages)))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        """`chat`, word by word (the async methods stream through it)."""
        return stream_completion_response_to_chat_response(self._stream(messages))
