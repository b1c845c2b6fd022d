"""
title: citeflow
description: Answers from citeflow knowledge bases, with numbered citations as Open WebUI sources.
author: citeflow
version: 0.1.0
license: MIT
"""

# citeflow as an Open WebUI Pipe function (an alternative to adding citeflow as a Connection).
# It is longer than 400 lines because Open WebUI installs a function as one pasted file.
#
# Install: Open WebUI → Admin Panel → Functions → "+" (new function), paste this whole file, save,
# and switch the function on. Then open its valves (the gear icon) and set CITEFLOW_BASE_URL
# (as seen from the Open WebUI server, e.g. http://citeflow:8000/v1 in Docker Compose) and
# CITEFLOW_API_KEY (one of the server's CITEFLOW_API_KEYS; empty if the server has none).
# Each citeflow knowledge base then shows up as a model named like "citeflow kb".
#
# What it does: `pipes` lists citeflow's models (GET /v1/models); `pipe` sends the chat to
# POST /v1/chat/completions with stream=true, hands every Open WebUI event citeflow sends
# (`source` and `status`) to `__event_emitter__`, and yields the answer's text, so the [n] markers
# become clickable source chips. Title, tag and follow-up requests (`### Task:`) are sent without
# streaming and their text is returned as is. Errors (citeflow unreachable, a rejected key, an
# unknown model, a failure mid-answer) end the answer with a readable message and a final status
# line; they never raise.
#
# Needs only the standard library, httpx and pydantic (both ship with Open WebUI). One file of
# about 420 lines on purpose: Open WebUI takes a function as one pasted file.
# (This file avoids a few import phrases that Open WebUI's loader rewrites in function code.)

import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, Field

log = logging.getLogger(__name__)

EventEmitter = Callable[[dict[str, Any]], Awaitable[Any]]

#: The id of the single model `pipes` lists when citeflow cannot be asked for its models.
ERROR_MODEL_ID = "citeflow-unavailable"

#: Open WebUI sends these (title, tags, follow-ups, ...) as single user messages starting so.
TASK_PREFIX = "### Task:"

_MAX_DETAIL = 300


