"""Azure AI Search integrated vectorisation: a Custom Web API skill and vectorizer over citeflow.

| route | auth | what |
| --- | --- | --- |
| ``POST /v1/skills/embeddings`` | yes | the skill: an indexer's records embedded as documents |
| ``POST /v1/skills/embeddings?input_type=query`` | yes | the vectorizer: a query, as a question |

Both speak Azure's Custom Web API envelope: ``{"values": [{"recordId", "data": {"text"}}]}`` in,
``{"values": [{"recordId", "data": {"vector"}, "errors", "warnings"}]}`` out, in the same order.
The custom Web API vectorizer sends the same envelope with one record per call, at query time;
``input_type=query`` embeds it as citeflow's own retrieval embeds a question (the query API of
the embedder; the bundled MiniLM and OpenAI/Azure models give the same vector either way).
The embedder is the engine's, the one ingestion and retrieval use: the local model, OpenAI, or
Azure OpenAI (through API Management with its headers, `citeflow.providers.embeddings`).

A bad record is that record's error and the others are embedded: no ``recordId``, no ``data``,
a ``text`` that is missing, not a string, empty, over `ServerSettings.max_skill_text_chars`
(32,000 characters) or not valid Unicode, or a text the provider refuses (HTTP 400: e.g. over
its token limit; the batch is then sent again record by record). It gets ``"data": {}`` and
``"errors": [{"message": ...}]``. The whole call is refused (`citeflow.api.errors`) when the body
is not a JSON object or has no ``values`` list (400), holds more than
`ServerSettings.max_skill_records` records or bytes than `ServerSettings.max_skill_body_bytes`
(413), and when the provider fails: its HTTP 429 is passed on as 429 with ``Retry-After``, any
other failure is a 502 (Azure's indexer retries both).

Embedding, measured with the local embedder by ``bench/skill_throughput.py``:

* an HTTP embedder (OpenAI, Azure) gets the call's batches (``CITEFLOW_EMBED_BATCH_SIZE``)
  concurrently through its async API, as `BaseEmbedding.aget_text_embedding_batch` sends them;
* an in-process one computes on a worker thread, one batch at a time (the event loop stays
  free for other requests), the texts sorted by length as ingestion sorts them (a batch pads
  to its longest text); while a batch is embedded, the vectors of the previous one are
  written into the response, so the JSON (8 MB for 1,000 vectors of 384 floats) costs no
  embedding time.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import openai
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from llama_index.core.base.embeddings.base import BaseEmbedding
from pydantic import BaseModel, ConfigDict, Field

from citeflow.api.deps import EngineDep, require_api_key
from citeflow.api.docs import json_body
from citeflow.api.errors import BadRequestError, PayloadTooLargeError
from citeflow.api.routes import read_json, unless_disconnected
from citeflow.api.schemas import ErrorResponse
from citeflow.errors import CiteflowError, UpstreamError, UpstreamRateLimitError
from citeflow.providers.embeddings import embeds_remotely
from citeflow.providers.upstream_errors import as_upstream_error
from citeflow.query.batching import is_async_native
from citeflow.settings import ServerSettings

log = logging.getLogger("citeflow.server")

ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse} for status in (400, 401, 413, 429, 500, 502, 503)
}

router = APIRouter(
    prefix="/v1", tags=["skills"], dependencies=[Depends(require_api_key)], responses=ERRORS
)

#: Vectors rendered on the event loop up to this many floats per batch, in a worker thread past
#: it (a batch of 64 vectors of 1,536 floats takes ~50 ms to write as JSON).
RENDER_INLINE_FLOATS = 16 * 1024
#: Query embeddings in flight at once for one call (``input_type=query``).
QUERY_CONCURRENCY = 16
#: Upstream statuses that mean "this input is refused", not "the provider failed".
REFUSED_INPUT = (400, 413, 422)

InputType = Literal["document", "query"]


# --- the wire format (Azure's Custom Web API skill) ----------------------------------------------
class SkillInput(BaseModel):
    """A record's ``data``: the skill input named ``text``."""

    model_config = ConfigDict(extra="allow")

    text: str = Field(description="The text to embed (at most 32,000 characters by default).")


class SkillRecord(BaseModel):
    """One record of a skill or vectorizer call."""

    model_config = ConfigDict(extra="allow")

    recordId: str = Field(description="Unique within the call; echoed in the answer.")
    data: SkillInput


class SkillRequest(BaseModel):
    """A Custom Web API skill (or vectorizer) call: up to 1,000 records by default."""

    model_config = ConfigDict(extra="allow")

    values: list[SkillRecord]


