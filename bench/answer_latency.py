"""One cited answer end to end with the default local model, time split by step.

Ingests data/ (the essay) into a temporary embedded store with the local MiniLM embedder, loads
the default GGUF (Qwen2.5-Coder-1.5B-Instruct Q4_K_M) with llama.cpp, and answers questions
through the full workflow, printing each step's time, the prompt size and the answer.

    .venv/bin/python bench/answer_latency.py [--questions 3] [--model PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import warnings

from citeflow.knowledge_base import KnowledgeBase
from citeflow.providers.cpu_build import installed_runtime
from citeflow.providers.local_llm import LocalLlamaCppLLM
from citeflow.settings import load_settings
from common import ROOT

QUESTIONS = [
    "What did the author work on before college?",
    "Why did the author start Viaweb?",
    "What did the author do at Y Combinator?",
    "How did the author get into Lisp?",
    "What did the author learn at art school?",
]


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        local = {"model_path": args.model} if args.model else {}
        settings = load_settings(store={"data_dir": tmp}, local=local)
        started = time.perf_counter()
        kb = KnowledgeBase.build(
            [ROOT / "data"], collection="essay", settings=settings, progress=False
        )
        ingest = time.perf_counter() - started
        started = time.perf_counter()
        llm = LocalLlamaCppLLM.from_settings(settings)
        load = time.perf_counter() - started
        workflow = kb.workflow(llm=llm)
        print(
            f"ingest {ingest:.1f}s (once), model load {load:.1f}s (once): "
            f"{settings.local.gguf_path.name}"
        )
        version, built = installed_runtime()
        print(f"llama.cpp (xllamacpp {version}) built for: {' '.join(sorted(built))}")
        totals, cited = [], []
        for question in QUESTIONS[: args.questions]:
            started = time.perf_counter()
            result = await workflow.run(query=question)
            total = time.perf_counter() - started
            totals.append(total)
            if result.citations:
                cited.append(total)
            steps = "  ".join(f"{k} {v:.2f}s" for k, v in result.timings.items())
            stats = getattr(llm, "last_stats", None)
            print(f"\nQ: {question}\n   total {total:.1f}s: {steps}")
            if stats:
                prefill = stats.get("prompt_ms", 0) / 1000
                decode = stats.get("predicted_ms", 0) / 1000
                print(
                    f"   prompt {stats.get('prompt_n')} tokens in {prefill:.1f}s, "
                    f"answer {stats.get('predicted_n')} tokens in {decode:.1f}s"
                )
            print(f"A: {result.response}")
            print(
                f"   cited {result.cited} of {len(result.source_nodes)} sources; "
                + ", ".join(f"[{c.number}] {c.origin} {c.score:.2f}" for c in result.citations)
            )
        print(
            f"\nmedian end-to-end {statistics.median(totals):.1f}s over {len(totals)} questions "
            "(target <= 20 s)"
        )
        if cited:
            print(
                f"median cited answer {statistics.median(cited):.1f}s, {len(cited)} of "
                f"{len(totals)} answers cited (target <= 15 s)"
            )
        kb.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=3)
    parser.add_argument("--model", help="another GGUF file")
    warnings.filterwarnings("ignore")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
