"""Choose the citation check's thresholds on one dataset, report them on the others.

    .venv/bin/python bench/citation_settings.py ../shared/data/hotpotqa ../shared/data/pubmedqa \\
        ../shared/data/scifact tests/data/essay_qa [--answers 40]

Reads the answers `citeflow eval DATASET --retrievers none --answers N` recorded for the current
settings (run it first for each dataset; nothing is generated here), re-checks the model's
recorded text under each (keep, add, relative) setting of the grid, and prints each dataset's
figures. The setting is chosen on the FIRST dataset only, by one rule fixed in advance: the
highest min(answers cited, document precision), ties to the higher precision, then to the
stricter setting (higher add, keep, relative); the chosen setting and the defaults are then
printed on every dataset side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from contextlib import ExitStack
from pathlib import Path

from citeflow.evaluation.answers import AnswerCache, generation_facts, recheck_all
from citeflow.evaluation.dataset import BeirDataset, load_beir
from citeflow.evaluation.dense import default_cache_dir
from citeflow.evaluation.runner import EvalContext, index_key_of
from citeflow.evaluation.scoring import DatasetScore, score_all, table
from citeflow.providers.llm import describe_llm
from citeflow.settings import Settings, load_settings
from citeflow.workflows.citation_query import QueryOptions

KEEP = (0.1, 0.2, 0.35, 0.5)
ADD = (0.35, 0.45, 0.55, 0.65)
RELATIVE = (0.0, 0.5, 0.8)


def recorded(dataset: BeirDataset, settings: Settings, count: int) -> dict[str, dict[str, object]]:
    """The answers recorded for the first ``count`` questions under ``settings``."""
    with ExitStack() as stack:
        context = EvalContext(settings=settings, cache_dir=default_cache_dir(), stack=stack)
        facts = generation_facts(
            settings, index_key=index_key_of(dataset, context), llm=describe_llm(settings)
        )
    cache = AnswerCache.under(default_cache_dir() / "answers", dataset.name, facts)
    from citeflow.evaluation.answers import question_of

    out = {}
    for qid in list(dataset.queries)[:count]:
        record = cache.get(qid, question_of(dataset.queries[qid]))
        if record is not None:
            out[qid] = record
    return out


def rule(score: DatasetScore) -> tuple[float, float]:
    f = score.figures()
    cited, precision = float(f["cited"] or 0.0), float(f["doc_precision"] or 0.0)
    return min(cited, precision), precision


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--answers", type=int, default=40)
    args = parser.parse_args()
    settings = load_settings()
    defaults = QueryOptions.from_settings(settings).citation_policy()
    sets = []
    for path in args.datasets:
        dataset = load_beir(path)
        records = recorded(dataset, settings, args.answers)
        if not records:
            print(f"{dataset.name}: no recorded answers; run citeflow eval first", file=sys.stderr)
            return 1
        sets.append((dataset, records))
    grid = [(k, a, r) for k in KEEP for a in ADD for r in RELATIVE if a >= k]
    first, first_records = sets[0]
    scores = {
        pair: score_all(
            asyncio.run(
                recheck_all(
                    first_records, defaults.with_(keep=pair[0], add=pair[1], relative=pair[2])
                )
            ),
            first,
        )
        for pair in grid
    }
    print(
        table(
            f"{first.name}: the grid ({len(first_records)} answers)",
            {f"keep {k} add {a} relative {r}": s for (k, a, r), s in scores.items()},
        )
    )
    default_pair = (defaults.keep, defaults.add, defaults.relative)
    chosen = max(grid, key=lambda p: (*rule(scores[p]), p[1], p[0], p[2]))
    print(f"chosen on {first.name}: keep {chosen[0]}, add {chosen[1]}, relative {chosen[2]}")
    rows: dict[str, DatasetScore] = {}
    for dataset, records in sets:
        rows[f"{dataset.name}: model's markers"] = score_all(records.values(), dataset, raw=True)
        for name, (keep, add, rel) in (("defaults", default_pair), ("chosen", chosen)):
            policy = defaults.with_(keep=keep, add=add, relative=rel)
            checked = asyncio.run(recheck_all(records, policy))
            rows[f"{dataset.name}: {name} ({keep}/{add}/{rel})"] = score_all(checked, dataset)
    print(table("every dataset", rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
