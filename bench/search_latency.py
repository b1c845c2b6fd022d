"""POST /search latency over SciFact's corpus, in-process through the ASGI app.

SciFact's 5,183 abstracts (BEIR, ../shared/data/scifact) are indexed as ``citeflow eval``
indexes them: the cached corpus index of `citeflow.evaluation.dense` (``~/.cache/citeflow/eval``;
chunks 512/64, dense + BM25, the real default embedder: all-MiniLM-L6-v2 on ONNX Runtime), built
on the first run (a few minutes) and reused after that. An `Engine` is built over it as
``citeflow serve`` builds one: the query embedder batched on ``CITEFLOW_SERVE_EMBED_THREADS``
(1) thread, numpy's BLAS on one thread, the garbage collector tuned. Each of SciFact's 300 test
claims is sent as ``POST /search {"queries": [claim], "k": K}`` (the corpus is the default
collection) through httpx's ASGITransport, one request at a time; the wall time per request
includes the query's embedding, the hybrid search (dense + BM25, fused, feedback), grading and
the JSON answer.

Grading is by score (``CITEFLOW_GRADER=score``, which is also what ``auto``, the default, picks
for the default local LLM; with a hosted LLM ``auto`` grades by an LLM call, whose time is the
provider's): the engine's LLM raises if it is ever called. The default ``CITEFLOW_MAX_ROUNDS=1``
means no retry round (a retry is an LLM call).

Also printed: the query embedding alone (the same batched embedder, awaited directly), and the
share of claims with a judged-relevant abstract among the results (a sanity check that the
route searches what it should; `citeflow eval` measures retrieval properly).

    .venv/bin/python bench/search_latency.py [--passes 2] [--k 5] [--limit 300] [--corpus-limit N]
"""

from __future__ import annotations

import argparse
import asyncio
import time
import warnings
from contextlib import closing
from pathlib import Path

import httpx

from citeflow.api.engine import Engine
from citeflow.evaluation.dataset import load_beir
from citeflow.evaluation.dense import COLLECTION, DenseIndex, default_cache_dir
from citeflow.providers.embeddings import build_embed_model, describe_embeddings
from citeflow.query.batching import batch_queries
from citeflow.server import create_app, tune_gc, use_one_blas_thread
from citeflow.settings import Settings
from citeflow.testing.llm import ScriptedLLM
from common import SCIFACT, p50_p95_ms

TARGET_P50_MS = 30.0


async def measure(
    engine: Engine,
    claims: list[tuple[str, str]],
    relevant: dict[str, set[str]],
    *,
    k: int,
    passes: int,
) -> tuple[list[float], list[float], float, float]:
    """Request times, embedding times, mean results per claim, share of claims with a hit."""
    transport = httpx.ASGITransport(app=create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        for _, text in claims[:20]:  # warm-up: the first calls of the runtime run slower
            response = await client.post("/search", json={"queries": [text], "k": k})
            response.raise_for_status()
        times: list[float] = []
        results = hits = 0
        for _ in range(passes):
            for query_id, text in claims:
                started = time.perf_counter()
                response = await client.post("/search", json={"queries": [text], "k": k})
                times.append(time.perf_counter() - started)
                response.raise_for_status()
                metadatas = response.json()["metadatas"][0]
                results += len(metadatas)
                hits += any(m["doc_id"] in relevant[query_id] for m in metadatas)
    embeds: list[float] = []
    for _, text in claims:
        started = time.perf_counter()
        await engine.embed_model.aget_query_embedding(text)
        embeds.append(time.perf_counter() - started)
    count = len(claims) * passes
    return times, embeds, results / count, hits / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passes", type=int, default=2, help="passes over the claims")
    parser.add_argument("--k", type=int, default=5, help="results per query")
    parser.add_argument("--limit", type=int, default=None, help="first N test claims (all: 300)")
    parser.add_argument(
        "--corpus-limit", type=int, default=None, help="a corpus slice (a quick check of the bench)"
    )
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir())
    args = parser.parse_args()
    warnings.filterwarnings("ignore")

    settings = Settings(
        _env_file=None, retrieval={"grader": "score"}, store={"collection": COLLECTION}
    )
    dataset = load_beir(SCIFACT, split="test", limit=args.limit, corpus_limit=args.corpus_limit)
    started = time.perf_counter()
    index = DenseIndex.open(
        dataset,
        embed_model=build_embed_model(settings),
        embedder=describe_embeddings(settings),
        cache_dir=args.cache_dir,
        settings=settings,
    )
    info = index.info
    how = "reused" if info.reused else f"built ({info.embedded_chunks} chunks embedded)"
    print(
        f"SciFact corpus: {info.documents} abstracts, {info.chunks} chunks, {how} in "
        f"{time.perf_counter() - started:.1f} s ({info.embedder}; {info.directory})"
    )
    serve_embed = batch_queries(
        build_embed_model(settings, threads=settings.embeddings.serve_threads)
    )
    llm = ScriptedLLM([RuntimeError("the search called the LLM")])
    engine = Engine(settings, store=index.kb.store, embed_model=serve_embed, llm=llm)
    claims = list(dataset.queries.items())
    relevant = {query_id: dataset.relevant(query_id) for query_id, _ in claims}
    with closing(engine):
        use_one_blas_thread()
        tune_gc()
        times, embeds, per_query, found = asyncio.run(
            measure(engine, claims, relevant, k=args.k, passes=args.passes)
        )
    assert not llm.prompts, "the LLM was called"
    p50, p95 = p50_p95_ms(times)
    e50, e95 = p50_p95_ms(embeds)
    print(
        f"POST /search, {len(times)} requests ({len(claims)} claims x {args.passes}), k {args.k}, "
        f"hybrid retrieval, score grading, one at a time through ASGI"
    )
    print(f"{'':36s} {'p50 ms':>8s} {'p95 ms':>8s}")
    print(f"{'POST /search (embedding included)':36s} {p50:8.2f} {p95:8.2f}")
    print(f"{'  of which the query embedding, alone':36s} {e50:8.2f} {e95:8.2f}")
    print(
        f"results per claim {per_query:.2f} (graded; at most {args.k}); claims with a judged "
        f"abstract among them {found:.3f}; LLM calls 0"
    )
    print(f"target: p50 <= {TARGET_P50_MS:.0f} ms: {'met' if p50 <= TARGET_P50_MS else 'NOT met'}")


if __name__ == "__main__":
    main()