class CiteflowError(Exception):
    """A failure worth telling the user about; ``status`` is a short form for the status line."""

    def __init__(self, message: str, status: str) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class Pipe:
    class Valves(BaseModel):
        CITEFLOW_BASE_URL: str = Field(
            default="http://localhost:8000/v1",
            description="citeflow's OpenAI-compatible base URL, as seen from Open WebUI's server.",
        )
        CITEFLOW_API_KEY: str = Field(
            default="",
            description="One of the server's CITEFLOW_API_KEYS; empty if the server has none.",
            json_schema_extra={"input": {"type": "password"}},
        )
        TIMEOUT: float = Field(
            default=120.0,
            gt=0,
            description="Seconds to wait for citeflow (a whole non-streamed answer, or the next "
            "piece of a streamed one).",
        )
        SOURCE_LIST: bool = Field(
            default=False,
            description="Append a Markdown list of the cited sources to each answer (Open WebUI "
            "already shows them as chips).",
        )

    def __init__(self) -> None:
        self.valves = self.Valves()

    # --- models ----------------------------------------------------------------------------------
    async def pipes(self) -> list[dict[str, str]]:
        """One model per citeflow knowledge base; one explanatory entry if there are none."""
        try:
            models = await self._list_models()
        except CiteflowError as exc:
            return [{"id": ERROR_MODEL_ID, "name": f"citeflow unavailable: {exc.status}"}]
        except Exception as exc:  # never break Open WebUI's model list
            log.exception("citeflow: listing models failed")
            return [{"id": ERROR_MODEL_ID, "name": f"citeflow unavailable: {exc}"}]
        if not models:
            return [{"id": ERROR_MODEL_ID, "name": "citeflow: no knowledge bases yet"}]
        return models

    async def _list_models(self) -> list[dict[str, str]]:
        # Open WebUI asks on every model list: keep a dead server from stalling it long
        timeout = httpx.Timeout(
            min(self.valves.TIMEOUT, 10.0), connect=min(self.valves.TIMEOUT, 5.0)
        )
        async with self._client(timeout) as client:
            try:
                response = await client.get("/models")
            except httpx.HTTPError as exc:
                raise self._transport_error(exc) from None
            if response.status_code >= 400:
                raise self._http_error(response.status_code, response.text, "")
            try:
                cards = response.json()["data"]
                return [
                    {"id": str(card["id"]), "name": str(card.get("name") or card["id"])}
                    for card in cards
                ]
            except (ValueError, KeyError, TypeError):
                raise CiteflowError(
                    f"{self._base_url()}/models did not answer with a model list; check "
                    "CITEFLOW_BASE_URL (it should end with /v1).",
                    "not a citeflow server",
                ) from None

    # --- chat ------------------------------------------------------------------------------------
    async def pipe(
        self,
        body: dict[str, Any],
        __user__: dict[str, Any] | None = None,
        __event_emitter__: EventEmitter | None = None,
        __task__: str | None = None,
        __metadata__: dict[str, Any] | None = None,
    ) -> str | AsyncGenerator[str | dict[str, Any], None]:
        """The answer: an async generator of text (streamed chats), or a string.

        Open WebUI awaits ``pipe`` and then streams what it returns: text pieces, or (for a
        piece that could be mistaken for an SSE line) a ``chat.completion.chunk`` dict.
        """
        model = self.model_name(str(body.get("model") or ""))
        task = bool(__task__ or (__metadata__ or {}).get("task")) or _is_task(body)
        if model == ERROR_MODEL_ID:
            return await self._explain_unavailable()
        if task or not body.get("stream", False):
            # a task's status line would land on the chat message: no events for tasks
            return await self._complete(body, model, None if task else __event_emitter__)
        return self._stream(body, model, __event_emitter__)

    @staticmethod
    def model_name(pipe_model: str) -> str:
        """citeflow's model id: Open WebUI names a pipe's models ``<function_id>.<model>``."""
        return pipe_model.split(".", 1)[1] if "." in pipe_model else pipe_model

    def _payload(self, body: dict[str, Any], model: str, *, stream: bool) -> dict[str, Any]:
        return {
            "model": model,
            "messages": body.get("messages") or [],
            "stream": stream,
            "citeflow": {"source_list": self.valves.SOURCE_LIST},
        }

    async def _complete(
        self, body: dict[str, Any], model: str, emitter: EventEmitter | None
    ) -> str:
        """One non-streamed request; the answer's text, or a message saying what went wrong."""
        try:
            async with self._client() as client:
                response = await client.post(
                    "/chat/completions", json=self._payload(body, model, stream=False)
                )
                if response.status_code >= 400:
                    raise self._http_error(response.status_code, response.text, model)
                try:
                    answer = response.json()
                    text = answer["choices"][0]["message"]["content"] or ""
                except (ValueError, KeyError, IndexError, TypeError):
                    raise CiteflowError(
                        "citeflow's answer could not be read (not a chat completion).",
                        "unreadable answer",
                    ) from None
            for source in answer.get("sources") or []:
                await _emit(emitter, {"type": "source", "data": source})
            return str(text)
        except Exception as exc:
            error = self._failure(exc, "request")
            await _emit(emitter, _status(error.status, done=True))
            return _error_text(error.message)

    async def _stream(
        self, body: dict[str, Any], model: str, emitter: EventEmitter | None
    ) -> AsyncGenerator[str | dict[str, Any], None]:
        """Stream citeflow's answer: events to ``emitter``, text pieces yielded."""
        wrote = False
        try:
            async with (
                self._client() as client,
                client.stream(
                    "POST", "/chat/completions", json=self._payload(body, model, stream=True)
                ) as response,
            ):
                if response.status_code >= 400:
                    detail = (await response.aread()).decode("utf-8", "replace")
                    raise self._http_error(response.status_code, detail, model)
                async for text in answer_text(response.aiter_lines(), emitter):
                    wrote = wrote or bool(text)
                    yield _piece(text, body)
        except Exception as exc:
            error = self._failure(exc, "streaming")
            await _emit(emitter, _status(error.status, done=True))
            yield _piece(_error_text(error.message, after_text=wrote), body)

    async def _explain_unavailable(self) -> str:
        try:
            models = await self._list_models()
        except Exception as exc:
            return _error_text(self._failure(exc, "listing models").message)
        if not models:
            return (
                "citeflow is reachable but has no knowledge bases yet. Add documents "
                "(`citeflow ingest PATH --collection NAME`), then reload the model list."
            )
        names = ", ".join(m["id"] for m in models)
        return f"citeflow is reachable now: reload the model list and pick one of: {names}."

    # --- HTTP ------------------------------------------------------------------------------------
    def _base_url(self) -> str:
        base = self.valves.CITEFLOW_BASE_URL.strip().rstrip("/")
        parts = urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise CiteflowError(
                f"CITEFLOW_BASE_URL {base!r} is not an http(s) URL; set it in this function's "
                "valves, e.g. http://localhost:8000/v1.",
                "citeflow: bad CITEFLOW_BASE_URL",
            )
        if parts.path in ("", "/"):
            base += "/v1"  # a bare http://host:port means citeflow's /v1
        return base

    def _client(self, timeout: httpx.Timeout | None = None) -> httpx.AsyncClient:
        headers = {"Accept": "application/json, text/event-stream"}
        key = self.valves.CITEFLOW_API_KEY.strip()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        if timeout is None:
            timeout = httpx.Timeout(self.valves.TIMEOUT, connect=min(self.valves.TIMEOUT, 10.0))
        return httpx.AsyncClient(base_url=self._base_url(), headers=headers, timeout=timeout)

    def _failure(self, exc: Exception, doing: str) -> CiteflowError:
        """What to tell the user about ``exc``; an unexpected one is logged with its traceback."""
        if isinstance(exc, CiteflowError):
            return exc
        if isinstance(exc, httpx.HTTPError):
            return self._transport_error(exc)
        log.exception("citeflow: %s failed", doing)
        return CiteflowError(f"citeflow failed unexpectedly: {exc}", "citeflow failed")

    def _transport_error(self, exc: httpx.HTTPError) -> CiteflowError:
        base = self._base_url()
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            return CiteflowError(
                f"citeflow is not reachable at {base} ({exc or type(exc).__name__}). Check that "
                "`citeflow serve` is running and that CITEFLOW_BASE_URL in this function's "
                "valves is right, as seen from the Open WebUI server.",
                "citeflow not reachable",
            )
        if isinstance(exc, httpx.TimeoutException):
            return CiteflowError(
                f"citeflow did not answer within {self.valves.TIMEOUT:g} s (the TIMEOUT valve).",
                "citeflow timed out",
            )
        return CiteflowError(
            f"the connection to citeflow at {base} failed: {exc or type(exc).__name__}.",
            "citeflow connection failed",
        )

    def _http_error(self, status: int, text: str, model: str) -> CiteflowError:
        detail = _error_message(text) or text.strip()[:_MAX_DETAIL] or "no details"
        if status == 401:
            hint = (
                "set CITEFLOW_API_KEY in this function's valves to one of the server's "
                "CITEFLOW_API_KEYS"
                if not self.valves.CITEFLOW_API_KEY.strip()
                else "CITEFLOW_API_KEY in this function's valves is not one of the server's "
                "CITEFLOW_API_KEYS"
            )
            return CiteflowError(
                f"citeflow rejected the API key ({detail}): {hint}.", "citeflow: invalid API key"
            )
        if status == 404 and _error_body(text).get("code") == "model_not_found":
            return CiteflowError(
                f"citeflow has no knowledge base for the model {model!r} ({detail}). Reload the "
                "model list.",
                "citeflow: unknown model",
            )
        if status == 404:
            return CiteflowError(
                f"citeflow answered 404 Not Found at {self._base_url()} ({detail}); check "
                "CITEFLOW_BASE_URL (it should end with /v1).",
                "citeflow: not found",
            )
        if status < 500:
            return CiteflowError(
                f"citeflow refused the request (HTTP {status}): {detail}", f"citeflow: {detail}"
            )
        return CiteflowError(
            f"citeflow failed (HTTP {status}): {detail}", f"citeflow failed (HTTP {status})"
        )


