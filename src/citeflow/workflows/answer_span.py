"""The ``citeflow.answer`` span around a workflow run: the steps' spans nest under it, and it
under the caller's (an HTTP request's); it ends when the run does, recording its failure."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span
from workflows.handler import WorkflowHandler

from citeflow.tracing import annotate, failed, tracer

#: the tasks that end spans, held until done: the loop keeps only weak references to tasks
_ENDING: set[asyncio.Future[None]] = set()


def run_in_answer_span(
    start: Callable[[], WorkflowHandler], *, collection: str | None, query: str | None
) -> WorkflowHandler:
    """``start()`` (which starts a run), inside a ``citeflow.answer`` span when tracing is on."""
    answer = tracer.start_span("citeflow.answer")
    if not answer.is_recording():
        return start()
    annotate(answer, collection=collection, query=query)
    attached = otel_context.attach(trace.set_span_in_context(answer))
    try:
        handler = start()
    except BaseException:
        answer.end()
        raise
    finally:
        otel_context.detach(attached)
    ending = asyncio.ensure_future(_end_when_done(handler, answer))
    _ENDING.add(ending)
    ending.add_done_callback(_ENDING.discard)
    return handler


async def _end_when_done(handler: WorkflowHandler, answer: Span) -> None:
    """End the span when the run ends (its failure, if any, recorded; the caller of the run
    still gets it)."""
    try:
        await handler
    except asyncio.CancelledError:
        annotate(answer, cancelled=True)
    except Exception as exc:
        failed(answer, exc)
    finally:
        answer.end()
