"""A deterministic fake embedder: hashed bag of words, so similar texts get similar vectors."""

from __future__ import annotations

import hashlib
import math
import re

from llama_index.core.base.embeddings.base import BaseEmbedding
from pydantic import Field

from citeflow.citations.text import content_terms


class HashEmbedding(BaseEmbedding):
    """L2-normalised counts of stemmed content words hashed into ``dim`` buckets."""

    dim: int = Field(default=256)

    def _vector(self, text: str) -> list[float]:
        vec = [0.0] * self.dim
        for term in content_terms(text) or re.findall(r"\w+", text.lower()) or ["empty"]:
            bucket = int.from_bytes(hashlib.blake2b(term.encode(), digest_size=4).digest(), "big")
            vec[bucket % self.dim] += 1.0
        norm = math.sqrt(sum(v * v for v in vec)) or 1.0
        return [v / norm for v in vec]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vector(text)


class RecordingEmbedding(HashEmbedding):
    """A `HashEmbedding` that records each batch it embeds and can fail on the n-th batch."""

    batches: list[list[str]] = Field(default_factory=list)
    fail_on_batch: int | None = None

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        if self.fail_on_batch is not None and len(self.batches) == self.fail_on_batch:
            raise RuntimeError("embedder died")
        self.batches.append(list(texts))
        return [self._vector(t) for t in texts]
