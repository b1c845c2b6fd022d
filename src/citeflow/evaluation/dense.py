"""Retrieval over a dataset's corpus, through citeflow's own ingestion and `Retriever`.

The index holds both sides citeflow searches (dense vectors and BM25 sparse vectors), so the
dense, BM25 and hybrid retrievers of one evaluation share one index and one embedding cost.

The corpus is indexed exactly as ``KnowledgeBase.add_documents`` would index it (one
``Document(id_=corpus_id, text=text, metadata={"title": title})`` per document, same chunks, ids
and payloads) into an embedded Qdrant directory in a cache, so the embedding cost is paid once:

    <cache_dir>/<dataset>-<key>/manifest.json     what the index holds; "complete" once built
    <cache_dir>/<dataset>-<key>/qdrant/            embedded Qdrant, collection "corpus"

``key`` hashes the corpus file's content (sha256: a copied, moved or re-provisioned file with the
same bytes reuses the index; an edited one gets a new index), the ids of the documents indexed (a
corpus slice gets its own index), the embedder's name and the chunk settings. A complete index is
reused as is; an incomplete one (an interrupted build) is resumed: documents whose chunks are all
stored are kept, partly written ones are deleted and written again, and only the rest is embedded.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, Document, NodeWithScore
from tqdm.auto import tqdm

from citeflow.errors import StoreLockedError
from citeflow.evaluation.answer_cache import read_json_object, write_json
from citeflow.evaluation.dataset import BeirDataset
from citeflow.evaluation.metrics import best_scores
from citeflow.ingestion.pipeline import file_hash
from citeflow.knowledge_base import KnowledgeBase
from citeflow.query.retrieval import Retriever
from citeflow.settings import RetrievalMode, Settings
from citeflow.settings.providers import xdg_dir
from citeflow.store import Store

__all__ = [
    "COLLECTION",
    "INDEX_FORMAT",
    "DenseIndex",
    "DenseSearch",
    "IndexInfo",
    "default_cache_dir",
    "doc_id_of",
    "index_key",
]

#: the collection holding the corpus inside a cached index
COLLECTION = "corpus"
#: bump when the way documents become chunks or vectors changes, to invalidate old caches
#: (2: hybrid layout with BM25 sparse vectors)
INDEX_FORMAT = 2
_MANIFEST = "manifest.json"


def doc_id_of(hit: NodeWithScore) -> str:
    """The corpus document a chunk (or a source cut from one) comes from."""
    return str(hit.node.metadata.get("doc_id") or hit.node.ref_doc_id or "")


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/citeflow/eval`` (``~/.cache/citeflow/eval``)."""
    return xdg_dir("XDG_CACHE_HOME", ".cache") / "citeflow" / "eval"


def index_key(
    dataset: BeirDataset, *, embedder: str, chunk_size: int, chunk_overlap: int
) -> tuple[str, dict[str, Any]]:
    """The cache key of a dataset's index and the facts it hashes (kept in the manifest)."""
    corpus_file = dataset.corpus_file or dataset.path / "corpus.jsonl"
    facts: dict[str, Any] = {
        "format": INDEX_FORMAT,
        "corpus_sha256": file_hash(corpus_file),
        "corpus_digest": dataset.corpus_digest(),
        "documents": len(dataset.corpus),
        "embedder": embedder,
        "chunk_size": chunk_size,
        "chunk_overlap": chunk_overlap,
    }
    blob = json.dumps(facts, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16], facts


@dataclass(frozen=True, slots=True)
class IndexInfo:
    """How a dense index was obtained (goes into the evaluation report)."""

    directory: str
    key: str
    embedder: str
    chunk_size: int
    chunk_overlap: int
    documents: int
    chunks: int
    embedded_chunks: int
    """Chunks embedded by this run (0 when the cache was complete)."""
    reused: bool
    """The cached index was complete: nothing was read back or embedded."""
    resumed_documents: int
    """Documents found complete in an unfinished index and kept."""
    seconds: float


