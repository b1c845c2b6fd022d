"""``citeflow serve`` as operators run it: traces exported over OTLP to a collector, metrics
scraped, logs joined to the traces. A real server process, its LLM and embedder the fake OpenAI
server, a fake OTLP/HTTP collector on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from citeflow.testing.openai_server import FakeOpenAIServer
from tests.e2e.procs import Server, free_port
from tests.server_helpers import chat_request

KEY = "live-observability-key"
CITEFLOW = [sys.executable, "-m", "citeflow.cli"]


class Collector:
    """An OTLP/HTTP trace collector: keeps every span it is sent (protobuf)."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.paths: list[str] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                collector.paths.append(self.path)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        collector.spans.extend(scope.spans)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def collector() -> Iterator[Collector]:
    found = Collector()
    yield found
    found.close()


def test_a_served_answer_is_traced_counted_and_logged(tmp_path: Path, collector: Collector) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "viaweb.txt").write_text("Yahoo bought Viaweb in 1998 for about 49 million dollars.")
    (docs / "ducks.txt").write_text("Ducks live near ponds and rivers and eat water plants.")
    port = free_port()
    with FakeOpenAIServer(lambda prompt: "Yahoo bought Viaweb in 1998 [1].") as fake:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("CITEFLOW_", "OTEL_"))},
            "CITEFLOW_DATA_DIR": str(tmp_path / "data"),
            "CITEFLOW_LLM_PROVIDER": "openai",
            "CITEFLOW_LLM_MODEL": "fake-model",
            "CITEFLOW_EMBED_PROVIDER": "openai",
            "CITEFLOW_EMBED_MODEL": "fake-embedder",
            "CITEFLOW_OPENAI_BASE_URL": fake.openai_base_url,
            "CITEFLOW_OPENAI_API_KEY": "fake-key",
            "CITEFLOW_GRADER": "none",
            "CITEFLOW_CITATION_JUDGE": "off",
            "CITEFLOW_API_KEYS": KEY,
            "CITEFLOW_HOST": "127.0.0.1",
            "CITEFLOW_PORT": str(port),
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
            "OTEL_SERVICE_NAME": "citeflow-under-test",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        ingest = subprocess.run(
            [*CITEFLOW, "ingest", "-q", "-c", "kb", str(docs)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ingest.returncode == 0, ingest.stderr
        with Server(
            "citeflow",
            [*CITEFLOW, "--log-json", "--log-level", "INFO", "serve"],
            env=env,
            cwd=tmp_path,
            log_dir=tmp_path,
        ) as server:
            url = f"http://127.0.0.1:{port}"
            server.wait_ready(f"{url}/health/ready", timeout=60)
            auth = {"Authorization": f"Bearer {KEY}"}
            answer = httpx.post(
                f"{url}/v1/chat/completions",
                json=chat_request(stream=True),
                headers={**auth, "traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01"},
                timeout=60,
            )
            assert answer.status_code == 200 and "[DONE]" in answer.text
            scraped = httpx.get(f"{url}/metrics", headers=auth, timeout=10).text
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not any(
                s.name == "citeflow.synthesize" for s in collector.spans
            ):
                time.sleep(0.2)
        log = server.log_path.read_text()

    # traces: one trace, joined to the caller's, request > answer > steps
    assert collector.paths and all(p == "/v1/traces" for p in collector.paths)
    names = {s.name for s in collector.spans}
    assert {"citeflow.answer", "citeflow.retrieve", "citeflow.cite", "citeflow.synthesize"} <= names
    caller = bytes.fromhex("ab" * 16)
    answer_span = next(s for s in collector.spans if s.name == "citeflow.answer")
    assert answer_span.trace_id == caller
    request_span = next(s for s in collector.spans if s.span_id == answer_span.parent_span_id)
    assert "/v1/chat/completions" in request_span.name
    steps = [s for s in collector.spans if s.name.startswith("citeflow.") and s is not answer_span]
    assert all(s.trace_id == caller for s in steps)
    assert all(s.parent_span_id == answer_span.span_id for s in steps)
    # metrics: the answer counted
    assert 'citeflow_answers_total{outcome="cited"} 1.0' in scraped
    # logs: the access line of the answer carries the trace id
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    access = [r for r in lines if r.get("msg", "").startswith("POST /v1/chat/completions")]
    assert access and access[-1].get("trace_id") == "ab" * 16