class SkillMessage(BaseModel):
    """An error or warning of one record."""

    message: str


class SkillVector(BaseModel):
    """A record's output: ``vector``, or nothing (``{}``) when the record has errors."""

    vector: list[float] | None = Field(default=None, description="Absent on a record error.")


class SkillResult(BaseModel):
    """One record's answer, in the order of the request."""

    recordId: str | None = Field(description="The request's recordId; null if it had none.")
    data: SkillVector
    errors: list[SkillMessage] | None = None
    warnings: list[SkillMessage] | None = None


class SkillResponse(BaseModel):
    """The answer to a skill (or vectorizer) call."""

    values: list[SkillResult]


# --- records -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Record:
    """A request record as read: its id (None if missing or not a string), its text (None when
    the record is refused) and what is wrong with it."""

    record_id: str | None
    text: str | None
    errors: tuple[str, ...] = ()


def _kind(value: Any) -> str:
    """A JSON value's type, as a message names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "a string"


def _text_error(data: dict[str, Any], max_chars: int) -> str | None:
    """What is wrong with ``data["text"]``, or None."""
    if "text" not in data:
        others = [key for key in ("imageUrl", "imageBinary") if key in data]
        if others:
            return f"data.{others[0]}: citeflow embeds text only; send data.text"
        return "data.text is missing: map the skill input named 'text' to the text to embed"
    text = data["text"]
    if not isinstance(text, str):
        return f"data.text must be a string, not {_kind(text)}"
    if not text.strip():
        return "data.text is empty: there is nothing to embed"
    if len(text) > max_chars:
        return (
            f"data.text is {len(text):,} characters long, over the limit of {max_chars:,}; "
            "split it first (e.g. with the Text Split skill)"
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"data.text holds a lone UTF-16 surrogate (\\u{ord(text[exc.start]):04x}), which is "
            "not valid Unicode"
        )
    return None


def read_record(value: Any, max_chars: int) -> Record:
    """One element of ``values``, checked: every problem of it is listed."""
    if not isinstance(value, dict):
        return Record(
            None,
            None,
            (f"the record is {_kind(value)}, not an object {{'recordId': ..., 'data': ...}}",),
        )
    errors: list[str] = []
    record_id = value.get("recordId")
    if record_id is None:
        errors.append("recordId is missing: every record needs a unique string recordId")
    elif not isinstance(record_id, str):
        errors.append(f"recordId must be a string, not {_kind(record_id)}")
        record_id = None
    data = value.get("data")
    if not isinstance(data, dict):
        what = "missing" if data is None else f"{_kind(data)}, not an object"
        errors.append(f"data is {what}: expected {{'text': '...'}}")
    elif (problem := _text_error(data, max_chars)) is not None:
        errors.append(problem)
    if errors:
        return Record(record_id, None, tuple(errors))
    assert isinstance(data, dict)
    return Record(record_id, data["text"])


def read_records(body: dict[str, Any], options: ServerSettings) -> list[Record]:
    """The records of a call, each checked.

    Raises:
        BadRequestError: ``values`` is missing or not a list (400).
        PayloadTooLargeError: more than ``max_skill_records`` records (413).
    """
    values = body.get("values")
    if values is None:
        raise BadRequestError(
            "values is missing: send {'values': [{'recordId': ..., 'data': {'text': ...}}]}",
            param="values",
        )
    if not isinstance(values, list):
        raise BadRequestError(f"values must be an array, not {_kind(values)}", param="values")
    limit = options.max_skill_records
    if len(values) > limit:
        raise PayloadTooLargeError(
            f"{len(values):,} records in one call, over the limit of {limit:,}; set the skill's "
            f"batchSize to {limit:,} or less",
            param="values",
        )
    return [read_record(value, options.max_skill_text_chars) for value in values]


# --- embedding -----------------------------------------------------------------------------------
#: Called with record positions and their vectors, as each batch is embedded.
Sink = Callable[[Sequence[int], Sequence[Sequence[float]]], None]


def _refused(exc: BaseException) -> bool:
    """Whether a provider's error refuses the input (a bad text), not the call."""
    return isinstance(exc, openai.APIStatusError) and exc.status_code in REFUSED_INPUT


def _upstream(exc: BaseException) -> UpstreamError:
    return as_upstream_error(exc, what="embedding")


