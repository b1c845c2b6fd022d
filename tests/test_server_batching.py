"""Query embedding micro-batching: concurrent questions share encoder calls, results unchanged."""

from __future__ import annotations

import asyncio
import threading
import time
from contextlib import closing

import pytest

from citeflow.knowledge_base import KnowledgeBase
from citeflow.query.batching import (
    BatchedQueryEmbedding,
    QueryBatcher,
    batch_queries,
    is_async_native,
    query_batch_function,
)
from citeflow.query.retrieval import Retriever
from citeflow.testing.embedding import HashEmbedding
from citeflow.testing.llm import ScriptedLLM
from tests.server_helpers import (
    CountingEmbedding,
    asgi_client,
    chat_request,
    content_of,
    make_engine,
    parse_sse,
)

Vectors = list[list[float]]
QUESTIONS = [f"Who bought Viaweb, and where do ducks live? ({i})" for i in range(24)]


class SlowBatch:
    """A batch function that records its batches and takes ``delay`` seconds per call."""

    def __init__(self, delay: float = 0.05, fail_on: str | None = None) -> None:
        self.delay = delay
        self.fail_on = fail_on
        self.batches: list[list[str]] = []
        self.threads: set[str] = set()

    def __call__(self, queries: list[str]) -> list[list[float]]:
        self.batches.append(list(queries))
        self.threads.add(threading.current_thread().name)
        time.sleep(self.delay)
        if self.fail_on is not None and self.fail_on in queries:
            raise ValueError(f"cannot embed {self.fail_on!r}")
        return [[float(len(q)), float(i)] for i, q in enumerate(queries)]


# --- the batcher ---------------------------------------------------------------------------------
async def test_a_lone_query_is_embedded_at_once_alone() -> None:
    calls = SlowBatch(delay=0.0)
    with closing(QueryBatcher(calls)) as batcher:
        started = time.perf_counter()
        assert await batcher.aembed("hello") == [5.0, 0.0]
        assert time.perf_counter() - started < 0.5
        assert batcher.embed("hi") == [2.0, 0.0]  # the sync API too
        assert calls.batches == [["hello"], ["hi"]]
        assert calls.threads == {"citeflow-embed"}


async def test_concurrent_queries_share_calls_and_keep_their_order() -> None:
    calls = SlowBatch(delay=0.05)
    with closing(QueryBatcher(calls, max_batch=8)) as batcher:
        vectors = await asyncio.gather(*(batcher.aembed(q) for q in QUESTIONS))
        # each caller gets the vector of its own query
        assert [v[0] for v in vectors] == [float(len(q)) for q in QUESTIONS]
        assert sorted(q for batch in calls.batches for q in batch) == sorted(QUESTIONS)
        assert max(len(b) for b in calls.batches) == 8  # capped by max_batch
        assert len(calls.batches) <= 5  # the first alone, then the waiting ones together
        stats = batcher.stats
        assert stats.queries == 24 and stats.batches == len(calls.batches) and stats.largest == 8


async def test_sync_callers_on_threads_are_batched_too() -> None:
    calls = SlowBatch(delay=0.05)
    with closing(QueryBatcher(calls)) as batcher:
        vectors = await asyncio.gather(*(asyncio.to_thread(batcher.embed, q) for q in QUESTIONS))
        assert [v[0] for v in vectors] == [float(len(q)) for q in QUESTIONS]
        assert len(calls.batches) < len(QUESTIONS)


async def test_a_failing_query_fails_alone() -> None:
    calls = SlowBatch(delay=0.02, fail_on=QUESTIONS[3])
    with closing(QueryBatcher(calls)) as batcher:
        results = await asyncio.gather(
            *(batcher.aembed(q) for q in QUESTIONS), return_exceptions=True
        )
        failed = [i for i, r in enumerate(results) if isinstance(r, BaseException)]
        assert failed == [3]
        assert isinstance(results[3], ValueError) and "cannot embed" in str(results[3])
        for i, (result, query) in enumerate(zip(results, QUESTIONS, strict=True)):
            if i != 3:
                assert not isinstance(result, BaseException) and result[0] == float(len(query))


