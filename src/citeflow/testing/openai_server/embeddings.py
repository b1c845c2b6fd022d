"""The fake OpenAI server's embeddings endpoint."""

from __future__ import annotations

import base64
import struct
from typing import Any

from starlette.responses import JSONResponse, Response

from citeflow.testing.openai_replies import RecordedRequest, count_tokens, fake_embedding
from citeflow.testing.openai_server.errors import error_response

__all__ = ["embeddings_response"]


def embeddings_response(
    request: RecordedRequest, *, default_dim: int, max_input_tokens: int | None
) -> Response:
    """``POST /v1/embeddings``: `fake_embedding` vectors, as floats or base64 as asked."""
    body = request.json
    raw_input = body.get("input")
    texts: list[str]
    if isinstance(raw_input, str):
        texts = [raw_input]
    elif isinstance(raw_input, list) and all(isinstance(t, str) for t in raw_input):
        texts = list(raw_input)
    elif isinstance(raw_input, list) and all(isinstance(t, int) for t in raw_input):
        texts = [" ".join(map(str, raw_input))]
    elif isinstance(raw_input, list) and all(isinstance(t, list) for t in raw_input):
        texts = [" ".join(map(str, t)) for t in raw_input]
    else:
        return error_response(400, "'input' must be a string or a list of strings/tokens.")
    if not texts:
        return error_response(400, "'input' must not be empty.")
    longest = max(count_tokens(t) for t in texts)
    if max_input_tokens is not None and longest > max_input_tokens:
        return error_response(
            400,
            f"This model's maximum context length is {max_input_tokens} tokens, however you "
            f"requested {longest} tokens. Please reduce your prompt.",
        )
    dim = body.get("dimensions") or default_dim
    if not isinstance(dim, int) or dim <= 0:
        return error_response(400, "'dimensions' must be a positive integer.")
    vectors: list[Any] = [fake_embedding(text, dim) for text in texts]
    if body.get("encoding_format") == "base64":
        vectors = [base64.b64encode(struct.pack(f"<{dim}f", *v)).decode("ascii") for v in vectors]
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    tokens = sum(count_tokens(t) for t in texts)
    return JSONResponse(
        {
            "object": "list",
            "data": data,
            "model": request.model or request.deployment or "fake-embedding",
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )
