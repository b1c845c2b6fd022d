"""``GET /metrics``: scraped and parsed after real requests through the app."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from citeflow.api.engine import Engine
from citeflow.api.metrics import Metrics
from citeflow.citations.answer import citation_actions
from citeflow.citations.repair import Citation
from citeflow.knowledge_base import KnowledgeBase
from citeflow.result import CitedResponse
from citeflow.testing.llm import ScriptedLLM
from tests.server_helpers import asgi_client, assert_needs_key, chat_request, make_engine, parse_sse

ANSWER = "Yahoo bought Viaweb in 1998 [1]. Ducks live near ponds [2]."
KEY = "a-long-secret-key"
GOOD = {"Authorization": f"Bearer {KEY}"}
#: the samples of an exposition: (name, sorted labels) -> value
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """Every sample of an exposition: (name, sorted labels) -> value."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def keyed_engine(kb: KnowledgeBase, **server: object) -> Engine:
    """An engine over the test knowledge base that takes the API key `KEY`."""
    return make_engine(kb, ScriptedLLM([ANSWER]), keys=[KEY], **server)


async def test_answers_streams_and_requests_are_counted(kb: KnowledgeBase) -> None:
    engine = make_engine(kb, ScriptedLLM([ANSWER]))
    async with asgi_client(engine) as client:
        plain = await client.post("/v1/chat/completions", json=chat_request())
        assert plain.status_code == 200
        stream = await client.post("/v1/chat/completions", json=chat_request(stream=True))
        assert parse_sse(stream.text)[-1] == "[DONE]"
        assert (await client.get("/v1/models/citeflow-nothing")).status_code == 404
        scraped = await client.get("/metrics")
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")
    found = samples(scraped.text)
    chat = {"route": "/v1/chat/completions", "method": "POST", "status": "200", "outcome": "ok"}
    assert value(found, "citeflow_http_requests_total", **chat) == 2
    missing = {"route": "/v1/models/{model}", "method": "GET", "status": "404"}
    assert value(found, "citeflow_http_requests_total", **missing, outcome="client_error") == 1
    assert value(found, "citeflow_answers_total", outcome="cited") == 2
    assert value(found, "citeflow_answer_duration_seconds_count") == 2
    assert value(found, "citeflow_time_to_first_token_seconds_count") == 1  # the stream only
    for stage in ("rewrite", "embed", "retrieve", "grade", "cite", "synthesize", "llm"):
        assert value(found, "citeflow_stage_duration_seconds_count", stage=stage) == 2, stage
    assert value(found, "citeflow_stage_duration_seconds_count", stage="reformulate") == 0
    assert value(found, "citeflow_retrieval_rounds_count") == 2
    assert value(found, "citeflow_retrieval_retries_total") == 0
    # one passage answers "Who bought Viaweb?": each answer keeps [1] and loses [2], which
    # names no source
    assert value(found, "citeflow_citations_total", action="kept") == 2
    assert value(found, "citeflow_citations_total", action="removed") == 2
    assert value(found, "citeflow_llm_tokens_total", direction="in") > 20
    assert value(found, "citeflow_llm_tokens_total", direction="out") > 10
    assert value(found, "citeflow_streams_in_flight") == 0


async def test_no_label_holds_user_text_keys_or_names(kb: KnowledgeBase) -> None:
    secrets = ("zebra-question", "private-plan.pdf", KEY, "wrong-key-xyz")
    async with asgi_client(keyed_engine(kb)) as client:
        question = chat_request("What is the zebra-question about?")
        assert (await client.post("/v1/chat/completions", json=question, headers=GOOD)).is_success
        await client.get("/v1/documents/kb/private-plan.pdf/file", headers=GOOD)
        await client.get("/private-plan.pdf")
        await client.get("/v1/models", headers={"Authorization": "Bearer wrong-key-xyz"})
        await client.request("BREW", "/v1/models", headers=GOOD)
        scraped = (await client.get("/metrics", headers=GOOD)).text
    for secret in secrets:
        assert secret not in scraped
    requests = [
        dict(labels) for name, labels in samples(scraped) if name == "citeflow_http_requests_total"
    ]
    routes = {labels["route"] for labels in requests}
    assert "unmatched" in routes
    assert all(r == "unmatched" or (r.startswith("/") and "{" in r) or "." not in r for r in routes)
    assert "/v1/documents/{name}/{doc_id}/file" in routes
    methods = {labels["method"] for labels in requests}
    assert "BREW" not in methods and "OTHER" in methods


