"""A fake OpenAI + Azure OpenAI server: real HTTP on 127.0.0.1, one background thread.

It serves, on a random free port:

* OpenAI: ``POST /v1/chat/completions`` (JSON or SSE streaming), ``POST /v1/embeddings``,
  ``GET /v1/models``;
* Azure OpenAI: ``POST /openai/deployments/{deployment}/chat/completions`` and
  ``.../embeddings``, which need the ``api-version`` query parameter (HTTP 400 without it).

Usage::

    with FakeOpenAIServer(replies=["Paris is the capital [1].", Reply.error(500)]) as server:
        settings = Settings(_env_file=None, llm={"provider": "openai"},
                            openai={"base_url": server.openai_base_url})  # or azure_endpoint
        ...
        assert server.requests[-1].headers["authorization"] == "Bearer ..."

Replies come from a script (`FakeOpenAIServer.script`): a string or `Reply` for every request, a
list consumed in order (then `default_reply`), or a callable ``(RecordedRequest) -> str | Reply``.
Timing: `ttft` seconds before the first token and `tokens_per_second` after it (per server, or per
`Reply`); failures: `Reply.error` (HTTP 4xx/5xx with an OpenAI-style body), `Reply.drop` (the
connection is cut mid-response) and `FakeOpenAIServer.fail_next` (any endpoint, N times).

Everything runs on one asyncio event loop in one thread (uvicorn + Starlette): a streaming response
costs a coroutine and its sleeps, so 64+ concurrent streams are cheap.
"""

from citeflow.testing.openai_replies import (
    RecordedRequest,
    Reply,
    ReplyScript,
    default_reply,
    fake_embedding,
    split_tokens,
)
from citeflow.testing.openai_server.server import FakeOpenAIServer

__all__ = [
    "FakeOpenAIServer",
    "RecordedRequest",
    "Reply",
    "ReplyScript",
    "default_reply",
    "fake_embedding",
    "split_tokens",
]
