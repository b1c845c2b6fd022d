"""OpenTelemetry spans per request and per workflow step, with OpenTelemetry's in-memory
exporter; logs carry the trace id; OTLP export asked for without the SDK is one clear line."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from citeflow import tracing
from citeflow.errors import ConfigError
from citeflow.knowledge_base import KnowledgeBase
from citeflow.logs import JsonFormatter
from citeflow.testing.llm import ScriptedLLM
from tests.server_helpers import asgi_client, chat_request, make_engine, parse_sse, wait_until

ANSWER = "Yahoo bought Viaweb in 1998 [1]. Ducks live near ponds [2]."
EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans finished during the test. OpenTelemetry's global tracer provider can be set
    once per process: the first test sets it; each test starts with an empty exporter."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


def by_name(finished: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in finished:
        found.setdefault(span.name, []).append(span)
    return found


async def test_a_streamed_answer_is_one_trace_request_answer_steps(
    kb: KnowledgeBase, spans: InMemorySpanExporter
) -> None:
    engine = make_engine(kb, ScriptedLLM([ANSWER]))
    question = "Who bought Viaweb, and where do ducks live?"
    async with asgi_client(engine) as client:
        response = await client.post(
            "/v1/chat/completions", json=chat_request(question, stream=True)
        )
        assert parse_sse(response.text)[-1] == "[DONE]"
    found = by_name(spans.get_finished_spans())
    request = next(s for name, group in found.items() for s in group if "chat/completions" in name)
    answer = found["citeflow.answer"][0]
    assert answer.parent is not None and answer.parent.span_id == request.context.span_id
    for step in ("citeflow.retrieve", "citeflow.grade", "citeflow.cite", "citeflow.synthesize"):
        (span,) = found[step]
        assert span.context.trace_id == request.context.trace_id, step
        assert span.parent is not None and span.parent.span_id == answer.context.span_id, step
    attributes = {name: dict(group[0].attributes or {}) for name, group in found.items()}
    assert attributes["citeflow.answer"]["citeflow.query"] == question
    assert attributes["citeflow.retrieve"]["citeflow.round"] == 1
    assert attributes["citeflow.retrieve"]["citeflow.passages"] >= 2
    assert attributes["citeflow.cite"]["citeflow.sources"] == 2
    assert attributes["citeflow.synthesize"]["citeflow.cited"] == 2
    synthesize = attributes["citeflow.synthesize"]
    origins = ("kept", "moved", "added")
    assert sum(synthesize[f"citeflow.citations.{o}"] for o in origins) == 2  # type: ignore[misc]
    assert synthesize["citeflow.citations.removed"] == 0
    # no document text unless asked: neither the sources nor the answer
    everything = json.dumps([dict(s.attributes or {}) for s in spans.get_finished_spans()])
    assert "Yahoo" not in everything and "ponds" not in everything


async def test_document_text_only_when_a_debug_setting_asks(
    kb: KnowledgeBase, spans: InMemorySpanExporter
) -> None:
    kb.settings.tracing.content = True
    engine = make_engine(kb, ScriptedLLM([ANSWER]))
    async with asgi_client(engine) as client:
        assert (await client.post("/v1/chat/completions", json=chat_request())).is_success
    (synthesize,) = by_name(spans.get_finished_spans())["citeflow.synthesize"]
    attributes = dict(synthesize.attributes or {})
    assert "Yahoo bought Viaweb" in str(attributes["citeflow.answer"])
    assert "Viaweb" in str(attributes["citeflow.source.1"])


async def test_a_failed_run_marks_its_span(kb: KnowledgeBase, spans: InMemorySpanExporter) -> None:
    from citeflow.errors import EmptyQueryError

    workflow = kb.workflow(ScriptedLLM([ANSWER]))
    with pytest.raises(EmptyQueryError):
        await workflow.run(query="   ")
    # the span ends in a task of its own, just after the run
    await wait_until(lambda: bool(spans.get_finished_spans()), within=0.5)
    (answer,) = by_name(spans.get_finished_spans())["citeflow.answer"]
    assert answer.status.status_code == trace.StatusCode.ERROR
    assert answer.events and answer.events[0].name == "exception"


async def test_logs_carry_the_trace_id(spans: InMemorySpanExporter) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(tracing.TraceIds())
    log = logging.getLogger("citeflow.test-tracing")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        with tracing.span("probe") as span:
            log.info("inside")
        log.info("outside")
    finally:
        log.removeHandler(handler)
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert inside["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert "trace_id" not in outside


def test_otlp_asked_for_without_the_sdk_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert tracing.fastapi_telemetry()["auto_configure"] is True
    monkeypatch.setattr(tracing, "installed", lambda *modules: False)
    with pytest.raises(ConfigError, match=r"pip install 'citeflow\[otel\]'"):
        tracing.fastapi_telemetry()
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
    assert tracing.fastapi_telemetry()["auto_configure"] is False
