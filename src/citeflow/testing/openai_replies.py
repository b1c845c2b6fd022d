"""What the fake OpenAI server answers: scripted replies, recorded requests, fake content.

`Reply` says how one chat completion is answered (text, pacing, an HTTP error, a cut
connection); `RecordedRequest` is a request as the server saw it; `default_reply`,
`fake_embedding` and `split_tokens` make the deterministic content the server sends when a script
gives none. `citeflow.testing.openai_server` serves them.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

__all__ = [
    "Kind",
    "RecordedRequest",
    "Reply",
    "ReplyScript",
    "count_tokens",
    "default_reply",
    "fake_embedding",
    "last_user_text",
    "message_text",
    "split_tokens",
]

#: The endpoint a request was sent to.
Kind = Literal["chat", "embeddings", "models", "other"]
_WORD = re.compile(r"\w+")
_TOKEN = re.compile(r"^\s+|\S+\s*")


# --- deterministic content -------------------------------------------------------------------


def split_tokens(text: str) -> list[str]:
    """Split `text` into stream 'tokens' (a word and its trailing spaces); they join to `text`."""
    return _TOKEN.findall(text)


def count_tokens(text: str) -> int:
    """How many stream tokens `text` makes (`split_tokens`)."""
    return len(split_tokens(text))


def fake_embedding(text: str, dim: int = 384) -> list[float]:
    """Deterministic unit vector for `text`: signed feature hashing of its lower-cased words.

    Texts sharing words get a positive cosine similarity, so retrieval over fake embeddings
    behaves sensibly in end-to-end tests.
    """
    vec = [0.0] * dim
    words = _WORD.findall(text.lower()) or [text]
    for word in words:
        digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
        h = int.from_bytes(digest, "little")
        vec[h % dim] += 1.0 if (h >> 40) & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vec))
    if norm == 0.0:  # words cancelled out
        digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
        vec[int.from_bytes(digest, "little") % dim] = 1.0
        return vec
    return [x / norm for x in vec]


def message_text(message: Any) -> str:
    """The text of one chat message (its string content, or its text parts joined)."""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def last_user_text(request: RecordedRequest) -> str:
    """The text of a chat request's last user message ("" when there is none)."""
    messages = request.json.get("messages") if isinstance(request.json, dict) else None
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "user":
            return message_text(message)
    return ""


def default_reply(request: RecordedRequest) -> str:
    """The reply when the script has none: ``"Fake reply: "`` + the last user message's first
    24 words (or ``"Fake reply."`` when there is no user message)."""
    words = last_user_text(request).split()[:24]
    return f"Fake reply: {' '.join(words)}" if words else "Fake reply."


# --- requests and replies ----------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it."""

    method: str
    path: str
    query: dict[str, str]
    #: Header names are lower-cased.
    headers: dict[str, str]
    #: The parsed JSON body (None when there is no body or it is not JSON).
    json: Any
    kind: Kind
    #: Azure deployment from the path, None for OpenAI paths.
    deployment: str | None

    @property
    def is_azure(self) -> bool:
        """True for ``/openai/deployments/...`` paths."""
        return self.path.startswith("/openai/")

    @property
    def stream(self) -> bool:
        """True when a chat request asked for SSE streaming."""
        return isinstance(self.json, dict) and bool(self.json.get("stream"))

    @property
    def bearer_token(self) -> str | None:
        """The token of an ``Authorization: Bearer ...`` header."""
        value = self.headers.get("authorization", "")
        scheme, _, token = value.partition(" ")
        return token.strip() if scheme.lower() == "bearer" and token.strip() else None

    @property
    def model(self) -> str | None:
        """The ``model`` of the JSON body."""
        model = self.json.get("model") if isinstance(self.json, dict) else None
        return model if isinstance(model, str) else None


@dataclass(frozen=True)
class Reply:
    """What the server answers to one chat completion request.

    Attributes:
        text: the assistant's text (streamed as `split_tokens` pieces).
        status: 200, or an HTTP error status answered with an OpenAI-style error body.
        error_message: the error body's message (a default one per status otherwise).
        retry_after: seconds sent in a ``Retry-After`` header (errors only).
        drop_after: cut the connection after this many tokens (streaming) or halfway through the
            JSON body (non-streaming); None: answer completely.
        ttft: seconds before the first token; None: the server's `FakeOpenAIServer.ttft`.
        tokens_per_second: token rate after the first; None: the server's; 0: no delay.
        finish_reason: None: ``"stop"``, or ``"length"`` when ``max_tokens`` cut the text.
        top_logprobs: the first token's alternatives and their log-probabilities, sent (as
            OpenAI does, at most ``top_logprobs`` of them, likeliest first) when a non-streaming
            request asks for ``logprobs``; None: ``"logprobs": null``.
    """

    text: str = ""
    status: int = 200
    error_message: str | None = None
    retry_after: float | None = None
    drop_after: int | None = None
    ttft: float | None = None
    tokens_per_second: float | None = None
    finish_reason: str | None = None
    top_logprobs: Mapping[str, float] | None = None

    @classmethod
    def error(
        cls, status: int = 500, message: str | None = None, *, retry_after: float | None = None
    ) -> Reply:
        """An HTTP error (500, 429, 401...) with an OpenAI-style body."""
        return cls(status=status, error_message=message, retry_after=retry_after)

    @classmethod
    def drop(cls, after_tokens: int = 0, text: str = "This answer will be cut off.") -> Reply:
        """Cut the connection after `after_tokens` tokens of `text`."""
        return cls(text=text, drop_after=after_tokens)

    @classmethod
    def of_tokens(cls, n: int, *, word: str = "tok", **kwargs: Any) -> Reply:
        """A reply of exactly `n` stream tokens: ``"tok1 tok2 ... tokN"``."""
        return cls(text=" ".join(f"{word}{i}" for i in range(1, n + 1)), **kwargs)


ReplyScript: TypeAlias = (
    str | Reply | Sequence[str | Reply] | Callable[[RecordedRequest], str | Reply] | None
)
