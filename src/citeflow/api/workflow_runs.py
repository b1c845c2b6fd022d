"""A workflow run as the server drives it: its events streamed or its result awaited, and the
run cancelled when the caller goes away (a client disconnect, a cancelled request task)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable
from typing import Any

import anyio
from workflows.events import Event, StopEvent
from workflows.handler import WorkflowHandler

from citeflow.result import CitedResponse

log = logging.getLogger("citeflow.server")


async def stream_run(
    start: Callable[[], WorkflowHandler], cancel_timeout: float
) -> AsyncGenerator[Event | CitedResponse, None]:
    """The run ``start()`` begins (on first iteration): its stream events, then its result.

    Closing the generator early cancels the run. A failure of the run is raised after the events
    it wrote.
    """
    handler = start()
    finished = False
    try:
        async for event in handler.stream_events():
            if not isinstance(event, StopEvent):
                yield event
        result = await _result(handler)
        finished = True
        yield result
    finally:
        if not finished:
            await _stop(handler, cancel_timeout)


async def await_run(handler: WorkflowHandler, cancel_timeout: float) -> CitedResponse:
    """The run's result; cancelling the caller cancels the run."""
    try:
        return await _result(handler)
    except BaseException:
        await _stop(handler, cancel_timeout)
        raise


async def _stop(handler: WorkflowHandler, cancel_timeout: float) -> None:
    """Cancel an unfinished run, even from a task that is being cancelled itself."""
    if handler.is_done():
        return
    with anyio.CancelScope(shield=True):
        await handler.cancel_run(timeout=cancel_timeout)
    log.info("run cancelled", extra={"run_id": handler.run_id})


async def _result(handler: WorkflowHandler) -> CitedResponse:
    """The run's result, awaited so that cancelling the caller leaves the handler intact.

    Cancelling a task that awaits the handler directly cancels the handler's own result task,
    after which ``cancel_run`` no longer stops the run; the shield keeps that task alive.
    """

    async def wait() -> CitedResponse:
        result: CitedResponse = await handler
        return result

    waiter = asyncio.ensure_future(wait())
    try:
        return await asyncio.shield(waiter)
    except asyncio.CancelledError:
        waiter.add_done_callback(_retrieve)
        raise


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a future's outcome as seen (no "exception was never retrieved" warning)."""
    if not future.cancelled():
        future.exception()
