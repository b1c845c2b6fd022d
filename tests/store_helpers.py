"""Stores filled with made-up chunks, and retrievers over them, for the store and retrieval
tests."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding

from citeflow.bm25 import BM25Encoder
from citeflow.ingestion.pipeline import Ingestor
from citeflow.query.retrieval import Retriever
from citeflow.settings import RetrievalSettings
from citeflow.store import Store
from citeflow.store.engine import Point
from citeflow.testing.embedding import HashEmbedding

ENCODER = BM25Encoder()
#: the dimension of the dense vectors `points` makes (MiniLM's)
DIM = 384
#: the two engines a store runs on: qdrant-edge, and qdrant-client's API (its ``:memory:`` mode,
#: standing in for a Qdrant server or cluster)
ENGINES = ("embedded", "server-api")


def open_store(engine: str, tmp_path: Path) -> Store:
    """An empty store on ``engine`` (the embedded one in ``tmp_path / "embedded"``)."""
    return Store.open_path(tmp_path / "embedded" if engine == "embedded" else ":memory:")


def small_ingestor(
    store: Store, embed: BaseEmbedding | None = None, collection: str = "c", **options: Any
) -> Ingestor:
    """A quiet ingestor of small chunks (64 tokens, overlap 8), by default into collection "c"
    with 32-d hashed vectors."""
    return Ingestor(
        store,
        embed or HashEmbedding(dim=32),
        collection=collection,
        chunk_size=64,
        chunk_overlap=8,
        progress=False,
        **options,
    )


def points(n: int, *, start: int = 0) -> list[Point]:
    """``n`` chunks with `DIM`-d vectors, BM25 vectors and ~600-character payloads."""
    out = []
    for i in range(start, start + n):
        rng = np.random.default_rng([0, i])
        text = f"chunk {i} about ducks, geese and swans " * 16
        out.append(
            Point(
                str(uuid.uuid5(uuid.NAMESPACE_URL, f"chunk-{i}")),
                rng.standard_normal(DIM).astype(np.float32),
                ENCODER.encode_document(text),
                {"doc_id": f"doc-{i // 10}", "text": text, "chunk_index": i % 10},
            )
        )
    return out


def fill(store: Store, collection: str, n: int) -> None:
    store.ensure_collection(collection, DIM)
    for start in range(0, n, 256):
        store.write(collection, points(min(256, n - start), start=start))


def make_retriever(
    store: Store, embed: BaseEmbedding, collection: str, top_k: int, mode: str, **options: object
) -> Retriever:
    settings = RetrievalSettings.defaults(mode=mode, **options)
    return Retriever(store, embed, collection=collection, top_k=top_k, settings=settings)
