"""The endpoints: models, chat completions (streaming and not), health.

| route | auth | what |
| --- | --- | --- |
| ``GET /health`` | no | liveness |
| ``GET /health/ready`` | no | the store answers, the providers are loaded (else 503); status only |
| ``GET /v1/models``, ``GET /v1/models/{id}`` | yes | one model per knowledge base |
| ``POST /v1/chat/completions`` | yes | a cited answer; SSE when ``stream`` is true |
| ``POST /search``, ``POST /v1/search`` | yes | graded chunks per query (`citeflow.api.search`) |

Chat completions are admitted by `citeflow.api.limits.ChatLimits` (HTTP 429 with
``Retry-After`` past the limits); a stream holds its slot until it ends.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Awaitable
from typing import Any, TypeVar

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from citeflow.api import sse
from citeflow.api.body import parse_json_object, read_within
from citeflow.api.chat_stream import ChatStream, plain_chunks, plain_completion
from citeflow.api.deps import EngineDep, LimitsDep, LinksDep, bearer_token, require_api_key
from citeflow.api.docs import json_body
from citeflow.api.engine import Engine
from citeflow.api.errors import NotReadyError, PayloadTooLargeError
from citeflow.api.limits import Slot, client_id
from citeflow.api.links import DocumentLinks
from citeflow.api.metrics import Metrics
from citeflow.api.schemas import (
    ChatCompletion,
    ChatCompletionRequest,
    Conversation,
    ModelCard,
    ModelList,
    error_responses,
)
from citeflow.api.users import forwarded_user
from citeflow.api.webui_tasks import answer_task
from citeflow.settings import ServerSettings

log = logging.getLogger("citeflow.server")

T = TypeVar("T")

#: Request bodies up to this size are parsed on the event loop; larger ones in a worker thread.
PARSE_INLINE_BYTES = 256 * 1024

ERRORS = error_responses(400, 401, 404, 413, 429, 500, 502, 503)

health = APIRouter(tags=["health"])
api = APIRouter(prefix="/v1", dependencies=[Depends(require_api_key)], responses=ERRORS)


# --- health --------------------------------------------------------------------------------------
@health.get("/health")
async def liveness() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@health.get("/health/ready", response_model=None)
async def readiness(engine: EngineDep) -> dict[str, str] | JSONResponse:
    """The store answers and the providers are loaded; 503 otherwise.

    Open to anyone, so it says nothing but its status (no paths, no versions); why the server
    is not ready goes to the log.
    """
    try:
        await engine.readiness()
    except NotReadyError as exc:
        log.warning("not ready: %s", exc.message)
        return JSONResponse({"status": "unavailable"}, status_code=503)
    return {"status": "ready"}


# --- models --------------------------------------------------------------------------------------
def _card(engine: Engine, collection: str) -> ModelCard:
    return ModelCard(
        id=engine.model_id(collection), created=engine.started, name=f"citeflow {collection}"
    )


@api.get("/models", tags=["models"])
async def list_models(engine: EngineDep) -> ModelList:
    """One model per knowledge base, ``citeflow-<collection>``."""
    return ModelList(data=[_card(engine, c) for c in await engine.collections()])


@api.get("/models/{model}", tags=["models"])
async def get_model(model: str, engine: EngineDep) -> ModelCard:
    """One model; 404 if there is no such knowledge base."""
    return _card(engine, await engine.resolve(model))


# --- chat ----------------------------------------------------------------------------------------
async def read_json(request: Request, limit: int, *, check_strings: bool = True) -> dict[str, Any]:
    """The request body as a JSON object, read up to ``limit`` bytes (``check_strings``: see
    `parse_json_object`).

    Raises:
        PayloadTooLargeError: the body is larger than ``limit`` (413).
        BadRequestError: the body is not a JSON object, is nested too deep or holds a lone
            surrogate (400, `citeflow.api.body`).
    """
    too_large = PayloadTooLargeError(f"the request body is over the limit of {limit} bytes")
    body = b"".join([piece async for piece in read_within(request, limit, too_large)])
    if len(body) > PARSE_INLINE_BYTES:  # parsing and checking take milliseconds: off the loop
        return await asyncio.to_thread(parse_json_object, body, check_strings=check_strings)
    return parse_json_object(body, check_strings=check_strings)


def wants_source_list(
    request: Request, chat: ChatCompletionRequest, options: ServerSettings
) -> bool:
    """The request field, else the ``X-Citeflow-Source-List`` header, else the server default."""
    if chat.citeflow is not None and chat.citeflow.source_list is not None:
        return chat.citeflow.source_list
    header = request.headers.get("x-citeflow-source-list")
    if header is not None:
        return header.strip().lower() in ("1", "true", "yes", "on")
    return options.source_list


def wants_annotations(request: Request, options: ServerSettings) -> bool:
    """``url_citation`` annotations: always, never, or (auto) for a browser's request, which
    carries an ``Origin`` header (an Open WebUI Direct Connection: Open WebUI ignores its source
    events but reads annotations)."""
    if options.annotations == "auto":
        return "origin" in request.headers
    return options.annotations == "on"


async def _disconnected(request: Request) -> None:
    """Return when the client goes away (the body has been read already)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T | None:
    """``work``'s result, or None (``work`` cancelled) if the client disconnects first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        log.info("client disconnected before the answer", extra={"path": request.url.path})
        return None
    finally:  # the work cancelled, unless done
        watcher.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def _plain_sse(text: str, model: str, prompt_text: str) -> AsyncGenerator[str, None]:
    yield "".join(sse.sse_lines(plain_chunks(text, model=model, prompt_text=prompt_text)))
    yield sse.DONE


@api.post(
    "/chat/completions",
    tags=["chat"],
    response_model=ChatCompletion,
    responses={200: {"content": {"text/event-stream": {}}}},
    # documentation only: the body is read after the limits, by `read_json`
    openapi_extra=json_body(ChatCompletionRequest),
)
async def chat_completions(
    request: Request, engine: EngineDep, limits: LimitsDep, links: LinksDep
) -> Response:
    """A cited answer from the knowledge base the model names (OpenAI chat API).

    The last user message is the question, earlier turns are history; ``tools`` and sampling
    parameters are accepted and ignored. With ``stream``, an SSE stream of chunks with Open
    WebUI ``status`` and ``source`` events; without, a ``chat.completion`` with ``sources``.
    Open WebUI's ``### Task:`` requests are answered by the LLM alone. Past the server's limits,
    HTTP 429 with ``Retry-After``.
    """
    address = request.client.host if request.client else None
    secret = engine.settings.server.openwebui_jwt_secret
    user = forwarded_user(request, secret.get_secret_value() if secret else None)
    if user is not None:
        request.state.user = user.id  # the access log's ``user``
    request.app.state.metrics.chat_by(
        user.role if user else None, signed=bool(user and user.signed)
    )
    who = client_id(bearer_token(request), address, user=user.id if user else None)
    slot = limits.admit(who)
    response: Response | None = None
    try:
        response = await _chat(request, engine, links, slot)
        return response
    finally:
        if not isinstance(response, sse.EventStreamResponse):
            slot.release()


async def _chat(request: Request, engine: Engine, links: DocumentLinks, slot: Slot) -> Response:
    options = engine.settings.server
    chat = ChatCompletionRequest.model_validate(await read_json(request, options.max_body_bytes))
    conversation = Conversation.from_messages(chat.messages, max_chars=options.max_message_chars)
    if conversation.task:
        await engine.resolve(chat.model)
        text = await answer_task(engine.llm, conversation.task_messages)
        if chat.stream:
            return sse.EventStreamResponse(
                _plain_sse(text, chat.model, conversation.prompt_text), release=slot.release
            )
        return sse.CompletionResponse(
            plain_completion(text, model=chat.model, prompt_text=conversation.prompt_text)
        )
    collection = await engine.open_collection(chat.model)
    stream = ChatStream(
        model=chat.model,
        collection=collection,
        link=lambda collection, doc_id: links.url(str(request.base_url), collection, doc_id),
        source_list=wants_source_list(request, chat, options),
        include_usage=bool(chat.stream_options and chat.stream_options.include_usage),
        prompt_text=conversation.prompt_text,
        annotations=wants_annotations(request, options),
    )
    metrics: Metrics = request.app.state.metrics
    if chat.stream:
        events = metrics.observe_events(
            engine.events(collection, conversation.query, conversation.history),
            lambda result: stream.usage(result).model_dump(exclude_unset=True),
        )
        return sse.EventStreamResponse(
            sse.sse_stream(events, stream, keepalive=options.keepalive_seconds),
            release=slot.release,
        )
    started = time.perf_counter()
    try:
        result = await unless_disconnected(
            request, engine.answer(collection, conversation.query, conversation.history)
        )
    except Exception:
        metrics.failed()
        raise
    if result is None:
        metrics.failed(cancelled=True)
        return Response(status_code=499)
    completion = stream.completion(result)
    metrics.answered(result, seconds=time.perf_counter() - started, usage=completion["usage"])
    return sse.CompletionResponse(completion)
