"""The engine behind the server: one store, one embedder, one LLM, a workflow per collection.

Built once at start-up (`Engine.from_settings`) or by a test from fakes::

    engine = Engine(settings, store=Store.open_path(":memory:"), embed_model=HashEmbedding(),
                    llm=ScriptedLLM([...]))
    app = create_app(engine)

Every request path is async: store calls hop to a worker thread, workflow runs are cancelled when
their client goes away (`citeflow.api.workflow_runs`). `Engine.from_settings` wraps an in-process
embedder in `citeflow.query.batching.BatchedQueryEmbedding`, so that concurrent questions are
embedded together, in one encoder call, instead of one worker thread each; an OpenAI or Azure LLM
sends its requests through aiohttp (`citeflow.providers.aiohttp_transport`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Callable, Collection, Sequence
from pathlib import Path
from typing import ParamSpec, TypeVar

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM, ChatMessage
from workflows.events import Event
from workflows.handler import WorkflowHandler

from citeflow.api.errors import ModelNotFoundError, NotReadyError
from citeflow.api.workflow_runs import await_run, stream_run
from citeflow.errors import CollectionNotFoundError, EmptyCollectionError
from citeflow.ingestion.pipeline import IngestReport
from citeflow.knowledge_base import KnowledgeBase
from citeflow.result import CitedResponse
from citeflow.settings import Settings
from citeflow.store import DocumentRecord, Store
from citeflow.workflows.citation_query import CitationQueryWorkflow

log = logging.getLogger("citeflow.server")
T = TypeVar("T")
P = ParamSpec("P")

#: Model ids are ``citeflow-<collection>``.
MODEL_PREFIX = "citeflow-"

#: Seconds a collection found to hold documents is trusted without asking the store again.
OPEN_TTL = 5.0


class Engine:
    """What the server serves from: the store, the providers and one workflow per collection."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store,
        embed_model: BaseEmbedding,
        llm: LLM,
    ) -> None:
        self.settings = settings
        self.store = store
        self.embed_model = embed_model
        self.llm = llm
        self.started = int(time.time())
        self._workflows: dict[str, CitationQueryWorkflow] = {}
        self._opened: dict[str, tuple[str, float]] = {}  # model -> (collection, checked at)
        self._known: tuple[frozenset[str], float] | None = None  # collections, listed at
        self._ingest_lock = asyncio.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> Engine:
        """Open the store and build the embedder and the LLM the settings name (blocking).

        Raises:
            StoreLockedError: the embedded store is used by another process.
            ConfigError, ModelError: a provider is misconfigured or its model cannot load.
        """
        from citeflow.providers.embeddings import build_embed_model
        from citeflow.providers.llm import build_llm
        from citeflow.query.batching import batch_queries

        store = Store.open(settings.store)
        try:
            _warn_unindexed(store)
            embed_model = batch_queries(
                build_embed_model(settings, threads=settings.embeddings.serve_threads)
            )
            llm = build_llm(settings, aiohttp=True)
        except BaseException:
            store.close()
            raise
        return cls(settings, store=store, embed_model=embed_model, llm=llm)

    async def aclose(self) -> None:
        """Close what is bound to the server's event loop: the LLM's async SDK client and its
        HTTP client (the aiohttp session), through the LLM's ``aclose`` when it has one
        (`citeflow.providers.openai_stream.LeanStreamingMixin.aclose`). Called when the app
        shuts down, before `close`."""
        closer = getattr(self.llm, "aclose", None)
        if callable(closer):
            await closer()

    def close(self) -> None:
        """Close the LLM and the embedder when they hold resources (threads), then the store."""
        for provider in (self.llm, self.embed_model):
            closer = getattr(provider, "close", None)
            if callable(closer):
                closer()
        self.store.close()

    # --- models and collections --------------------------------------------------------------
    @staticmethod
    def model_id(collection: str) -> str:
        """The model id of a collection: ``citeflow-<collection>``."""
        return f"{MODEL_PREFIX}{collection}"

    async def collections(self) -> list[str]:
        """The knowledge bases in the store."""
        return await asyncio.to_thread(self.store.collections)

    @staticmethod
    def match(name: str, known: Collection[str]) -> str | None:
        """The collection of ``known`` that a model id or collection name means, if any:
        ``citeflow-<collection>``, else the name as it is."""
        for candidate in (name.removeprefix(MODEL_PREFIX), name):
            if candidate in known:
                return candidate
        return None

    def _resolve(self, model: str) -> str:
        known = self.store.collections()
        found = self.match(model, known)
        if found is not None:
            return found
        listed = ", ".join(self.model_id(c) for c in known) or "none; ingest documents first"
        raise ModelNotFoundError(f"the model {model!r} does not exist (available: {listed})")

    async def resolve(self, model: str) -> str:
        """The collection a model id names.

        Raises:
            ModelNotFoundError: no such collection (HTTP 404).
        """
        return await asyncio.to_thread(self._resolve, model)

    def _open(self, model: str) -> str:
        collection = self._resolve(model)
        if self.store.count(collection) == 0:
            raise EmptyCollectionError(
                f"knowledge base {collection!r} has no documents; add some with: citeflow ingest "
                f"PATH --collection {collection}, or POST /v1/collections/{collection}/documents"
            )
        return collection

    async def open_collection(self, model: str) -> str:
        """The collection a model id names, checked to hold documents.

        A positive answer is remembered for `OPEN_TTL` seconds (and forgotten when documents
        change through this engine): under load, every request would otherwise queue for the
        store's lock behind the searches.

        Raises:
            ModelNotFoundError: no such collection (404).
            EmptyCollectionError: the collection has no documents (400).
        """
        now = time.monotonic()
        cached = self._opened.get(model)
        if cached is not None and now - cached[1] < OPEN_TTL:
            return cached[0]
        collection = await asyncio.to_thread(self._open, model)
        self._opened[model] = (collection, now)
        return collection

    async def find_collections(self, names: Sequence[str]) -> list[str | None]:
        """The collection each of ``names`` means (`match`: a collection name or a model id),
        None for a name that none is.

        The store's list of collections is remembered for `OPEN_TTL` seconds while it holds
        every name asked for (asked again as soon as one is missing), for the reason given in
        `open_collection`.
        """
        now = time.monotonic()
        known = self._known
        if (
            known is None
            or now - known[1] >= OPEN_TTL
            or any(self.match(name, known[0]) is None for name in names)
        ):
            known = (frozenset(await self.collections()), now)
            self._known = known
        return [self.match(name, known[0]) for name in names]

    def knowledge_base(self, collection: str) -> KnowledgeBase:
        return KnowledgeBase(
            self.settings, store=self.store, embed_model=self.embed_model, collection=collection
        )

    def workflow(self, collection: str) -> CitationQueryWorkflow:
        """The query workflow of a collection (one per collection, shared by its runs)."""
        if collection not in self._workflows:
            self._workflows[collection] = self.knowledge_base(collection).workflow(llm=self.llm)
        return self._workflows[collection]

    # --- runs --------------------------------------------------------------------------------
    def _start(
        self, collection: str, query: str, history: Sequence[ChatMessage]
    ) -> WorkflowHandler:
        return self.workflow(collection).run(query=query, history=list(history))

    def events(
        self, collection: str, query: str, history: Sequence[ChatMessage] = ()
    ) -> AsyncGenerator[Event | CitedResponse, None]:
        """Run the workflow: its stream events, then its `CitedResponse` (`stream_run`: closing
        the generator early cancels the run)."""
        return stream_run(
            lambda: self._start(collection, query, history), self.settings.server.cancel_timeout
        )

    async def answer(
        self, collection: str, query: str, history: Sequence[ChatMessage] = ()
    ) -> CitedResponse:
        """Run the workflow to its result; cancelling the caller cancels the run."""
        handler = self._start(collection, query, history)
        return await await_run(handler, self.settings.server.cancel_timeout)

    # --- documents ---------------------------------------------------------------------------
    def upload_dir(self, collection: str) -> Path:
        """Where uploaded files of a collection are kept (they are the documents' originals)."""
        return self.settings.store.data_dir / "uploads" / collection

    async def ingest_files(self, collection: str, paths: Sequence[Path]) -> IngestReport:
        """Ingest files into a collection through this engine's store (one ingestion at a time).

        Embedding and writing run in a worker thread; the event loop stays free.
        """
        kb = self.knowledge_base(collection)
        return await self._change(kb.ingest, list(paths), progress=False)

    async def _change(self, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Change documents in a worker thread, one change at a time; then forget what is
        remembered of the collections."""
        async with self._ingest_lock:
            try:
                return await asyncio.to_thread(work, *args, **kwargs)
            finally:
                self._opened.clear()
                self._known = None

    def _records(self, collection: str) -> dict[str, DocumentRecord]:
        if not self.store.exists(collection):
            raise CollectionNotFoundError(f"no knowledge base named {collection!r}")
        return self.store.documents(collection)

    async def documents(self, collection: str) -> list[DocumentRecord]:
        """The documents of a collection, by file path.

        Raises:
            CollectionNotFoundError: no such collection (404).
        """
        records = await asyncio.to_thread(self._records, collection)
        return sorted(records.values(), key=lambda d: (d.file_path, d.doc_id))

    async def document(self, collection: str, doc_id: str) -> DocumentRecord:
        """One document.

        Raises:
            CollectionNotFoundError: no such collection or document (404).
        """
        record = (await asyncio.to_thread(self._records, collection)).get(doc_id)
        if record is None:
            raise CollectionNotFoundError(
                f"no document {doc_id!r} in knowledge base {collection!r}"
            )
        return record

    async def delete_document(self, collection: str, doc_id: str) -> DocumentRecord:
        """Delete a document's chunks, and its file if it was uploaded to this server."""
        record = await self.document(collection, doc_id)
        await self._change(self.store.delete_document, collection, doc_id)
        path = Path(record.file_path) if record.file_path else None
        if path is not None and path.parent == self.upload_dir(collection).resolve():
            await asyncio.to_thread(path.unlink, missing_ok=True)
        return record

    # --- health ------------------------------------------------------------------------------
    async def readiness(self) -> None:
        """Return when the store answers (the providers are loaded: the engine exists).

        Raises:
            NotReadyError: the store does not answer within 5 s or fails.
        """
        try:
            await asyncio.wait_for(self.collections(), timeout=5.0)
        except Exception as exc:
            raise NotReadyError(f"the store does not answer: {type(exc).__name__}") from exc


#: written but not indexed chunks past which `citeflow serve` says so at start-up (an exact scan
#: of 20,000 384-d chunks adds about 2-4 ms to each search on a 2-core machine)
UNINDEXED_WARNING = 20_000


def _warn_unindexed(store: Store) -> None:
    """One log line per collection whose recent writes are not indexed yet (the embedded store
    never indexes while serving: `citeflow.store.edge`)."""
    if not store.embedded:
        return
    for collection in store.collections():
        pending = store.unindexed(collection)
        if pending > UNINDEXED_WARNING:
            log.warning(
                "about %d chunks of %r are not indexed yet and are searched by a scan; stop "
                "the server and run `citeflow optimize --collection %s` to index them",
                pending,
                collection,
                collection,
            )
