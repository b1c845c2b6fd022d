"""Prometheus metrics: what the server did, at ``GET /metrics`` (the bearer key as the API).

One `Metrics` per app, on its own registry (so two apps in one process, as in the tests, count
apart). What is recorded, and where:

* HTTP requests by route, method, status and outcome, and their duration: `Metrics.requested`,
  from `citeflow.server.RequestLog`;
* answers (`Metrics.answered`, from `observe_events` for streams and the chat route otherwise):
  outcome, whole-answer time, time to the first token of the answer, each workflow stage's time
  (the run's ``timings``: rewrite, embed, retrieve, grade, reformulate, cite, synthesize, judge
  and llm, the time spent waiting for the LLM), retrieval rounds, citations kept, moved, added
  and removed, unsupported sentences, the LLM judge's verdicts, tokens in and out (the estimate
  the answer's ``usage`` reports);
* chat completions by the forwarded Open WebUI user's role (`citeflow.api.users`; the user
  never); streams in flight; HTTP 429s by reason (`citeflow.api.errors`); ingestion through the API,
  documents by result and chunks (`citeflow.api.documents`).

**Cardinality guard.** No label holds user text, a key, a collection or a document name: the
route label is the route's template (``/v1/collections/{collection}/documents``), or
``unmatched``; the method is one of the HTTP methods, or ``OTHER``; every other label takes one of
a fixed set of values, listed here.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterable, Callable
from functools import partial
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from starlette.types import Scope

from citeflow.api.deps import require_api_key
from citeflow.api.errors import METHODS
from citeflow.citations.answer import citation_actions
from citeflow.errors import UpstreamRateLimitError
from citeflow.events import AnswerDeltaEvent
from citeflow.result import CitedResponse

#: the workflow stages whose time is recorded (the keys of `CitedResponse.timings`)
STAGES = (
    "rewrite",
    "embed",
    "retrieve",
    "grade",
    "reformulate",
    "cite",
    "synthesize",
    "judge",
    "llm",
)
#: the LLM judge's verdict on one citation (`citeflow.citations.verify.JudgeVerifier`)
JUDGE_VERDICTS = ("supported", "unsupported", "failed", "timed_out")
#: how an answer ended
ANSWER_OUTCOMES = ("cited", "uncited", "not_covered", "failed", "cancelled")
#: why a request got HTTP 429
RATE_LIMIT_REASONS = ("in_progress", "per_minute", "failed_keys", "upstream")
#: Open WebUI's user roles (`citeflow.api.users`); any other is counted as ``other``
USER_ROLES = ("admin", "user", "pending", "other", "none")
#: what ingestion through the API did with a document
INGEST_RESULTS = ("added", "replaced", "unchanged", "failed")

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)
STAGE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)


class Metrics:
    """The server's metrics on one registry; ``exposition()`` is what ``/metrics`` serves."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        counter = partial(Counter, registry=self.registry)
        histogram = partial(Histogram, registry=self.registry)
        self.requests = counter(
            "citeflow_http_requests",
            "HTTP requests by route template, method, status and outcome",
            ("route", "method", "status", "outcome"),
        )
        self.request_seconds = histogram(
            "citeflow_http_request_duration_seconds",
            "Time to the end of each HTTP response (a stream: to its last chunk)",
            ("route",),
            buckets=LATENCY_BUCKETS,
        )
        self.answers = counter("citeflow_answers", "Answers by outcome", ("outcome",))
        self.answer_seconds = histogram(
            "citeflow_answer_duration_seconds",
            "Whole-answer time, from the question to the last word",
            buckets=LATENCY_BUCKETS,
        )
        self.first_token_seconds = histogram(
            "citeflow_time_to_first_token_seconds",
            "Time from the question to the answer's first text (streams)",
            buckets=LATENCY_BUCKETS,
        )
        self.stage_seconds = histogram(
            "citeflow_stage_duration_seconds",
            "Time per workflow stage per answer (llm: waiting for the LLM, within the others)",
            ("stage",),
            buckets=STAGE_BUCKETS,
        )
        self.rounds = histogram(
            "citeflow_retrieval_rounds",
            "Retrieval rounds per answer (1: no retry)",
            buckets=(1, 2, 3, 4, 5),
        )
        self.retries = counter(
            "citeflow_retrieval_retries", "Retrieval retries with a reworded query"
        )
        self.citations = counter(
            "citeflow_citations",
            "Citations in answers: the model's kept, moved to a supporting source, added where "
            "the model cited none, removed because no source supports the sentence",
            ("action",),
        )
        self.unsupported = counter(
            "citeflow_unsupported_sentences",
            "Answer sentences that no source supports",
        )
        self.judge_verdicts = counter(
            "citeflow_judge_verdicts",
            "The LLM judge's verdicts on citations (when CITEFLOW_CITATION_JUDGE checks them)",
            ("verdict",),
        )
        self.tokens = counter(
            "citeflow_llm_tokens",
            "Tokens in (question and sources read) and out (answer), as the answer's usage "
            "estimates them",
            ("direction",),
        )
        self.user_chats = counter(
            "citeflow_user_chats",
            "Chat completions by the forwarded Open WebUI user's role (none: no user forwarded) "
            "and whether Open WebUI signed it",
            ("role", "signed"),
        )
        self.streams = Gauge(
            "citeflow_streams_in_flight", "Answer streams being sent", registry=self.registry
        )
        self.rate_limited = counter(
            "citeflow_rate_limited", "HTTP 429 answers by reason", ("reason",)
        )
        self.ingested_documents = counter(
            "citeflow_ingested_documents",
            "Documents uploaded through the API, by result",
            ("result",),
        )
        self.ingested_chunks = counter(
            "citeflow_ingested_chunks", "Chunks written by uploads through the API"
        )
        for metric, values in (
            (self.answers, ANSWER_OUTCOMES),
            (self.rate_limited, RATE_LIMIT_REASONS),
            (self.ingested_documents, INGEST_RESULTS),
            (self.citations, ("kept", "moved", "added", "removed")),
            (self.stage_seconds, STAGES),
            (self.judge_verdicts, JUDGE_VERDICTS),
        ):
            for label in values:  # every series exists from the start, at zero
                metric.labels(label)

    def exposition(self) -> tuple[bytes, str]:
        """The text exposition and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    # --- answers -----------------------------------------------------------------------------
    def answered(
        self,
        result: CitedResponse,
        *,
        seconds: float,
        usage: dict[str, int] | None = None,
    ) -> None:
        """Record one finished answer."""
        outcome = "cited" if result.cited else "uncited"
        self.answers.labels(outcome if result.source_nodes else "not_covered").inc()
        self.answer_seconds.observe(seconds)
        for stage, spent in result.timings.items():
            if stage in STAGES:
                self.stage_seconds.labels(stage).observe(spent)
        self.rounds.observe(result.rounds)
        if result.rounds > 1:
            self.retries.inc(result.rounds - 1)
        for action, count in citation_actions(result.citations, result.raw_response).items():
            self.citations.labels(action).inc(count)  # every action's series exists already
        self.unsupported.inc(len(result.unsupported))
        for verdict, count in result.judge_verdicts.items():
            if verdict in JUDGE_VERDICTS and count:
                self.judge_verdicts.labels(verdict).inc(count)
        if usage:
            self.tokens.labels("in").inc(usage.get("prompt_tokens", 0))
            self.tokens.labels("out").inc(usage.get("completion_tokens", 0))

    def failed(self, *, cancelled: bool = False) -> None:
        """Record an answer that ended without a result."""
        self.answers.labels("cancelled" if cancelled else "failed").inc()

    async def observe_events(
        self,
        events: AsyncIterable[Any],
        usage: Callable[[CitedResponse], dict[str, int]],
    ) -> AsyncGenerator[Any, None]:
        """Pass a run's stream events through, recording the stream in flight, its first
        token, and the answer at its end (or its failure or cancellation)."""
        started = time.perf_counter()
        first = True
        finished = False
        self.streams.inc()
        try:
            async for item in events:
                if first and isinstance(item, AnswerDeltaEvent):
                    first = False
                    self.first_token_seconds.observe(time.perf_counter() - started)
                if isinstance(item, CitedResponse):
                    finished = True
                    self.answered(item, seconds=time.perf_counter() - started, usage=usage(item))
                yield item
        except Exception as exc:
            if isinstance(exc, UpstreamRateLimitError):  # told in the stream, not as HTTP 429
                self.limited("upstream")
            self.failed()
            finished = True
            raise
        finally:
            self.streams.dec()
            if not finished:
                self.failed(cancelled=True)

    # --- the rest ----------------------------------------------------------------------------
    def chat_by(self, role: str | None, *, signed: bool = False) -> None:
        """Count a chat completion by its forwarded user's role (never the user)."""
        label = "none" if role is None else (role if role in USER_ROLES else "other")
        self.user_chats.labels(label, "yes" if signed else "no").inc()

    def requested(self, scope: Scope, status: int, seconds: float) -> None:
        """Count one HTTP request by route template, method, status and outcome, and its time
        to the end of its response (`citeflow.server.RequestLog`)."""
        route = getattr(scope.get("route"), "path", None) or "unmatched"
        method = scope["method"] if scope["method"] in METHODS else "OTHER"
        outcome = (
            "rate_limited"
            if status == 429
            else "ok"
            if status < 400
            else "client_error"
            if status < 500
            else "server_error"
        )
        self.requests.labels(route, method, str(status), outcome).inc()
        self.request_seconds.labels(route).observe(seconds)

    def limited(self, reason: str) -> None:
        self.rate_limited.labels(reason if reason in RATE_LIMIT_REASONS else "upstream").inc()

    def ingested(self, counts: dict[str, int], chunks: int) -> None:
        for result, count in counts.items():
            if result in INGEST_RESULTS and count:
                self.ingested_documents.labels(result).inc(count)
        self.ingested_chunks.inc(chunks)


router = APIRouter(tags=["health"], dependencies=[Depends(require_api_key)])


@router.get("/metrics", include_in_schema=False)
async def metrics_endpoint(request: Request) -> Response:
    """The Prometheus text exposition (``CITEFLOW_METRICS=false``: not served)."""
    metrics: Metrics = request.app.state.metrics
    body, content_type = metrics.exposition()
    return Response(body, media_type=content_type)