async def test_metrics_need_the_key_and_can_be_turned_off(kb: KnowledgeBase) -> None:
    engine = keyed_engine(kb)
    async with asgi_client(engine) as client:
        ok = await assert_needs_key(client, "GET", "/metrics", KEY)
        assert "citeflow_http_requests_total" in ok.text
    engine.settings.server.metrics = False
    async with asgi_client(engine) as client:
        off = await client.get("/metrics", headers=GOOD)
        assert off.status_code == 404


async def test_rate_limits_are_counted_by_reason(kb: KnowledgeBase) -> None:
    engine = keyed_engine(kb, chats_per_minute=1, auth_max_failures=1)
    async with asgi_client(engine) as client:
        for status in (200, 429):  # the second chat is one past the rate
            chat = await client.post("/v1/chat/completions", json=chat_request(), headers=GOOD)
            assert chat.status_code == status
        for _ in range(3):
            await client.get("/v1/models", headers={"Authorization": "Bearer wrong"})
        found = samples((await client.get("/metrics", headers=GOOD)).text)
    assert value(found, "citeflow_rate_limited_total", reason="per_minute") == 1
    assert value(found, "citeflow_rate_limited_total", reason="failed_keys") >= 1
    assert value(found, "citeflow_rate_limited_total", reason="in_progress") == 0
    chat_429 = {"route": "/v1/chat/completions", "method": "POST", "status": "429"}
    assert value(found, "citeflow_http_requests_total", **chat_429, outcome="rate_limited") == 1


async def test_uploads_are_counted_by_result(kb: KnowledgeBase) -> None:
    engine = make_engine(kb, ScriptedLLM([ANSWER]))
    owls = ("owls.txt", b"Barn owls hunt at night and eat mice and voles. " * 8, "text/plain")
    bad = ("broken.pdf", b"%PDF-1.4 not really a pdf", "application/pdf")
    async with asgi_client(engine) as client:
        first = await client.post("/v1/collections/animals/documents", files=[("file", owls)])
        assert first.status_code == 200, first.text
        again = await client.post(
            "/v1/collections/animals/documents", files=[("file", owls), ("file", bad)]
        )
        assert again.status_code == 200, again.text
        found = samples((await client.get("/metrics")).text)
    assert value(found, "citeflow_ingested_documents_total", result="added") == 1
    assert value(found, "citeflow_ingested_documents_total", result="unchanged") == 1
    assert value(found, "citeflow_ingested_documents_total", result="failed") == 1
    assert value(found, "citeflow_ingested_chunks_total") == first.json()["chunks"] > 0


def test_citations_kept_moved_added_and_removed_are_told_apart() -> None:
    def cite(number: int, origin: str) -> Citation:
        return Citation(number, "s", "q", 0, 1, 0.9, origin)  # type: ignore[arg-type]

    result = CitedResponse(
        response="A [1]. B [3]. C [2]. D.",
        raw_response="A [1]. B [2]. C. D [4]. E [1].",  # four markers written by the model
        citations=[cite(1, "model"), cite(3, "moved"), cite(2, "added")],
        unsupported=["D."],
        rounds=3,
        timings={"retrieve": 0.01, "reformulate": 0.5, "judge": 0.2, "unknown-stage": 1.0},
        judge_verdicts={"supported": 2, "timed_out": 1, "maybe": 4},
    )
    assert citation_actions(result.citations, result.raw_response) == {
        "kept": 1,
        "moved": 1,
        "added": 1,
        "removed": 2,
    }
    grouped = CitedResponse(
        response="A [1].", raw_response="A [1, 2]. B 【3】.", citations=[cite(1, "model")]
    )
    # every marker form the parser knows
    assert citation_actions(grouped.citations, grouped.raw_response)["removed"] == 2
    metrics = Metrics()
    metrics.answered(result, seconds=1.5)
    found = samples(metrics.exposition()[0].decode())
    assert value(found, "citeflow_retrieval_retries_total") == 2
    assert value(found, "citeflow_unsupported_sentences_total") == 1
    assert value(found, "citeflow_citations_total", action="removed") == 2
    assert value(found, "citeflow_stage_duration_seconds_count", stage="reformulate") == 1
    assert value(found, "citeflow_stage_duration_seconds_count", stage="judge") == 1
    assert value(found, "citeflow_judge_verdicts_total", verdict="supported") == 2
    assert value(found, "citeflow_judge_verdicts_total", verdict="timed_out") == 1
    assert not any("maybe" in str(labels) for _, labels in found)  # no label outside the set
    assert not any("unknown-stage" in str(labels) for _, labels in found)
    assert value(found, "citeflow_answers_total", outcome="not_covered") == 1  # no sources