async def answer_text(
    lines: AsyncIterator[str], emitter: EventEmitter | None
) -> AsyncGenerator[str, None]:
    """citeflow's SSE answer as Open WebUI wants it: the text pieces of the stream's ``lines``
    yielded, each Open WebUI event (``source``, ``status``) handed to ``emitter`` as it is.

    Raises:
        CiteflowError: an error line in the stream, or a stream cut off before ``[DONE]``.
    """
    async for line in lines:
        if not line.startswith("data:"):
            continue  # blank separators and ": keep-alive" comments
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            return
        chunk = _parse(data)
        if "error" in chunk:
            message = _error_message(chunk) or "unknown error"
            raise CiteflowError(f"citeflow stopped with an error: {message}", message)
        event = chunk.get("event")
        if isinstance(event, dict):
            await _emit(emitter, event)
        for choice in chunk.get("choices") or []:
            text = (choice.get("delta") or {}).get("content")
            if text:
                yield str(text)
    raise CiteflowError(
        "the connection to citeflow ended before the answer was complete.",
        "citeflow: answer cut off",
    )


def _parse(data: str) -> dict[str, Any]:
    """A chunk's JSON object; an empty one for a line that is not one."""
    try:
        chunk = json.loads(data)
    except ValueError:
        log.warning("citeflow: unreadable stream line %r", data[:200])
        return {}
    return chunk if isinstance(chunk, dict) else {}