class DenseIndex:
    """A dataset's corpus embedded into a cached embedded-Qdrant directory (see module doc)."""

    def __init__(self, kb: KnowledgeBase, info: IndexInfo) -> None:
        self.kb = kb
        self.info = info

    @classmethod
    def open(
        cls,
        dataset: BeirDataset,
        *,
        embed_model: BaseEmbedding,
        embedder: str,
        cache_dir: Path | str,
        settings: Settings | None = None,
        chunk_size: int | None = None,
        chunk_overlap: int | None = None,
        batch_chunks: int = 256,
        progress: bool = True,
    ) -> DenseIndex:
        """Open the cached index of ``dataset``, building or finishing it first if needed.

        Args:
            dataset: the loaded dataset; its corpus is what gets indexed.
            embed_model: the embedder (used for documents here and queries later).
            embedder: a stable name for it (part of the cache key), e.g. ``describe_embeddings``.
            cache_dir: where indexes live; one subdirectory per key.
            settings: chunk settings and defaults (``Settings()`` defaults when omitted).
            chunk_size, chunk_overlap: override the settings' chunking.
            batch_chunks: chunks embedded and written per step (the resume granularity).
            progress: show a progress bar while embedding.

        Raises:
            StoreLockedError: another process has this index open.
        """
        started = time.perf_counter()
        base = settings or Settings(_env_file=None)
        size = chunk_size if chunk_size is not None else base.chunking.size
        overlap = chunk_overlap if chunk_overlap is not None else base.chunking.overlap
        settings = base.updated(chunking={"size": size, "overlap": overlap})
        key, facts = index_key(dataset, embedder=embedder, chunk_size=size, chunk_overlap=overlap)
        directory = Path(cache_dir).expanduser() / f"{dataset.name}-{key}"
        directory.mkdir(parents=True, exist_ok=True)
        manifest_path = directory / _MANIFEST
        manifest = read_json_object(manifest_path)
        try:
            store = Store.open_path(directory / "qdrant")
        except StoreLockedError:
            raise StoreLockedError(
                f"the evaluation index {directory} is in use by another process (another "
                "`citeflow eval` on the same dataset?); wait for it or pass another --cache-dir"
            ) from None
        kb = KnowledgeBase(settings, store=store, embed_model=embed_model, collection=COLLECTION)
        try:
            complete = (
                manifest.get("key") == key
                and manifest.get("complete") is True
                and store.count(COLLECTION) == manifest.get("chunks")
            )
            embedded = kept = 0
            if not complete:
                if manifest.get("key") != key:
                    started_manifest = {"key": key, "complete": False, **facts}
                    write_json(manifest_path, started_manifest, indent=2, sort_keys=True)
                embedded, kept = _sync(kb, dataset, batch_chunks=batch_chunks, progress=progress)
            chunks = store.count(COLLECTION)
            seconds = time.perf_counter() - started
            if not complete:
                built = {"key": key, **facts, "complete": True, "chunks": chunks}
                built["build_seconds"] = round(seconds, 3)
                write_json(manifest_path, built, indent=2, sort_keys=True)
        except BaseException:
            kb.close()
            raise
        info = IndexInfo(
            directory=str(directory),
            key=key,
            embedder=embedder,
            chunk_size=size,
            chunk_overlap=overlap,
            documents=len(dataset.corpus),
            chunks=chunks,
            embedded_chunks=embedded,
            reused=complete,
            resumed_documents=kept,
            seconds=seconds,
        )
        return cls(kb, info)

    def retriever(self, *, mode: RetrievalMode = "dense", overfetch: float = 2.0) -> DenseSearch:
        """The `RetrieverLike` adapter over this index, searching the given side(s).

        Hybrid fusion and feedback follow the settings (``fusion``, ``dense_weight``, ``rrf_k``,
        ``feedback_chunks``, ``feedback_weight``), with at least as many candidates per side as
        chunks fetched.
        """
        options = self.kb.settings.retrieval.model_copy(update={"mode": mode})
        retriever = Retriever(
            self.kb.store, self.kb.embed_model, collection=COLLECTION, settings=options
        )
        info = {**asdict(self.info), "mode": mode}
        if mode == "hybrid":
            fused = {"fusion", "dense_weight", "rrf_k", "feedback_chunks", "feedback_weight"}
            info.update(options.model_dump(include=fused))
        return DenseSearch(retriever, overfetch=overfetch, info=info)

    def close(self) -> None:
        """Release the embedded store (its directory lock)."""
        self.kb.close()

    def __enter__(self) -> DenseIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _sync(
    kb: KnowledgeBase, dataset: BeirDataset, *, batch_chunks: int, progress: bool
) -> tuple[int, int]:
    """Make the collection hold exactly the corpus' chunks; returns (embedded, documents kept)."""
    store = kb.store
    ingestor = kb.ingestor(progress=False)
    corpus = dataset.corpus.values()
    docs = [Document(id_=d.id, text=d.text, metadata={"title": d.title}) for d in corpus]
    nodes = ingestor.chunk_documents(docs)
    chunks = Counter((str(n.metadata["doc_id"]), str(n.metadata["content_hash"])) for n in nodes)
    expected = {doc_id: (digest, count) for (doc_id, digest), count in chunks.items()}
    done: set[str] = set()
    for doc_id, record in store.documents(COLLECTION).items():
        if record.complete and expected.get(doc_id) == (record.content_hash, record.chunks):
            done.add(doc_id)
        else:  # partly written, changed, or no longer in the corpus
            store.delete_document(COLLECTION, doc_id)
    todo: list[BaseNode] = [n for n in nodes if str(n.metadata["doc_id"]) not in done]
    if todo:
        bar = tqdm(total=len(todo), desc="embedding corpus", unit="chunk", disable=not progress)
        with bar:
            for start in range(0, len(todo), batch_chunks):
                batch = todo[start : start + batch_chunks]
                ingestor.write_nodes(batch)
                bar.update(len(batch))
    return len(todo), len(done)


class DenseSearch:
    """`RetrieverLike` over citeflow's `Retriever`: chunks → documents by their best chunk.

    Chunks carry their document's id in ``metadata["doc_id"]``; a document scores its best
    chunk's ranking score (similarity, BM25 or fused, by the retriever's mode). ``overfetch`` ×
    top_k chunks are fetched first, and more (doubling) when
    fewer than top_k distinct documents came back while the collection has more chunks.
    """

    def __init__(
        self, retriever: Retriever, *, overfetch: float = 2.0, info: dict[str, Any] | None = None
    ) -> None:
        if overfetch < 1.0:
            raise ValueError(f"overfetch must be at least 1, got {overfetch}")
        self.retriever = retriever
        self.overfetch = overfetch
        self.info: dict[str, Any] = dict(info or {})

    async def search(self, query: str, top_k: int) -> list[tuple[str, float]]:
        """The ``top_k`` best documents for ``query`` as (document id, score), best first."""
        fetch = max(top_k, int(top_k * self.overfetch))
        while True:
            nodes = (await self.retriever.asearch(query, top_k=fetch)).hits
            pairs = ((doc_id_of(hit), hit.score or 0.0) for hit in nodes)
            best = best_scores((doc_id, score) for doc_id, score in pairs if doc_id)
            if len(best) >= top_k or len(nodes) < fetch:
                break
            fetch *= 2
        return sorted(best.items(), key=lambda kv: kv[1], reverse=True)[:top_k]
