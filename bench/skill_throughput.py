"""The embedding skill's throughput against the embedder's own, on the same texts in the same run.

Azure AI Search's indexer calls ``POST /v1/skills/embeddings`` with up to 1,000 records a call.
Each repetition takes the next 1,000 SciFact abstracts (../shared/data/scifact), cut at a word
to about ``--chars`` characters (600; 0: whole, 1,371 on average, which MiniLM truncates at 256
tokens), and embeds them twice with the same embedder object:

* raw: ``get_text_embedding_batch(texts)`` of the local embedder (all-MiniLM-L6-v2 on ONNX
  Runtime, built as ``citeflow serve`` builds it: ``CITEFLOW_SERVE_EMBED_THREADS`` threads,
  default 1, numpy's BLAS on one thread);
* skill: one 1,000-record call through the ASGI app (httpx's ASGITransport, in this process),
  timed from the request to the last byte of the answer; the request body is encoded, and the
  answer parsed and checked against the raw vectors, outside the timer.

The two sides alternate which goes first, so that a drift of the machine's speed hits both alike.
Printed: texts/s of each side per repetition, the medians, and their ratio (target >= 0.95);
texts per CPU second of the whole process (less sensitive to other load than the wall clock);
and the event loop's own CPU per call (the server's work besides embedding, which runs on
the other core while the embedder's thread computes).
The skill sorts each call's texts by length before batching, as ingestion does; the raw side
embeds them in the call's order, so ``--sorted-raw`` adds a third side, raw on length-sorted
texts, which leaves only the server's own cost in the ratio.

    .venv/bin/python bench/skill_throughput.py [--repeats 3] [--records 1000] [--chars 600]
        [--threads 1] [--sorted-raw]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import warnings
from itertools import islice

import httpx

from citeflow.api.engine import Engine
from citeflow.evaluation.dataset import load_beir
from citeflow.providers.embeddings import build_embed_model, describe_embeddings
from citeflow.query.batching import batch_queries
from citeflow.server import create_app, use_one_blas_thread
from citeflow.settings import Settings
from citeflow.store import Store
from citeflow.testing.llm import ScriptedLLM
from common import SCIFACT


def load(count: int, chars: int) -> list[str]:
    """The first ``count`` abstracts with text, cut to about ``chars`` characters (0: whole)."""
    texts = (doc.text.strip() for doc in load_beir(SCIFACT, evidence=False).corpus.values())
    cut = (t[:chars].rsplit(" ", 1)[0] if chars and len(t) > chars else t for t in texts if t)
    return list(islice(cut, count))


def body(texts: list[str]) -> bytes:
    values = [{"recordId": str(i), "data": {"text": t}} for i, t in enumerate(texts)]
    return json.dumps({"values": values}).encode()


async def run(args: argparse.Namespace) -> None:
    settings = Settings(_env_file=None)
    threads = settings.embeddings.serve_threads if args.threads is None else args.threads
    use_one_blas_thread()
    raw = build_embed_model(settings, threads=threads)
    engine = Engine(
        settings,
        store=Store.open_path(":memory:"),
        embed_model=batch_queries(raw),
        llm=ScriptedLLM(),
    )
    texts = load(args.records * args.repeats, args.chars)
    if len(texts) < args.records * args.repeats:
        raise SystemExit(f"only {len(texts)} abstracts for {args.repeats} x {args.records}")
    calls = [texts[i : i + args.records] for i in range(0, len(texts), args.records)]
    mean_chars = statistics.mean(len(t) for t in texts)
    print(
        f"{args.repeats} calls of {args.records} SciFact abstracts (mean {mean_chars:.0f} chars), "
        f"{describe_embeddings(settings)} on ONNX Runtime, {threads or 'all'} thread(s), "
        f"batch {raw.embed_batch_size}"
    )
    transport = httpx.ASGITransport(app=create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        loop_cpu: list[float] = []

        async def skill(batch: list[str]) -> tuple[float, float, list[list[float]]]:
            content = body(batch)
            started, cpu, own = time.perf_counter(), time.process_time(), time.thread_time()
            response = await client.post(
                "/v1/skills/embeddings",
                content=content,
                headers={"content-type": "application/json"},
            )
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
            loop_cpu.append(time.thread_time() - own)
            response.raise_for_status()
            return seconds, cpu, [v["data"]["vector"] for v in response.json()["values"]]

        def timed_raw(batch: list[str]) -> tuple[float, float, list[list[float]]]:
            started, cpu = time.perf_counter(), time.process_time()
            vectors = raw.get_text_embedding_batch(batch)
            return time.perf_counter() - started, time.process_time() - cpu, vectors

        await skill(calls[0][:64])  # warm-up: the first calls run slower
        timed_raw(calls[0][:64])
        rates: dict[str, list[float]] = {"raw": [], "skill": [], "raw sorted": []}
        per_cpu: dict[str, list[float]] = {"raw": [], "skill": [], "raw sorted": []}
        worst = 0.0
        for k, batch in enumerate(calls):
            sides = ["raw", "skill"] if k % 2 == 0 else ["skill", "raw"]
            if args.sorted_raw:
                sides.append("raw sorted")
            for side in sides:
                if side == "skill":
                    seconds, cpu, answer = await skill(batch)
                elif side == "raw":
                    seconds, cpu, expected = timed_raw(batch)
                else:
                    seconds, cpu, _ = timed_raw(sorted(batch, key=len))
                rates[side].append(len(batch) / seconds)
                per_cpu[side].append(len(batch) / cpu)
            for u, v in zip(answer, expected, strict=True):
                worst = max(worst, max(abs(a - b) for a, b in zip(u, v, strict=True)))
            line = "  ".join(f"{side} {rates[side][-1]:6.1f}/s" for side in sides)
            print(f"call {k + 1}: {line}  skill/raw {rates['skill'][-1] / rates['raw'][-1]:.3f}")

    medians = {side: statistics.median(r) for side, r in rates.items() if r}
    ratios = [s / r for s, r in zip(rates["skill"], rates["raw"], strict=True)]
    print(
        f"median texts/s: raw {medians['raw']:.1f}, skill {medians['skill']:.1f}"
        + (f", raw sorted {medians['raw sorted']:.1f}" if "raw sorted" in medians else "")
    )
    print(
        f"skill / raw: {medians['skill'] / medians['raw']:.3f} (medians; per call "
        f"{min(ratios):.3f}-{max(ratios):.3f}, median {statistics.median(ratios):.3f}); "
        "target >= 0.95"
    )
    if "raw sorted" in medians:
        print(f"skill / raw sorted: {medians['skill'] / medians['raw sorted']:.3f}")
    cpu = {side: statistics.median(r) for side, r in per_cpu.items() if r}
    print(
        "texts per CPU second (the process's, all threads): "
        + ", ".join(f"{side} {value:.1f}" for side, value in cpu.items())
        + f"; skill / raw {cpu['skill'] / cpu['raw']:.3f}"
    )
    spent = statistics.median(loop_cpu[1:])  # the first is the warm-up's
    print(
        f"event loop CPU per call (parse, check, render, ASGI, client): median {spent:.2f} s, "
        f"{spent * medians['raw'] / args.records:.1%} of the raw embedding time"
    )
    print(f"largest difference of a vector component, skill against raw: {worst:.1e}")
    engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="calls (distinct texts each)")
    parser.add_argument("--records", type=int, default=1000, help="records per call")
    parser.add_argument(
        "--chars", type=int, default=600, help="cut texts to ~N characters (0: whole abstracts)"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="embedder threads (default: the server's, 1)"
    )
    parser.add_argument(
        "--sorted-raw", action="store_true", help="also time raw on length-sorted texts"
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