def _checked(batch: Sequence[int], vectors: Sequence[Sequence[float]]) -> None:
    """Raise an `UpstreamError` unless the embedder returned one vector per text."""
    if len(vectors) != len(batch):
        raise UpstreamError(
            f"the embedder returned {len(vectors)} vectors for {len(batch)} texts",
            public="the embedding provider failed; retry later, or ask the server's operator "
            "to check the server log",
        )


def _first_failure(group: BaseExceptionGroup[Any]) -> BaseException:
    """The failure a call answers with: a rate limit if any (the client retries it after
    ``Retry-After``), else the first (anything but a `CiteflowError` as an `UpstreamError`)."""
    leaves: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        exc = stack.pop()
        if isinstance(exc, BaseExceptionGroup):
            stack.extend(reversed(exc.exceptions))
        else:
            leaves.append(exc)
    for exc in leaves:
        if isinstance(exc, UpstreamRateLimitError):
            return exc
    first = leaves[0]
    return first if isinstance(first, CiteflowError) else _upstream(first)


class SkillEmbedding:
    """Embeds a call's texts with the engine's embedder (see the module docstring).

    ``refused`` collects, by position, the texts the provider refused (HTTP 400): those records'
    errors. Any other failure is raised as an `UpstreamError`.
    """

    def __init__(self, embed_model: BaseEmbedding) -> None:
        self.embed_model = embed_model
        self.refused: dict[int, str] = {}

    async def documents(self, texts: dict[int, str], sink: Sink) -> None:
        """Embed ``texts`` (by record position) as documents, in batches."""
        if not texts:
            return
        size = max(1, self.embed_model.embed_batch_size)
        order = sorted(texts, key=lambda i: len(texts[i]))  # a batch pads to its longest text
        batches = [order[i : i + size] for i in range(0, len(order), size)]
        if embeds_remotely(self.embed_model):
            await self._remote(texts, batches, sink)
        else:
            await self._local(texts, batches, sink)

    async def _local(self, texts: dict[int, str], batches: list[list[int]], sink: Sink) -> None:
        """One batch at a time on a worker thread; the previous one rendered meanwhile."""
        embed = self.embed_model.get_text_embedding_batch

        def start(batch: list[int]) -> asyncio.Future[list[list[float]]]:
            return asyncio.ensure_future(asyncio.to_thread(embed, [texts[i] for i in batch]))

        pending = start(batches[0])
        try:
            for k, batch in enumerate(batches):
                try:
                    vectors = await pending
                except Exception as exc:
                    raise _upstream(exc) from exc
                _checked(batch, vectors)
                if k + 1 < len(batches):
                    pending = start(batches[k + 1])
                sink(batch, vectors)
        finally:
            if not pending.done():
                pending.cancel()  # its thread finishes the batch; no next batch starts
                await asyncio.gather(pending, return_exceptions=True)

    async def _remote(self, texts: dict[int, str], batches: list[list[int]], sink: Sink) -> None:
        """All batches at once through the async API; each batch rendered when it arrives."""
        try:
            async with asyncio.TaskGroup() as group:
                for batch in batches:
                    group.create_task(self._remote_batch(texts, batch, sink))
        except BaseExceptionGroup as failed:
            raise _first_failure(failed) from None

    async def _remote_batch(self, texts: dict[int, str], batch: list[int], sink: Sink) -> None:
        try:
            vectors = await self.embed_model.aget_text_embedding_batch([texts[i] for i in batch])
        except Exception as exc:
            if not _refused(exc):
                raise _upstream(exc) from exc
            if len(batch) == 1:
                self._refuse(batch[0], exc)
                return
            log.info("the embedding provider refused a batch of %d; one by one", len(batch))
            async with asyncio.TaskGroup() as group:
                for i in batch:
                    group.create_task(self._remote_batch(texts, [i], sink))
            return
        _checked(batch, vectors)
        await render_off_loop(sink, batch, vectors)

    def _refuse(self, position: int, exc: BaseException) -> None:
        log.warning(
            "the embedding provider refused record %d: %s", position, _upstream(exc).message
        )
        status = exc.status_code if isinstance(exc, openai.APIStatusError) else 400
        self.refused[position] = (
            f"the embedding provider refused this text (HTTP {status}); it may be over the "
            "model's token limit: split it into shorter texts"
        )

    async def queries(self, texts: dict[int, str], sink: Sink) -> None:
        """Embed ``texts`` one by one as queries (what citeflow's retrieval does with a
        question), at most `QUERY_CONCURRENCY` at a time."""
        limit = asyncio.Semaphore(QUERY_CONCURRENCY)
        native = is_async_native(self.embed_model)

        async def one(position: int, text: str) -> None:
            async with limit:
                try:
                    if native:
                        vector = await self.embed_model.aget_query_embedding(text)
                    else:
                        vector = await asyncio.to_thread(self.embed_model.get_query_embedding, text)
                except Exception as exc:
                    if embeds_remotely(self.embed_model) and _refused(exc):
                        self._refuse(position, exc)
                        return
                    raise _upstream(exc) from exc
            sink([position], [vector])

        try:
            async with asyncio.TaskGroup() as group:
                for position, text in texts.items():
                    group.create_task(one(position, text))
        except BaseExceptionGroup as failed:
            raise _first_failure(failed) from None


