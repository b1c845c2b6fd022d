"""``POST /search``: citeflow's retrieval for Open WebUI deployments that send retrieval to a
separate service (the external-retrieval contract of the AarhusAI retrieval-agent and its Open
WebUI fork).

| route | auth | what |
| --- | --- | --- |
| ``POST /search`` (also ``POST /v1/search``) | yes | graded chunks per query, best first |

The body is ``{"queries": [...]}`` or ``{"messages": [...]}``, with ``collection_names``
(default: the server's default knowledge base) and ``k`` (results per query, 1 to
`citeflow.api.schemas.MAX_SEARCH_K`); the answer is ``{"documents": [[...]], "metadatas":
[[...]], "distances": [[...]]}``, one list per query (`citeflow.api.schemas.SearchRequest`,
`SearchResponse`).

A search is the first half of a chat completion, done by the workflow's own components
(`citeflow.workflows.citation_query`): with ``messages``, the rewrite (`condense`: the last user
message made standalone from the earlier turns; no LLM call without them); per query and round,
the query embedded once and every knowledge base searched with it (`Retriever`, hybrid by
default), the hits of all knowledge bases merged with one chunk text counted once, then graded
(the workflow's `Grader`); when grading keeps nothing and ``CITEFLOW_MAX_ROUNDS`` allows,
`reformulate` and search again; when no round keeps anything, the workflow's fallback
(`citeflow.query.grading.fallback_hits`: the best hits of all rounds, or none with
``CITEFLOW_ON_NO_RELEVANT=refuse``). Within a query's list a chunk text appears once (the same
chunk in two knowledge bases, or found by two rounds); results are sorted by their distance.

``distances`` are the relevance a chat completion's sources show: the query embedding's cosine
with the chunk, clamped to [0, 1] (in ``keyword`` retrieval, BM25's score s as s / (1 + s)).
Each list is sorted by it: hybrid fusion chooses each knowledge base's k chunks, their cosine
orders the merged list (a fused score is relative to its own search, so it does not compare
across knowledge bases), and Open WebUI sorts the results it merges by distance anyway.

The budget (``CITEFLOW_SEARCH_TIMEOUT``, `ServerSettings.search_timeout`) bounds the work that
waits: the rewrite (out of time: the last user message as it is), grading by the LLM, the
retry rounds. The first search of each query always runs (without it there is nothing to
answer with). Out of time, a query's answer is the fallback over the hits found so far: a
search is answered, never failed, for its budget.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from llama_index.core.schema import MetadataMode, NodeWithScore

from citeflow.api.deps import EngineDep, LinksDep, require_api_key
from citeflow.api.docs import json_body
from citeflow.api.engine import Engine
from citeflow.api.errors import BadRequestError, PayloadTooLargeError, UnknownCollectionError
from citeflow.api.links import DocumentLinks
from citeflow.api.routes import ERRORS, read_json, unless_disconnected
from citeflow.api.schemas import Conversation, SearchMetadata, SearchRequest, SearchResponse
from citeflow.api.source_events import source_payload
from citeflow.citations.sources import Source
from citeflow.query.batching import embed_query
from citeflow.query.grading import fallback_hits, keep_best
from citeflow.query.rewriting import condense, reformulate
from citeflow.workflows.citation_query import CitationQueryWorkflow
from citeflow.workflows.upstream import upstream

log = logging.getLogger("citeflow.server")

T = TypeVar("T")

router = APIRouter(tags=["search"], dependencies=[Depends(require_api_key)], responses=ERRORS)


# --- the request ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SearchPlan:
    """A validated request: the search strings, or the conversation to make the one query of."""

    queries: list[str]
    k: int
    conversation: Conversation | None = None


def _names(body: SearchRequest, default: str) -> list[str]:
    if body.collection_names is None:
        return [default]
    if not body.collection_names:
        raise BadRequestError(
            f"'collection_names' is empty; name at least one knowledge base, or leave it out "
            f"to search the default one ({default!r})",
            param="collection_names",
        )
    return body.collection_names


def _shown(name: str) -> str:
    return repr(name if len(name) <= 80 else name[:77] + "...")


async def resolve_collections(engine: Engine, body: SearchRequest) -> list[str]:
    """The knowledge bases to search, each once, in the order named.

    Raises:
        BadRequestError: ``collection_names`` is empty (400).
        UnknownCollectionError: a name (or the default) is no knowledge base (404).
    """
    default = engine.settings.store.collection
    names = _names(body, default)
    found = await engine.find_collections(names)
    for index, (name, collection) in enumerate(zip(names, found, strict=True)):
        if collection is not None:
            continue
        if body.collection_names is None:
            raise UnknownCollectionError(
                f"the default knowledge base {default!r} does not exist; name one in "
                "'collection_names' (GET /v1/models lists them: model citeflow-NAME is "
                "knowledge base NAME)",
                param="collection_names",
            )
        raise UnknownCollectionError(
            f"no knowledge base named {_shown(name)}; GET /v1/models lists them (model "
            "citeflow-NAME is knowledge base NAME)",
            param=f"collection_names[{index}]",
        )
    return list(dict.fromkeys(c for c in found if c is not None))


def plan_search(body: SearchRequest, *, max_chars: int) -> SearchPlan:
    """What to search for: ``messages`` when given (``queries`` then ignored), else ``queries``.

    Raises:
        BadRequestError: neither is given, one is empty, a query is blank, or a message is
            wrong as in a chat completion (400).
        PayloadTooLargeError: a query or message longer than ``max_chars`` (413).
    """
    if body.messages or (body.messages is not None and body.queries is None):
        conversation = Conversation.from_messages(body.messages, max_chars=max_chars)
        return SearchPlan([" ".join(conversation.query.split())], body.k, conversation)
    if body.queries is None:
        raise BadRequestError(
            "send 'queries' (a list of search strings) or 'messages' (a chat whose last user "
            "message is the question)"
        )
    if not body.queries:
        raise BadRequestError(
            "'queries' is empty; send at least one search string, or 'messages'",
            param="queries",
        )
    queries: list[str] = []
    for index, text in enumerate(body.queries):
        if len(text) > max_chars:
            raise PayloadTooLargeError(
                f"queries[{index}] has {len(text)} characters; the limit is {max_chars}",
                param=f"queries[{index}]",
            )
        query = " ".join(text.split())
        if not query:
            raise BadRequestError(f"queries[{index}] is empty", param=f"queries[{index}]")
        queries.append(query)
    return SearchPlan(queries, body.k)


# --- the search ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Found:
    """A hit, the knowledge base it came from, and what makes two hits the same result: their
    text, whitespace aside (`of`)."""

    collection: str
    hit: NodeWithScore
    key: str

    @classmethod
    def of(cls, collection: str, hit: NodeWithScore) -> Found:
        text = hit.node.get_content(metadata_mode=MetadataMode.NONE)
        return cls(collection, hit, " ".join(text.split()))

    @property
    def score(self) -> float:
        return float(self.hit.score or 0.0)


def _best_first(items: Sequence[Found]) -> list[Found]:
    return sorted(items, key=lambda f: -f.score)


class Search:
    """One request's searches: its queries side by side, each through rounds of retrieve →
    grade (→ reformulate), within one deadline (the event loop's clock)."""

    def __init__(
        self, engine: Engine, plan: SearchPlan, collections: Sequence[str], *, deadline: float
    ) -> None:
        self.plan = plan
        self.deadline = deadline
        self.workflows = [engine.workflow(c) for c in collections]
        self.timed_out = False

    @property
    def first(self) -> CitationQueryWorkflow:
        """The workflow whose grader, LLM and options serve the merged hits (every
        collection's are built from the same settings)."""
        return self.workflows[0]

    async def _within(self, work: Awaitable[T]) -> T | None:
        """``work``'s result, or None when the deadline comes first (``work`` cancelled).

        Past the deadline, work that needs no waiting (the score grader) still completes.
        """
        scope = asyncio.timeout_at(self.deadline)
        try:
            async with scope:
                return await work
        except TimeoutError:
            if not scope.expired():
                raise
            self.timed_out = True
            return None

    def _out_of_time(self) -> bool:
        if asyncio.get_running_loop().time() >= self.deadline:
            self.timed_out = True
        return self.timed_out

    async def run(self) -> list[list[Found]]:
        """Each query's results, best first."""
        queries = self.plan.queries
        conversation = self.plan.conversation
        if conversation is not None and conversation.history:
            with upstream("LLM"):
                made = await self._within(
                    condense(self.first.llm, queries[0], conversation.history)
                )
            queries = [" ".join((made or "").split()) or queries[0]]
        results = await asyncio.gather(*(self._query(q) for q in queries), return_exceptions=True)
        out: list[list[Found]] = []
        for result in results:
            if isinstance(result, BaseException):
                raise result
            out.append(result)
        return out

    async def _retrieve(self, query: str) -> list[Found]:
        """The hits of every collection for ``query`` (embedded once), merged by text."""
        retriever = self.first.retriever
        embedding = None
        with upstream("embedding"):
            # one collection: the retriever embeds the query its own way
            if len(self.workflows) > 1 and retriever.mode != "keyword":
                embedding = await embed_query(retriever.embed_model, query)
            rankings = await asyncio.gather(
                *(
                    w.retriever.aretrieve(query, self.plan.k, embedding=embedding)
                    for w in self.workflows
                )
            )
        merged: dict[str, Found] = {}
        for workflow, hits in zip(self.workflows, rankings, strict=True):
            collection = workflow.retriever.collection
            keep_best(merged, (Found.of(collection, hit) for hit in hits), key=lambda f: f.key)
        return _best_first(list(merged.values()))

    async def _query(self, query: str) -> list[Found]:
        """One query's rounds (the workflow's retrieve → grade → reformulate), then its answer:
        the relevant hits of the round that found some, else the fallback over all rounds."""
        workflow = self.first
        retrieval = workflow.retrieval
        pool: dict[str, Found] = {}
        current = query
        for round_ in range(1, retrieval.max_rounds + 1):
            if round_ > 1:
                if self._out_of_time():
                    break
                with upstream("LLM"):
                    worded = await self._within(reformulate(workflow.llm, query, current, round_))
                if worded is None:
                    break
                current = worded
            retrieving = self._retrieve(current)
            # the first round always runs: without it there is nothing to answer with
            hits = await retrieving if round_ == 1 else await self._within(retrieving)
            if hits is None:
                break
            keep_best(pool, hits, key=lambda f: f.key)
            by_id = {f.hit.node.node_id: f for f in hits}
            with upstream("LLM"):
                relevant = await self._within(workflow.grader.grade(current, [f.hit for f in hits]))
            if relevant is None:
                break
            if relevant:
                kept = [by_id[n.node.node_id] for n in relevant if n.node.node_id in by_id]
                return _best_first(kept)[: self.plan.k]
        return fallback_hits(pool.values(), retrieval)[: self.plan.k]


# --- the answer ----------------------------------------------------------------------------------
def distance(score: float, *, keyword: bool) -> float:
    """A hit's score as a distance in [0, 1], higher is better (see the module doc)."""
    if keyword:
        return round(score / (1.0 + score), 4) if score > 0 else 0.0
    return round(min(1.0, max(0.0, score)), 4)


def search_metadata(
    found: Found, number: int, *, base_url: str, links: DocumentLinks
) -> tuple[str, SearchMetadata]:
    """A result's text and metadata, from the same fields a chat completion's ``source``
    event shows (`citeflow.api.source_events.source_payload`), plus its collection and chunk
    index."""
    payload = source_payload(
        Source.whole(found.hit, number),
        number,
        collection=found.collection,
        link=lambda collection, doc_id: links.url(base_url, collection, doc_id),
    )
    ref, shown = payload["source"], payload["metadata"][0]
    meta: SearchMetadata = {
        "source": ref["id"],
        "name": ref["name"],
        "doc_id": shown["doc_id"],
        "file_name": shown["file_name"],
        "collection": found.collection,
    }
    if "page" in shown:
        meta["page"] = shown["page"]
    index = found.hit.node.metadata.get("chunk_index")
    if isinstance(index, int) and not isinstance(index, bool):
        meta["chunk_index"] = index
    meta["url"] = ref["url"]
    return payload["document"][0], meta


def search_response(
    results: Sequence[Sequence[Found]], *, keyword: bool, base_url: str, links: DocumentLinks
) -> SearchResponse:
    documents: list[list[str]] = []
    metadatas: list[list[SearchMetadata]] = []
    distances: list[list[float]] = []
    for found in results:
        pairs = [
            search_metadata(item, number, base_url=base_url, links=links)
            for number, item in enumerate(found, start=1)
        ]
        documents.append([text for text, _ in pairs])
        metadatas.append([meta for _, meta in pairs])
        distances.append([distance(item.score, keyword=keyword) for item in found])
    return SearchResponse(documents=documents, metadatas=metadatas, distances=distances)


# --- the route -----------------------------------------------------------------------------------
@router.post("/v1/search", include_in_schema=False)
@router.post(
    "/search",
    response_model=SearchResponse,
    # documentation only: the body is read by `read_json`, its errors are citeflow's own
    openapi_extra=json_body(SearchRequest),
)
async def search(request: Request, engine: EngineDep, links: LinksDep) -> Any:
    """Chunks of the knowledge bases for each query, graded and best first (see the module
    doc of `citeflow.api.search`)."""
    options = engine.settings.server
    loop = asyncio.get_running_loop()
    deadline = loop.time() + options.search_timeout
    body = SearchRequest.model_validate(await read_json(request, options.max_body_bytes))
    plan = plan_search(body, max_chars=options.max_message_chars)
    collections = await resolve_collections(engine, body)
    work = Search(engine, plan, collections, deadline=deadline)
    results = await unless_disconnected(request, work.run())
    if results is None:
        return Response(status_code=499)
    if work.timed_out:
        log.info(
            "search budget of %.1f s ran out; answered with what was found",
            options.search_timeout,
            extra={"path": request.url.path},
        )
    keyword = work.first.retriever.mode == "keyword"
    return search_response(results, keyword=keyword, base_url=str(request.base_url), links=links)
