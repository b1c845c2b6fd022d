"""OpenTelemetry tracing: a span per answer (workflow run) and per workflow step.

The server's span per HTTP request is FastAPI's own (its native OpenTelemetry support, W3C
``traceparent`` of the caller included); the workflow's spans nest under it. Tracing is off
unless an OpenTelemetry SDK tracer provider is configured, and then costs nothing: OpenTelemetry's
API hands out no-op spans.

* ``citeflow serve`` exports over OTLP (HTTP/protobuf) when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set, through FastAPI's automatic set-up; the SDK and
  the exporter come with the ``otel`` extra (``pip install 'citeflow[otel]'``). The standard
  ``OTEL_*`` variables (service name, headers, sampler) apply.
* From Python or Jupyter, set your own ``TracerProvider``: the workflow's spans go to it.

Attributes say what happened, not what the documents say: the question, the search query,
rounds, counts of passages, sources and citations. The sources' text and the answer are added
only when ``CITEFLOW_TRACE_CONTENT`` asks (debugging). Logs carry the current span's trace id
(`TraceIds`).
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi.telemetry import TelemetryConfig
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from citeflow.errors import ConfigError

tracer = trace.get_tracer("citeflow")

#: environment variables that ask for OTLP export (OpenTelemetry's own names)
OTLP_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def fastapi_telemetry() -> TelemetryConfig:
    """``FastAPI(telemetry=...)``: request spans only (citeflow's metrics are Prometheus'),
    exported over OTLP when the environment asks for it.

    Raises:
        ConfigError: OTLP export is asked for but the OpenTelemetry SDK is not installed.
    """
    export = any(os.environ.get(name, "").strip() for name in OTLP_ENDPOINTS)
    if export and not installed("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"):
        raise ConfigError(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK and OTLP exporter are "
            "not installed: pip install 'citeflow[otel]', or unset it"
        )
    return {
        "auto_configure": export,
        "metrics": False,
        "logs": False,
        "operation_spans": False,
    }


def installed(*modules: str) -> bool:
    """Whether every one of ``modules`` (dotted names too) can be imported."""
    try:
        return all(importlib.util.find_spec(m) is not None for m in modules)
    except ModuleNotFoundError:
        return False


@contextmanager
def span(name: str, **attributes: str | int | float | bool | None) -> Iterator[Span]:
    """A span named ``citeflow.<name>`` in the current context, with ``citeflow.*``
    attributes (None values are left out); an exception marks it as an error."""
    with tracer.start_as_current_span(f"citeflow.{name}") as current:
        annotate(current, **attributes)
        yield current


def annotate(current: Span, **attributes: str | int | float | bool | None) -> None:
    """Add ``citeflow.*`` attributes to ``current`` (when it records)."""
    if current.is_recording():
        current.set_attributes({f"citeflow.{k}": v for k, v in attributes.items() if v is not None})


def failed(current: Span, exc: BaseException) -> None:
    current.record_exception(exc)
    current.set_status(Status(StatusCode.ERROR, type(exc).__name__))


class TraceIds(logging.Filter):
    """Adds ``trace_id`` and ``span_id`` (hex) to records logged inside a recording span, so
    JSON logs join their traces."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.trace_id = format(context.trace_id, "032x")
            record.span_id = format(context.span_id, "016x")
        return True