async def test_wrong_vector_count_is_an_error() -> None:
    with closing(QueryBatcher(lambda queries: [[1.0]])) as batcher:
        assert await batcher.aembed("one") == [1.0]
        results = await asyncio.gather(
            batcher.aembed("a"), batcher.aembed("b"), batcher.aembed("c")
        )
        assert results == [[1.0], [1.0], [1.0]]  # retried one by one, each returns one vector
    with (
        closing(QueryBatcher(lambda queries: [])) as broken,
        pytest.raises(RuntimeError, match="0 vectors for 1 queries"),
    ):
        await broken.aembed("x")


async def test_cancelled_callers_are_skipped() -> None:
    calls = SlowBatch(delay=0.2)
    with closing(QueryBatcher(calls)) as batcher:
        first = asyncio.create_task(batcher.aembed("first"))
        await asyncio.sleep(0.05)  # "first" is being embedded
        gone = asyncio.create_task(batcher.aembed("gone"))
        kept = asyncio.create_task(batcher.aembed("kept"))
        await asyncio.sleep(0.01)
        gone.cancel()
        assert (await first)[0] == 5.0 and (await kept)[0] == 4.0
        assert calls.batches == [["first"], ["kept"]]


def test_close_finishes_pending_work_then_refuses() -> None:
    calls = SlowBatch(delay=0.05)
    batcher = QueryBatcher(calls)
    futures = [batcher.submit(q) for q in ("a", "b", "c")]
    batcher.close()
    assert [f.result(timeout=1)[0] for f in futures] == [1.0, 1.0, 1.0]
    with pytest.raises(RuntimeError, match="closed"):
        batcher.submit("d")
    batcher.close()  # idempotent
    QueryBatcher(calls).close()  # never started: no thread to stop
    with pytest.raises(ValueError):
        QueryBatcher(calls, max_batch=0)


# --- the embedding wrapper -----------------------------------------------------------------------
async def test_batched_embedding_gives_the_same_vectors() -> None:
    inner = HashEmbedding()
    with closing(BatchedQueryEmbedding(inner)) as batched:
        for query in QUESTIONS[:3]:
            expected = inner.get_query_embedding(query)
            assert batched.get_query_embedding(query) == expected
            assert await batched.aget_query_embedding(query) == expected
        texts = ["Ducks live near ponds.", "Yahoo bought Viaweb."]
        assert batched.get_text_embedding_batch(texts) == inner.get_text_embedding_batch(texts)
        assert await batched.aget_text_embedding(texts[0]) == inner.get_text_embedding(texts[0])
        vectors = await asyncio.gather(*(batched.aget_query_embedding(q) for q in QUESTIONS))
        assert vectors == [inner.get_query_embedding(q) for q in QUESTIONS]
        assert batched.inner is inner and batched.model_name == inner.model_name


def test_only_in_process_embedders_are_wrapped() -> None:
    class OpenAIEmbedding(HashEmbedding):  # named like the HTTP embedder
        pass

    http = OpenAIEmbedding()
    assert is_async_native(http) and batch_queries(http) is http
    local = HashEmbedding()
    wrapped = batch_queries(local)
    assert isinstance(wrapped, BatchedQueryEmbedding) and is_async_native(wrapped)
    assert not is_async_native(local)
    wrapped.close()


def test_batch_function_of_a_plain_embedder_embeds_one_by_one() -> None:
    counting = CountingEmbedding()
    batch = query_batch_function(counting)
    assert batch(["a b", "c d"]) == [counting._vector("a b"), counting._vector("c d")]
    assert counting.queries == 2


