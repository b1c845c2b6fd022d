"""A knowledge base: one Qdrant collection with its embedder; the Python API's entry point.

kb = KnowledgeBase.build(["data/"], collection="docs")     # ingest and open, one call
kb = KnowledgeBase.open("docs")                             # open what is there
w = kb.workflow()                                           # CitationQueryWorkflow
result = await w.run(query="...")
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from llama_index.core.schema import Document

from citeflow.ingestion.pipeline import Ingestor, IngestReport
from citeflow.query.retrieval import Retriever
from citeflow.settings import Settings, load_settings
from citeflow.store import DocumentRecord, Store
from citeflow.workflows.citation_query import CitationQueryWorkflow


class KnowledgeBase:
    """One collection, the store that holds it, and the embedder that indexes it."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store,
        embed_model: BaseEmbedding,
        collection: str | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.embed_model = embed_model
        self.collection = collection or settings.store.collection

    @classmethod
    def open(
        cls,
        collection: str | None = None,
        *,
        settings: Settings | None = None,
        store: Store | None = None,
        embed_model: BaseEmbedding | None = None,
    ) -> KnowledgeBase:
        """Open a knowledge base (providers from settings unless given).

        Raises:
            InvalidCollectionNameError: ``collection`` breaks the rule of `citeflow.names`.
        """
        from citeflow.names import check_collection_name
        from citeflow.providers.embeddings import build_embed_model

        if collection is not None:
            check_collection_name(collection)
        settings = settings or load_settings()
        return cls(
            settings,
            store=store or Store.open(settings.store),
            embed_model=embed_model or build_embed_model(settings),
            collection=collection,
        )

    @classmethod
    def build(
        cls,
        paths: Iterable[str | Path],
        collection: str | None = None,
        *,
        progress: bool = True,
        **kwargs: Any,
    ) -> KnowledgeBase:
        """Ingest files and folders, then return the opened knowledge base."""
        kb = cls.open(collection, **kwargs)
        kb.ingest(paths, progress=progress)
        return kb

    # --- writing -------------------------------------------------------------------------------
    def ingestor(self, *, progress: bool = True) -> Ingestor:
        return Ingestor(
            self.store,
            self.embed_model,
            collection=self.collection,
            chunk_size=self.settings.chunking.size,
            chunk_overlap=self.settings.chunking.overlap,
            progress=progress,
        )

    def ingest(
        self, paths: Iterable[str | Path], *, prune: bool = False, progress: bool = True
    ) -> IngestReport:
        """Add or update files and folders; unchanged files are skipped."""
        return self.ingestor(progress=progress).ingest_paths((Path(p) for p in paths), prune=prune)

    def add_documents(self, documents: Sequence[Document], *, progress: bool = False) -> int:
        """Add in-memory LlamaIndex documents (keyed by ``doc_id``); returns chunks written."""
        return self.ingestor(progress=progress).ingest_documents(documents)

    def delete(self, paths: Iterable[str | Path]) -> int:
        """Remove the documents of these files; returns how many were removed."""
        return self.ingestor(progress=False).delete_paths(Path(p) for p in paths)

    def prune(self) -> int:
        """Remove documents whose files are gone; returns how many."""
        return self.ingestor(progress=False).prune()

    # --- reading -------------------------------------------------------------------------------
    def documents(self) -> list[DocumentRecord]:
        return sorted(self.store.documents(self.collection).values(), key=lambda d: d.file_path)

    def count(self) -> int:
        return self.store.count(self.collection)

    def retriever(self, top_k: int | None = None) -> Retriever:
        return Retriever.from_settings(
            self.settings, self.store, self.embed_model, collection=self.collection, top_k=top_k
        )

    def workflow(self, llm: LLM | None = None, **kwargs: Any) -> CitationQueryWorkflow:
        """The citation query workflow over this knowledge base."""
        return CitationQueryWorkflow.from_retriever(self.retriever(), self.settings, llm, **kwargs)

    def as_index(self) -> VectorStoreIndex:
        """The collection as a plain LlamaIndex `VectorStoreIndex` (for your own experiments)."""
        from citeflow.store.vector_store import StoreVectorStore

        return VectorStoreIndex.from_vector_store(
            StoreVectorStore(self.store, self.collection), embed_model=self.embed_model
        )

    def close(self) -> None:
        self.store.close()
