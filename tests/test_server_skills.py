"""The embedding skill (``POST /v1/skills/embeddings``): Azure AI Search's Custom Web API skill and
vectorizer, with a fake embedder in-process and with the real Azure OpenAI client against the
fake Azure server (API Management headers included).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding
from pydantic import Field

from citeflow.knowledge_base import KnowledgeBase
from citeflow.providers.embeddings import build_embed_model
from citeflow.providers.upstream_errors import DEFAULT_RETRY_AFTER
from citeflow.server import create_app
from citeflow.testing.embedding import HashEmbedding, RecordingEmbedding
from citeflow.testing.openai_server import FakeOpenAIServer, fake_embedding
from tests.server_helpers import asgi_client, assert_error, assert_needs_key, make_engine, post_raw
from tests.settings_helpers import APIM_KEY, AZURE_KEY, assert_azure_request, azure_settings

URL = "/v1/skills/embeddings"
#: a client over an engine and its embedder (the fixtures `local` and `remote`)
Local = tuple[httpx.AsyncClient, RecordingEmbedding]
Remote = tuple[httpx.AsyncClient, BaseEmbedding]


def records(texts: list[Any]) -> dict[str, Any]:
    """A skill call: one record per text, ids ``r0``, ``r1``, ..."""
    return {"values": [{"recordId": f"r{i}", "data": {"text": t}} for i, t in enumerate(texts)]}


@pytest.fixture
async def local(kb: KnowledgeBase) -> AsyncIterator[Local]:
    """A client over an engine whose (in-process) embedder records its batches."""
    embed = RecordingEmbedding(embed_batch_size=4)
    async with asgi_client(make_engine(kb, embed_model=embed)) as client:
        yield client, embed


@pytest.fixture
def azure() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(api_keys=[AZURE_KEY]) as server:
        yield server


@pytest.fixture
async def remote(kb: KnowledgeBase, azure: FakeOpenAIServer) -> AsyncIterator[Remote]:
    """A client over an engine whose embedder is Azure OpenAI's as ``citeflow serve`` builds it
    (no retries), behind APIM."""
    embed = build_embed_model(azure_settings(azure, embed_batch_size=8), max_retries=0)
    async with asgi_client(make_engine(kb, embed_model=embed)) as client:
        yield client, embed


def vectors_of(response: httpx.Response) -> list[list[float] | None]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    return [v["data"].get("vector") for v in response.json()["values"]]


def texts_of_lengths(n: int) -> list[str]:
    """``n`` distinct texts of varied lengths, not in length order."""
    return [f"text {i} " + "ducks eat plants " * ((i * 7) % 5) for i in range(n)]


# --- the skill with an in-process embedder --------------------------------------------------------
async def test_vectors_are_the_embedders_own_in_the_order_of_the_records(local: Local) -> None:
    client, embed = local
    texts = texts_of_lengths(10)

    response = await client.post(URL, json=records(texts))

    answer = response.json()["values"]
    assert [v["recordId"] for v in answer] == [f"r{i}" for i in range(10)]
    assert all(v["errors"] is None and v["warnings"] is None for v in answer)
    assert vectors_of(response) == HashEmbedding().get_text_embedding_batch(texts)
    # embedded in batches of the embedder's size, each of texts of about one length
    assert [len(b) for b in embed.batches] == [4, 4, 2]
    assert sorted(t for b in embed.batches for t in b) == sorted(texts)
    lengths = [len(t) for b in embed.batches for t in b]
    assert lengths == sorted(lengths)


async def test_bad_records_get_their_errors_and_the_others_their_vectors(local: Local) -> None:
    client, _ = local
    good = {"recordId": "good", "data": {"text": "Ducks eat plants."}}
    longest = {"recordId": "longest", "data": {"text": "a" * 32_000}}
    bad: dict[str, tuple[Any, str]] = {
        "no id": ({"data": {"text": "x"}}, "recordId is missing"),
        "numeric id": ({"recordId": 7, "data": {"text": "x"}}, "recordId must be a string"),
        "no data": ({"recordId": "no-data"}, "data is missing"),
        "data not object": ({"recordId": "s", "data": "x"}, "data is a string, not an object"),
        "no text": ({"recordId": "t", "data": {"other": "x"}}, "data.text is missing"),
        "null text": ({"recordId": "n", "data": {"text": None}}, "not null"),
        "number text": ({"recordId": "num", "data": {"text": 3}}, "not a number"),
        "list text": ({"recordId": "l", "data": {"text": ["x"]}}, "not an array"),
        "empty": ({"recordId": "e", "data": {"text": ""}}, "data.text is empty"),
        "blank": ({"recordId": "b", "data": {"text": " \n\t "}}, "data.text is empty"),
        "huge": (
            {"recordId": "h", "data": {"text": "a" * 32_001}},
            "data.text is 32,001 characters long, over the limit of 32,000",
        ),
        "image": ({"recordId": "i", "data": {"imageUrl": "https://x"}}, "embeds text only"),
        "not a record": ("just a string", "the record is a string, not an object"),
    }
    values = [good, *[item for item, _ in bad.values()], longest]

    response = await client.post(URL, json={"values": values})

    answer = response.json()["values"]
    assert response.status_code == 200 and len(answer) == len(values)
    assert answer[0] == {
        "recordId": "good",
        "data": {"vector": HashEmbedding().get_text_embedding("Ducks eat plants.")},
        "errors": None,
        "warnings": None,
    }
    assert answer[-1]["recordId"] == "longest" and len(answer[-1]["data"]["vector"]) == 256
    for (name, (item, message)), out in zip(bad.items(), answer[1:-1], strict=True):
        expected_id = item.get("recordId") if isinstance(item, dict) else None
        assert out["recordId"] == (expected_id if isinstance(expected_id, str) else None), name
        assert out["data"] == {} and out["warnings"] is None, name
        assert len(out["errors"]) == 1 and message in out["errors"][0]["message"], (name, out)


async def test_a_lone_surrogate_is_that_records_error(local: Local) -> None:
    client, embed = local
    body = '{"values": [{"recordId": "a", "data": {"text": "bad \\ud800 text"}},' + (
        '{"recordId": "b", "data": {"text": "good text"}}]}'
    )

    response = await post_raw(client, URL, body)

    first, second = response.json()["values"]
    assert first["data"] == {}
    assert "lone UTF-16 surrogate (\\ud800)" in first["errors"][0]["message"]
    assert second["data"]["vector"] == HashEmbedding().get_text_embedding("good text")
    assert embed.batches == [["good text"]]


async def test_no_text_to_embed_is_no_embedder_call(local: Local) -> None:
    client, embed = local
    empty = await client.post(URL, json={"values": []})
    only_bad = await client.post(URL, json=records(["", None]))
    assert empty.json() == {"values": []}
    assert [v["data"] for v in only_bad.json()["values"]] == [{}, {}]
    assert embed.batches == []


async def test_a_thousand_records_pass_and_one_more_is_refused(local: Local) -> None:
    client, embed = local
    texts = [f"record number {i}" for i in range(1001)]

    accepted = await client.post(URL, json=records(texts[:1000]))
    refused = await client.post(URL, json=records(texts))

    assert len(vectors_of(accepted)) == 1000
    assert_error(refused, 413, "invalid_request_error", param="values")
    assert refused.json()["error"]["message"] == (
        "1,001 records in one call, over the limit of 1,000; set the skill's batchSize to 1,000 "
        "or less"
    )
    assert sum(len(b) for b in embed.batches) == 1000  # nothing of the refused call


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "the request body is not valid JSON"),
        (b'["values"]', "the request body must be a JSON object"),
        (b'{"records": []}', "values is missing"),
        (b'{"values": {"recordId": "1"}}', "values must be an array, not an object"),
        (b'{"values": "x"}', "values must be an array, not a string"),
        (b'{"values": ' + b"[" * 100 + b"]" * 100 + b"}", "nests objects and arrays more than 64"),
    ],
    ids=["not-json", "not-object", "no-values", "values-object", "values-string", "deep"],
)
async def test_a_call_that_is_not_a_skill_call_is_400(
    local: Local, body: bytes, message: str
) -> None:
    client, _ = local
    response = await post_raw(client, URL, body)
    assert_error(response, 400, "invalid_request_error", message)


async def test_an_unknown_input_type_is_400(local: Local) -> None:
    client, _ = local
    response = await client.post(URL, params={"input_type": "passage"}, json=records(["x"]))
    assert_error(response, 400, "invalid_request_error", param="query.input_type")


async def test_a_body_over_the_limit_is_413(kb: KnowledgeBase) -> None:
    async with asgi_client(make_engine(kb, max_skill_body_bytes=1_000)) as client:
        response = await client.post(URL, json=records(["x" * 600, "y" * 600]))
    message = "the request body is over the limit of 1000 bytes; lower the skill's batchSize"
    assert_error(response, 413, "invalid_request_error", message=message)


async def test_the_key_is_required(kb: KnowledgeBase) -> None:
    async with asgi_client(make_engine(kb, keys=["k1"])) as client:
        right = await assert_needs_key(client, "POST", URL, "k1", json=records(["x"]))
    assert len(vectors_of(right)) == 1


class QueryAwareEmbedding(HashEmbedding):
    """Embeds a query as ``query: <text>``, so that query and document vectors differ."""

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(f"query: {query} question asked")

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


async def test_the_vectorizer_embeds_its_one_record_as_a_query(kb: KnowledgeBase) -> None:
    embed = QueryAwareEmbedding()
    query = {"input_type": "query"}
    async with asgi_client(make_engine(kb, embed_model=embed)) as client:
        asked = await client.post(URL, params=query, json=records(["Where do ducks live?"]))
        document = await client.post(URL, json=records(["Where do ducks live?"]))
        several = await client.post(URL, params=query, json=records(["a duck", "", "a pond"]))
    assert vectors_of(asked) == [embed.get_query_embedding("Where do ducks live?")]
    assert vectors_of(document) == [embed.get_text_embedding("Where do ducks live?")]
    assert vectors_of(asked) != vectors_of(document)
    assert vectors_of(several) == [
        embed.get_query_embedding("a duck"),
        None,
        embed.get_query_embedding("a pond"),
    ]


class SlowEmbedding(HashEmbedding):
    """Takes ``delay`` seconds per batch, synchronously (as a CPU-bound model would), and
    records the threads it ran on."""

    delay: float = 0.1
    threads: set[int] = Field(default_factory=set)

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        self.threads.add(threading.get_ident())
        time.sleep(self.delay)
        return super()._get_text_embeddings(texts)


async def test_an_in_process_embedder_leaves_the_event_loop_free(kb: KnowledgeBase) -> None:
    embed = SlowEmbedding(embed_batch_size=2)
    async with asgi_client(make_engine(kb, embed_model=embed)) as client:
        call = asyncio.ensure_future(client.post(URL, json=records(texts_of_lengths(8))))
        await asyncio.sleep(0.05)
        started = time.perf_counter()
        health = await client.get("/health")
        waited = time.perf_counter() - started
        response = await call
    assert health.status_code == 200 and waited < 0.05, waited
    assert not call.cancelled() and len(vectors_of(response)) == 8
    assert threading.get_ident() not in embed.threads


class FailingEmbedding(HashEmbedding):
    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        raise RuntimeError("the model fell over at /secret/path")


class ShortEmbedding(HashEmbedding):
    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return super()._get_text_embeddings(texts[1:])


@pytest.mark.parametrize("broken", [FailingEmbedding, ShortEmbedding], ids=["fails", "loses"])
async def test_an_in_process_embedder_that_fails_or_loses_vectors_is_502_in_general_terms(
    kb: KnowledgeBase, broken: type[HashEmbedding]
) -> None:
    async with asgi_client(make_engine(kb, embed_model=broken())) as client:
        response = await client.post(URL, json=records(["x", "y"]))
    assert_error(response, 502, "upstream_error")
    assert "/secret/path" not in response.text


# --- the skill with Azure OpenAI behind API Management -------------------------------------------
async def test_azure_vectors_with_the_api_management_headers(
    remote: Remote, azure: FakeOpenAIServer
) -> None:
    client, embed = remote
    texts = texts_of_lengths(20)

    response = await client.post(URL, json=records(texts))

    vectors = vectors_of(response)
    requests = azure.requests_of("embeddings")
    assert sorted(len(r.json["input"]) for r in requests) == [4, 8, 8]  # batches of 8
    assert vectors == await embed.aget_text_embedding_batch(texts)
    assert vectors[3] == pytest.approx(fake_embedding(texts[3]), abs=1e-6)
    for request in requests:
        assert_azure_request(request, "/openai/deployments/embed-deployment/embeddings")


async def test_azure_vectorizer_call(remote: Remote, azure: FakeOpenAIServer) -> None:
    client, embed = remote
    call = {"values": [{"recordId": "0", "data": {"text": "Where do ducks live?"}}]}

    response = await client.post(URL, params={"input_type": "query"}, json=call)

    assert response.json()["values"][0]["recordId"] == "0"
    assert vectors_of(response) == [await embed.aget_query_embedding("Where do ducks live?")]
    assert azure.requests_of("embeddings")[0].headers["ocp-apim-subscription-key"] == APIM_KEY


@pytest.mark.parametrize(
    ("given", "expected"), [(7, "7"), (None, str(int(DEFAULT_RETRY_AFTER)))], ids=["7s", "none"]
)
@pytest.mark.parametrize("input_type", ["document", "query"])
async def test_an_upstream_rate_limit_is_429_with_retry_after(
    remote: Remote,
    azure: FakeOpenAIServer,
    given: float | None,
    expected: str,
    input_type: str,
) -> None:
    client, _ = remote
    azure.fail_next(429, message="Rate limit of org-Secret123 reached.", retry_after=given)

    response = await client.post(
        URL, params={"input_type": input_type}, json=records(texts_of_lengths(20))
    )

    message = f"the embedding provider's rate limit is reached; retry in {expected} s"
    assert_error(response, 429, "rate_limit_error", message=message, code="rate_limit_exceeded")
    assert response.headers["retry-after"] == expected
    assert "org-Secret123" not in response.text


async def test_an_upstream_failure_is_502(remote: Remote, azure: FakeOpenAIServer) -> None:
    client, _ = remote
    azure.fail_next(500, message="Internal error at account org-Secret123.")
    response = await client.post(URL, json=records(texts_of_lengths(20)))
    assert_error(response, 502, "upstream_error")
    assert "org-Secret123" not in response.text


async def test_a_text_the_provider_refuses_is_that_records_error(
    remote: Remote, azure: FakeOpenAIServer
) -> None:
    client, embed = remote
    azure.max_input_tokens = 50
    texts = texts_of_lengths(10)
    texts[5] = "word " * 60  # 60 tokens: over the fake model's limit (in the first batch of 8)

    response = await client.post(URL, json=records(texts))

    vectors = vectors_of(response)
    inputs = [r.json["input"] for r in azure.requests_of("embeddings")]
    refused = response.json()["values"][5]
    assert refused["recordId"] == "r5" and refused["data"] == {}
    assert refused["errors"] == [
        {
            "message": "the embedding provider refused this text (HTTP 400); it may be over the "
            "model's token limit: split it into shorter texts"
        }
    ]
    others = [t for i, t in enumerate(texts) if i != 5]
    assert [v for i, v in enumerate(vectors) if i != 5] == await embed.aget_text_embedding_batch(
        others
    )
    # the 8 shortest texts in one request; the 2 longest refused together, then one by one
    assert sorted(len(i) for i in inputs) == [1, 1, 2, 8]


def test_the_openapi_schema_describes_the_skill(kb: KnowledgeBase) -> None:
    schema = create_app(make_engine(kb)).openapi()
    operation = schema["paths"][URL]["post"]
    components = schema["components"]["schemas"]
    body = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    answer = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert (body, answer) == (
        "#/components/schemas/SkillRequest",
        "#/components/schemas/SkillResponse",
    )
    assert components["SkillRecord"]["required"] == ["recordId", "data"]
    assert components["SkillInput"]["required"] == ["text"]
    assert {p["name"] for p in operation["parameters"]} == {"input_type"}
    assert operation["security"]


# --- the wire format ------------------------------------------------------------------------------
async def test_the_answer_is_compact_json_that_azure_reads(local: Local) -> None:
    client, _ = local
    call = {"values": [{"recordId": 'é\u2028"', "data": {"text": "x"}}, {"recordId": "2"}]}
    response = await client.post(URL, json=call)
    raw = response.content.decode("ascii")  # ASCII: every other character escaped
    answer = json.loads(raw)
    assert [v["recordId"] for v in answer["values"]] == ['é\u2028"', "2"]
    assert set(answer["values"][1]) == {"recordId", "data", "errors", "warnings"}
