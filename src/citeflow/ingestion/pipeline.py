"""Ingestion: files → documents → chunks → embeddings → Qdrant, idempotently.

Each file is one document keyed by its absolute path (``doc_id``) and identified by the sha256 of
its bytes and the chunking it was cut with (``content_hash``, `Ingestor.version`). Unchanged files
are skipped before they are even parsed; a change of chunk size writes every document again. A
document's chunks are stored marked incomplete (`citeflow.store.INCOMPLETE`: searches leave them
out, listings show the document as incomplete); once its last chunk is stored, the chunks of the
version it replaces (a changed file) are deleted and the mark is taken off. So a failure midway (a
crash, ``kill -9``, a full disk) never leaves a document with no chunks, never lets part of one
into an answer, and the next run writes it again instead of taking it as unchanged (each chunk
also records how many chunks its document has, ``chunk_count``). Chunk ids derive from the
document and its version, so writing it again overwrites what was stored: no duplicate, no chunk
lost.

Writing (`bench/ingest_throughput.py`):

* chunks are embedded in pools of ``pool`` chunks sorted by length, so that each batch the
  embedder pads to its longest text holds texts of about one length;
* with a remote embedder (OpenAI, Azure) the previous batch's BM25 vectors and upsert run on a
  writer thread while the next batch's request is out. With the local one they run between
  batches on the calling thread: the embedder already keeps every core busy, and a writer
  thread holding the GIL would make it wait.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import (
    BaseNode,
    Document,
    MetadataMode,
    NodeRelationship,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.core.utils import get_tokenizer
from tqdm.auto import tqdm

from citeflow.bm25 import BM25Encoder
from citeflow.errors import IngestError, StorageFullError
from citeflow.ingestion.readers import discover, read_file
from citeflow.providers.embeddings import embeds_remotely
from citeflow.settings import ChunkingSettings
from citeflow.store import DocumentRecord, Store

log = logging.getLogger("citeflow.ingest")

_NAMESPACE = uuid.UUID("6f1f3c1e-8a4b-4c0e-9a51-2f2f5e0c1d7a")
_CHUNKING = ChunkingSettings.model_fields
#: chunk size and overlap by default (tokens: the settings' defaults, not the environment's); a
#: version cut so is its content's sha256 alone
DEFAULT_CHUNKING: tuple[int, int] = (_CHUNKING["size"].default, _CHUNKING["overlap"].default)


@dataclass
class IngestReport:
    """What one ingestion did."""

    files: int = 0
    documents_added: int = 0
    unchanged: int = 0
    replaced: int = 0
    removed: int = 0
    chunks: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        """A one-paragraph summary for people."""
        lines = [
            f"{self.files} files: {self.documents_added} added, {self.replaced} replaced, "
            f"{self.unchanged} unchanged, {self.removed} removed, {len(self.failed)} failed; "
            f"{self.chunks} chunks written in {self.seconds:.1f} s"
        ]
        lines += [f"  failed  {path}: {reason}" for path, reason in self.failed]
        lines += [f"  skipped {path}: {reason}" for path, reason in self.skipped]
        return "\n".join(lines)


def doc_id_for(path: Path) -> str:
    """Stable document id of a file: a UUID derived from its absolute path."""
    return str(uuid.uuid5(_NAMESPACE, str(path.resolve())))


def file_hash(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


class Ingestor:
    """Writes documents into one collection of a `Store`."""

    def __init__(
        self,
        store: Store,
        embed_model: BaseEmbedding,
        *,
        collection: str,
        chunk_size: int = DEFAULT_CHUNKING[0],
        chunk_overlap: int = DEFAULT_CHUNKING[1],
        window: int | None = None,
        pool: int = 512,
        progress: bool = True,
        overlap_writes: bool | None = None,
    ) -> None:
        self.store = store
        self.embed_model = embed_model
        self.collection = collection
        self.splitter = SentenceSplitter(chunk_size=chunk_size, chunk_overlap=chunk_overlap)
        self._tokenizer = get_tokenizer()
        #: chunks per embedding call (None: the embedder's own batch size)
        self.window = window or embed_model.embed_batch_size
        self.pool = max(pool, self.window)
        self.progress = progress
        self.encoder = BM25Encoder()
        #: upsert on a writer thread while the next batch embeds (None: when the embedder is remote)
        self.overlap_writes = (
            embeds_remotely(embed_model) if overlap_writes is None else overlap_writes
        )
        #: the chunks stored so far of each document (id, version) whose write is under way
        self._stored: dict[tuple[str, str], set[str]] = {}

    def version(self, content_hash: str) -> str:
        """The version of a document whose content has this sha256, as cut by this ingestor:
        the hash itself at the default chunking (as stores written before the chunking counted
        have it), else a hash of both, so that ingesting again after a change of
        ``CITEFLOW_CHUNK_SIZE`` or ``_OVERLAP`` cuts every document again."""
        chunking = (self.splitter.chunk_size, self.splitter.chunk_overlap)
        if chunking == DEFAULT_CHUNKING:
            return content_hash
        return hashlib.sha256(f"{content_hash} chunks {chunking}".encode()).hexdigest()

    def text_version(self, text: str) -> str:
        """The version of an in-memory document with this text."""
        return self.version(hashlib.sha256(text.encode()).hexdigest())

    # --- files -------------------------------------------------------------------------------
    def ingest_paths(self, paths: Iterable[Path], *, prune: bool = False) -> IngestReport:
        """Ingest files and folders (recursively); see the module docstring for the rules."""
        started = time.perf_counter()
        report = IngestReport()
        files, skipped = discover(Path(p) for p in paths)
        report.files = len(files)
        report.skipped = [(str(p), reason) for p, reason in skipped]
        existing = self.store.documents(self.collection)
        todo: list[tuple[str, str, list[Document]]] = []
        replaced: list[tuple[str, str]] = []
        for path in tqdm(files, desc="reading", unit="file", disable=not self.progress):
            doc_id = doc_id_for(path)
            try:
                digest = self.version(file_hash(path))
                old = existing.get(doc_id)
                if old is not None and old.content_hash == digest and old.complete:
                    report.unchanged += 1
                    continue
                docs = read_file(path)
            except IngestError as exc:
                report.failed.append((str(path), str(exc)))
                continue
            except OSError as exc:
                report.failed.append((str(path), f"{path.name}: cannot read ({exc.strerror})"))
                continue
            todo.append((doc_id, digest, docs))
            if old is not None:
                replaced.append((doc_id, digest))
        report.replaced = len(replaced)
        report.documents_added = len(todo) - len(replaced)
        report.chunks = self._write(todo, replacing={doc_id for doc_id, _ in replaced})
        if prune:
            report.removed = self.prune(existing.values())
        report.seconds = time.perf_counter() - started
        log.info(
            "ingested",
            extra={"collection": self.collection, "chunks": report.chunks, "files": report.files},
        )
        return report

    def prune(self, records: Iterable[DocumentRecord] | None = None) -> int:
        """Delete the documents whose files no longer exist; returns how many."""
        docs = records if records is not None else self.store.documents(self.collection).values()
        return self._delete(
            [r.doc_id for r in docs if r.file_path and not Path(r.file_path).exists()]
        )

    def delete_paths(self, paths: Iterable[Path]) -> int:
        """Delete the documents of these files (whether or not they still exist)."""
        known = self.store.documents(self.collection)
        return self._delete([d for d in (doc_id_for(Path(p)) for p in paths) if d in known])

    def _delete(self, doc_ids: list[str]) -> int:
        for doc_id in doc_ids:
            self.store.delete_document(self.collection, doc_id)
        return len(doc_ids)

    # --- documents from Python -----------------------------------------------------------------
    def ingest_documents(self, documents: Sequence[Document]) -> int:
        """Ingest in-memory documents (keyed by ``doc.doc_id``); unchanged ones are skipped."""
        existing = self.store.content_hashes(self.collection, [d.doc_id for d in documents])
        todo: list[tuple[str, str, list[Document]]] = []
        replacing: set[str] = set()
        for doc in documents:
            digest = self.text_version(doc.text)
            old = existing.get(doc.doc_id)
            if old == digest:
                continue
            todo.append((doc.doc_id, digest, [doc]))
            if old is not None:
                replacing.add(doc.doc_id)
        return self._write(todo, replacing=replacing)

    # --- internals ---------------------------------------------------------------------------
    def _fits(self, doc: Document) -> bool:
        """Whether the document is one chunk as it is (text and metadata within chunk_size)."""
        text = doc.get_content(metadata_mode=MetadataMode.NONE)
        if len(text) > self.splitter.chunk_size * 8:  # far too long whatever the tokens
            return False
        limit = self.splitter.chunk_size - 8  # margin for the splitter's separators
        metas = [doc.get_metadata_str(mode) for mode in (MetadataMode.EMBED, MetadataMode.LLM)]
        tokens = len(self._tokenizer(text))
        # a token is at least one byte: short metadata need not be tokenized to know it fits
        if tokens + max(len(m.encode("utf-8")) for m in metas) <= limit:
            return True
        return tokens + max(len(self._tokenizer(m)) for m in metas) <= limit

    def _split(self, doc: Document) -> list[BaseNode]:
        """The document's chunks; a short document becomes one chunk without the splitter.

        Most documents of a corpus of abstracts, tickets or FAQ entries are shorter than a
        chunk; building their node directly is ~50x cheaper than running the splitter, which
        otherwise costs a few percent of ingestion time on CPU.
        """
        if not self._fits(doc):
            return list(self.splitter.get_nodes_from_documents([doc]))
        text = doc.get_content(metadata_mode=MetadataMode.NONE)
        node = TextNode(
            text=text,
            metadata=dict(doc.metadata),
            excluded_embed_metadata_keys=list(doc.excluded_embed_metadata_keys),
            excluded_llm_metadata_keys=list(doc.excluded_llm_metadata_keys),
            metadata_separator=doc.metadata_separator,
            metadata_template=doc.metadata_template,
            text_template=doc.text_template,
            start_char_idx=0,
            end_char_idx=len(text),
        )
        return [node]

    def _chunks(self, doc_id: str, digest: str, docs: list[Document]) -> list[BaseNode]:
        nodes = [node for doc in docs for node in self._split(doc)]
        for index, node in enumerate(nodes):
            assert isinstance(node, TextNode)
            node.id_ = str(uuid.uuid5(_NAMESPACE, f"{doc_id}:{digest}:{index}"))
            bookkeeping = {
                "doc_id": doc_id,
                "content_hash": digest,
                "chunk_index": index,
                "chunk_count": len(nodes),
            }
            node.metadata.update(bookkeeping)
            for hidden in (node.excluded_embed_metadata_keys, node.excluded_llm_metadata_keys):
                hidden.extend(key for key in bookkeeping if key not in hidden)
            node.relationships = {NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc_id)}
        return nodes

    def chunk_documents(self, documents: Sequence[Document]) -> list[BaseNode]:
        """The chunks ingestion would write for these documents (ids, metadata, no vectors)."""
        nodes: list[BaseNode] = []
        for doc in documents:
            digest = self.text_version(doc.text)
            nodes.extend(self._chunks(doc.doc_id, digest, [doc]))
        return nodes

    def _write(
        self, todo: list[tuple[str, str, list[Document]]], *, replacing: Collection[str]
    ) -> int:
        nodes = [node for item in todo for node in self._chunks(*item)]
        try:
            return self.write_nodes(nodes, replacing=replacing)
        except StorageFullError as exc:
            raise StorageFullError(
                "ingestion stopped: no space left on the disk holding the store "
                f"({self.store.location}); nothing already stored was lost (a document cut short "
                "is marked incomplete and kept out of answers); free some space, then ingest the "
                "same files again"
            ) from exc

    def write_nodes(self, nodes: list[BaseNode], *, replacing: Collection[str] = ()) -> int:
        """Embed and upsert chunks, in length-sorted pools (see the module docstring).

        Chunks are stored marked incomplete. Once every chunk of a document is stored (its
        ``chunk_count``, in this call or over several calls of this ingestor), the other
        versions of the documents in ``replacing`` (ids) are deleted and the mark is taken off.
        """
        if not nodes:
            return 0
        expected = _expected_chunks(nodes)
        bar = tqdm(total=len(nodes), desc="embedding", unit="chunk", disable=not self.progress)
        pending: Future[None] | None = None
        writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="citeflow-upsert")
        try:
            for batch, texts in self._batches(nodes):
                vectors = self.embed_model.get_text_embedding_batch(texts)
                for node, vector in zip(batch, vectors, strict=True):
                    node.embedding = vector
                args = (batch, texts, expected, replacing)
                if not self.overlap_writes:
                    self._store_batch(*args)
                else:
                    if pending is not None:
                        pending.result()  # surface a failed write before queueing the next
                    pending = writer.submit(self._store_batch, *args)
                bar.update(len(batch))
            if pending is not None:
                pending.result()
        finally:
            writer.shutdown(wait=True)
            bar.close()
        return len(nodes)

    def _batches(self, nodes: list[BaseNode]) -> Iterator[tuple[list[BaseNode], list[str]]]:
        """Embedding batches: each pool of chunks sorted by text length, cut into windows."""
        for start in range(0, len(nodes), self.pool):
            pool = nodes[start : start + self.pool]
            texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in pool]
            order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
            for at in range(0, len(order), self.window):
                window = order[at : at + self.window]
                yield [pool[i] for i in window], [texts[i] for i in window]

    def _store_batch(
        self,
        batch: list[BaseNode],
        texts: list[str],
        expected: dict[tuple[str, str], int],
        replacing: Collection[str],
    ) -> None:
        """BM25 vectors of embedded chunks (``texts`` as embedded), one upsert (marked
        incomplete), then the documents it finishes are made complete."""
        self.store.add(
            self.collection, batch, self.encoder.encode_documents(texts), incomplete=True
        )
        finished: list[str] = []
        for node in batch:
            key = _document_key(node)
            stored = self._stored.setdefault(key, set())
            stored.add(node.node_id)
            if len(stored) >= expected[key]:
                if key[0] in replacing:
                    self.store.delete_other_versions(self.collection, *key)
                finished.extend(self._stored.pop(key))
        self.store.mark_complete(self.collection, finished)


def _document_key(node: BaseNode) -> tuple[str, str]:
    """A chunk's document and version: its ``doc_id`` and ``content_hash``."""
    return str(node.metadata.get("doc_id", "")), str(node.metadata.get("content_hash", ""))


def _expected_chunks(nodes: Sequence[BaseNode]) -> dict[tuple[str, str], int]:
    """How many chunks each document of these chunks has: its ``chunk_count``, else (chunks
    written elsewhere) how many of them are here."""
    here = Counter(map(_document_key, nodes))
    recorded: dict[tuple[str, str], int] = {}
    for node in nodes:
        count = node.metadata.get("chunk_count")
        if isinstance(count, int):
            recorded[_document_key(node)] = count
    return {key: recorded.get(key, n) for key, n in here.items()}
