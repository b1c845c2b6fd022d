"""How much document precision any check that keeps supported citations could reach.

    .venv/bin/python bench/citation_ceiling.py ../shared/data/hotpotqa ../shared/data/pubmedqa \\
        ../shared/data/scifact tests/data/essay_qa [--answers 80]

Reads the answers `citeflow eval DATASET --retrievers none --answers N` recorded for the current
settings (the LLM is not called), re-checks them, and for every citation left asks whether some
relevant source of its answer supports its sentence at all: word support of the best relevant
source at least ``add`` or at least ``keep`` (the check's own thresholds). A citation whose
sentence no relevant source supports can only be wrong (a retrieval miss, or a sentence the model
took from an irrelevant source), so the share that has one bounds what re-checking can reach.
"""

from __future__ import annotations

import argparse
import asyncio
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from citeflow.citations.markers import strip_markers
from citeflow.citations.repair import CitationPolicy
from citeflow.citations.text import statement_of
from citeflow.evaluation.answers import answer_cache, question_of, recheck
from citeflow.evaluation.dataset import BeirDataset, load_beir
from citeflow.evaluation.dense import default_cache_dir
from citeflow.evaluation.runner import EvalContext
from citeflow.providers.llm import describe_llm
from citeflow.settings import load_settings


async def ceiling(
    dataset: BeirDataset, records: list[dict[str, Any]], policy: CitationPolicy
) -> str:
    cited = right = at_add = at_keep = 0
    for record in records:
        relevant = dataset.relevant(record["query_id"])
        docs = [source["doc_id"] for source in record["sources"]]
        verifier = policy.verifier(
            [source["text"] for source in record["sources"]], record["question"]
        )
        for citation in (await recheck(record, policy))["citations"]:
            ranking = await verifier.rank(statement_of(strip_markers(citation["sentence"])), [])
            best = max((s.score for s in ranking if docs[s.number - 1] in relevant), default=0.0)
            cited += 1
            right += docs[citation["number"] - 1] in relevant
            at_add += best >= verifier.add - 1e-9
            at_keep += best >= verifier.keep - 1e-9
    shares = [f"{n / max(cited, 1):.3f}" for n in (right, at_add, at_keep)]
    add, keep = shares[1:]
    return f"{dataset.name:<10} {len(records):>7} {cited:>9} {shares[0]:>6} {add:>16} {keep:>17}"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--answers", type=int, default=80)
    args = parser.parse_args()
    settings = load_settings()
    policy = CitationPolicy(settings.citations)
    print("set        answers citations  right  relevant >= add  relevant >= keep")
    with ExitStack() as stack:
        for path in args.datasets:
            dataset = load_beir(path)
            context = EvalContext(
                settings=settings, cache_dir=default_cache_dir(), stack=stack, progress=False
            )
            cache = answer_cache(dataset, context, describe_llm(settings))
            ids = list(dataset.queries)[: args.answers]
            found = [cache.get(qid, question_of(dataset.queries[qid])) for qid in ids]
            records = [r for r in found if r is not None and isinstance(r.get("sources"), list)]
            print(asyncio.run(ceiling(dataset, records, policy)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
