"""The local embedder on torch (``CITEFLOW_EMBED_BACKEND=torch``): llama-index's
`HuggingFaceEmbedding` with a public batch API for queries.

The server's query batcher (`citeflow.query.batching`) encodes concurrent questions in one call
through an embedder's ``embed_query_batch``. citeflow loads a sentence-transformers model by its
directory and gives it no instructions, so llama-index sets both its query and its text prompt to
"" (its instruction tables name models, never paths): a batch of queries is embedded exactly as a
batch of texts, through the public ``get_text_embedding_batch``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llama_index.embeddings.huggingface import HuggingFaceEmbedding

__all__ = ["TorchEmbedding"]


class TorchEmbedding(HuggingFaceEmbedding):
    """A sentence-transformers model loaded from a directory, without query or text instructions."""

    def __init__(self, *, model_dir: str, **kwargs: Any) -> None:
        # absolute: a relative directory could be spelt like a model llama-index has an
        # instruction for ("BAAI/bge-small-en")
        super().__init__(model_name=str(Path(model_dir).resolve()), **kwargs)

    @classmethod
    def class_name(cls) -> str:
        """Name used when serialising the model."""
        return "CiteflowTorchEmbedding"

    def embed_query_batch(self, queries: list[str]) -> list[list[float]]:
        """The embeddings of ``queries`` in one encoder call (what `get_query_embedding` gives
        each: query and text prompts are the same, empty)."""
        return self.get_text_embedding_batch(queries)