def test_batch_function_of_an_embedder_with_a_batch_api_uses_one_call() -> None:
    calls: list[list[str]] = []

    class BatchingEmbedding(HashEmbedding):  # as OnnxEmbedding and TorchEmbedding
        def embed_query_batch(self, queries: list[str]) -> Vectors:
            calls.append(list(queries))
            return [self._vector(q) for q in queries]

    model = BatchingEmbedding()
    batch = query_batch_function(model)
    assert batch(["x", "y"]) == [model._vector("x"), model._vector("y")]
    assert calls == [["x", "y"]]


async def test_the_retriever_awaits_a_batched_embedder(kb: KnowledgeBase) -> None:
    with closing(BatchedQueryEmbedding(kb.embed_model)) as batched:
        retriever = Retriever(kb.store, batched, collection="kb", top_k=3)
        plain = Retriever(kb.store, kb.embed_model, collection="kb", top_k=3)
        assert retriever._native and not plain._native
        for question in QUESTIONS[:2]:
            ours = await retriever.aretrieve(question)
            theirs = await plain.aretrieve(question)
            assert [(n.node.node_id, n.score) for n in ours] == [
                (n.node.node_id, n.score) for n in theirs
            ]


# --- through the server --------------------------------------------------------------------------
async def test_concurrent_chats_share_query_embeddings(kb: KnowledgeBase) -> None:
    counting = CountingEmbedding()
    batched = BatchedQueryEmbedding(counting)
    engine = make_engine(kb, ScriptedLLM(["Yahoo bought Viaweb in 1998 [1]."]), embed_model=batched)
    try:
        async with asgi_client(engine) as client:
            answers = await asyncio.gather(
                *(
                    client.post("/v1/chat/completions", json=chat_request(q, stream=True))
                    for q in QUESTIONS
                )
            )
        assert all(a.status_code == 200 for a in answers)
        assert all("Yahoo bought Viaweb" in content_of(parse_sse(a.text)) for a in answers)
        stats = batched.batcher.stats
        assert stats.queries == counting.queries == len(QUESTIONS)
        assert stats.batches < len(QUESTIONS)  # some questions were embedded together
    finally:
        engine.close()
    with pytest.raises(RuntimeError, match="closed"):
        batched.get_query_embedding("after close")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["onnx", "torch"])
async def test_minilm_batches_match_single_queries(backend: str) -> None:
    pytest.importorskip("llama_index.embeddings.huggingface")
    from citeflow.providers.embeddings import build_embed_model
    from citeflow.settings import Settings

    model = build_embed_model(Settings(_env_file=None, embeddings={"backend": backend}))
    with closing(BatchedQueryEmbedding(model)) as batched:
        alone = [model.get_query_embedding(q) for q in QUESTIONS[:8]]
        assert await batched.aget_query_embedding(QUESTIONS[0]) == alone[0]  # a batch of one
        together = await asyncio.gather(*(batched.aget_query_embedding(q) for q in QUESTIONS[:8]))
        assert batched.batcher.stats.largest > 1
        for a, b in zip(alone, together, strict=True):  # padding changes the last float bits
            assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-5


def test_serve_gives_the_local_embedder_one_thread() -> None:
    torch = pytest.importorskip("torch")
    from citeflow.server import use_embed_threads
    from citeflow.settings import EmbeddingSettings

    before = torch.get_num_threads()
    try:
        use_embed_threads(EmbeddingSettings.defaults(backend="torch"))
        assert torch.get_num_threads() == 1
        torch.set_num_threads(2)
        for settings in (
            EmbeddingSettings.defaults(backend="torch", serve_threads=0),
            EmbeddingSettings.defaults(provider="openai"),
            EmbeddingSettings.defaults(),  # ONNX: threads set per session
        ):
            use_embed_threads(settings)
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_serve_keeps_numpy_blas_on_one_thread() -> None:
    from threadpoolctl import threadpool_info

    from citeflow.server import use_one_blas_thread

    def blas_threads() -> set[int]:
        return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}

    before = blas_threads()
    limiter = use_one_blas_thread()
    try:
        assert blas_threads() == {1}
    finally:
        limiter.restore_original_limits()
    assert blas_threads() == before