async def render_off_loop(
    sink: Sink, positions: Sequence[int], vectors: Sequence[Sequence[float]]
) -> None:
    """``sink(positions, vectors)``, in a worker thread when the vectors are many floats."""
    floats = sum(len(v) for v in vectors)
    if floats > RENDER_INLINE_FLOATS:
        await asyncio.to_thread(sink, positions, vectors)
    else:
        sink(positions, vectors)


# --- the answer ----------------------------------------------------------------------------------
_COMPACT = (",", ":")


def _id_json(record_id: str | None) -> str:
    return "null" if record_id is None else json.dumps(record_id)


def vector_json(record_id: str | None, vector: Sequence[float]) -> str:
    """A record's answer with its vector (rendered as `SkillResult` would be)."""
    return (
        f'{{"recordId":{_id_json(record_id)},"data":{{"vector":'
        f'{json.dumps(vector, separators=_COMPACT)}}},"errors":null,"warnings":null}}'
    )


def errors_json(record_id: str | None, messages: Sequence[str]) -> str:
    """A refused record's answer: ``"data": {}`` and its errors."""
    errors = json.dumps([{"message": m} for m in messages], separators=_COMPACT)
    return f'{{"recordId":{_id_json(record_id)},"data":{{}},"errors":{errors},"warnings":null}}'


class SkillAnswer(Response):
    """The ``{"values": [...]}`` body, joined from records rendered one by one."""

    media_type = "application/json"

    def __init__(self, parts: Sequence[str]) -> None:
        super().__init__(('{"values":[' + ",".join(parts) + "]}").encode())


async def embed_call(
    records: Sequence[Record], embed_model: BaseEmbedding, input_type: InputType
) -> list[str]:
    """Each record's rendered answer, in order: its vector or its errors."""
    parts: list[str | None] = [None] * len(records)
    texts: dict[int, str] = {}
    for position, record in enumerate(records):
        if record.text is None:
            parts[position] = errors_json(record.record_id, record.errors)
        else:
            texts[position] = record.text

    def sink(positions: Sequence[int], vectors: Sequence[Sequence[float]]) -> None:
        for position, vector in zip(positions, vectors, strict=True):
            parts[position] = vector_json(records[position].record_id, vector)

    embedding = SkillEmbedding(embed_model)
    if input_type == "query":
        await embedding.queries(texts, sink)
    else:
        await embedding.documents(texts, sink)
    for position, message in embedding.refused.items():
        parts[position] = errors_json(records[position].record_id, [message])
    done = [part for part in parts if part is not None]
    if len(done) != len(parts):  # cannot happen: every position is embedded, refused or raised
        raise UpstreamError(f"no vector for {len(parts) - len(done)} of the texts")
    return done


# --- the route -----------------------------------------------------------------------------------
@router.post(
    "/skills/embeddings",
    response_model=SkillResponse,
    # documentation only: the body is read and checked record by record below
    openapi_extra=json_body(SkillRequest),
)
async def skill_embeddings(
    request: Request, engine: EngineDep, input_type: InputType = "document"
) -> Response:
    """Azure AI Search's Custom Web API skill and vectorizer: each record's ``data.text``
    embedded with the server's embedder, answered as ``data.vector`` in the same order.

    ``input_type=query`` embeds the texts as questions (for the vectorizer, which sends one
    record per query). A bad record gets ``"data": {}`` and ``errors`` while the others are
    embedded; over 1,000 records is HTTP 413; the provider's rate limit is HTTP 429 with
    ``Retry-After``.
    """
    options = engine.settings.server
    try:
        body = await read_json(request, options.max_skill_body_bytes, check_strings=False)
    except PayloadTooLargeError as exc:
        raise PayloadTooLargeError(f"{exc.message}; lower the skill's batchSize") from None
    records = read_records(body, options)
    parts = await unless_disconnected(request, embed_call(records, engine.embed_model, input_type))
    if parts is None:
        return Response(status_code=499)
    return SkillAnswer(parts)