# --- helpers -------------------------------------------------------------------------------------
def _is_task(body: dict[str, Any]) -> bool:
    """Whether the request is one of Open WebUI's own ``### Task:`` requests."""
    messages = [
        m
        for m in body.get("messages") or []
        if isinstance(m, dict) and m.get("role") in ("user", "assistant")
    ]
    if len(messages) != 1:
        return False
    content = messages[0].get("content")
    if isinstance(content, list):
        content = "\n".join(
            str(p.get("text") or "") for p in content if isinstance(p, dict) and p.get("text")
        )
    return isinstance(content, str) and content.strip().startswith(TASK_PREFIX)


def _status(description: str, *, done: bool) -> dict[str, Any]:
    return {"type": "status", "data": {"description": description, "done": done}}


async def _emit(emitter: EventEmitter | None, event: dict[str, Any]) -> None:
    """Send ``event`` to Open WebUI; a failing emitter must not cost the user the answer."""
    if emitter is None:
        return
    try:
        await emitter(event)
    except Exception:
        log.exception("citeflow: the event emitter failed")


def _error_text(message: str, after_text: bool = False) -> str:
    return ("\n\n" if after_text else "") + f"**citeflow error:** {message}"


def _piece(text: str, body: dict[str, Any]) -> str | dict[str, Any]:
    """``text`` as Open WebUI should get it: a string, unless it would be read as an SSE line."""
    if not text.startswith("data:"):
        return text
    return {
        "object": "chat.completion.chunk",
        "model": str(body.get("model") or ""),
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }


def _error_body(payload: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(payload, str):
        try:
            payload = json.loads(payload)
        except ValueError:
            return {}
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        return error
    if isinstance(error, str):
        return {"message": error}
    if isinstance(payload, dict) and isinstance(payload.get("detail"), str):
        return {"message": payload["detail"]}
    return {}


def _error_message(payload: str | dict[str, Any]) -> str:
    """The ``message`` of an OpenAI error body (``{"error": {"message": ...}}``), else ""."""
    message = _error_body(payload).get("message")
    return str(message)[:_MAX_DETAIL] if message else ""
