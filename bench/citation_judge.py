"""Would an LLM judge of each citation make the local model's citations trustworthy?

Takes the answers `citeflow eval` recorded for SciFact (all 188 test claims with gold sentences,
and the train claims answered with ``--split train --citations N``: run those first, this script
generates nothing), replays citeflow's repair at the current settings, and asks the local model
(`citeflow.citations.judge.LLMJudge`) whether each kept citation's quote supports its sentence.
A citation stays when ``P(Yes)`` reaches the cut (or the judge said neither Yes nor No), as the
workflow's judge step decides (`JudgeCheck`, replayed by `areplay`). Prints, per set and cut:
citations, the issue's precision, stance ok, doc precision, recall and answers left uncited. Test
claims are checked at sentence level, train claims at document level (they have no gold
sentences). The judge's answers are cached (``<eval cache>/judge/``), so a re-run costs seconds.

With ``--rescue`` the judge is tried the other way: the model's own markers that the repair
dropped (the first of each sentence left uncited, with the quote the word support picks in the
source it names) are put back when the judge's P(Yes) reaches the cut.

    .venv/bin/python bench/citation_judge.py [--train 160] [--fresh 0] [--cuts 0,0.5,0.7,0.8,0.9]
        [--rescue]

``--fresh N`` adds the first N train claims of the calibration half (answered with ``citeflow
eval ../shared/data/scifact --split train --retrievers none --half calibration --citations N``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from citeflow.citations.judge import JudgeCheck  # noqa: E402
from citeflow.citations.repair import Citation, RepairPolicy  # noqa: E402
from citeflow.evaluation.citations import (  # noqa: E402
    GoldEvidence,
    SourceRecord,
    aggregate,
    areplay,
    model_citations,
    repair_policy,
    replay,
    score_answer,
)
from citeflow.evaluation.dense import default_cache_dir  # noqa: E402
from citeflow.evaluation.judging import CachedJudge, settings_judge  # noqa: E402
from citeflow.providers.llm import describe_llm  # noqa: E402
from citeflow.settings import load_settings  # noqa: E402
from scifact_sets import KEYS, recorded_sets  # noqa: E402


async def judge_all(cache: CachedJudge, pairs: list[tuple[str, str]]) -> tuple[int, float]:
    """Ask the judge about every pair its cache does not hold; how many, and how long."""
    started = time.perf_counter()
    for sentence, quote in pairs:
        await cache.support(sentence, quote)
        if cache.asked and cache.asked % 10 == 0:
            print(f"  judged {cache.asked}", file=sys.stderr, flush=True)
    return cache.asked, time.perf_counter() - started


async def judged_replays(
    records: dict[str, dict[str, Any]], policy: RepairPolicy, check: JudgeCheck | None
) -> dict[str, tuple[str, list[Citation]]]:
    """Each record replayed as the workflow answers with the judge at ``check``'s cut."""
    return {q: await areplay(r, policy, check) for q, r in records.items()}


def dropped_markers(record: dict[str, Any], kept: list[Citation]) -> list[Citation]:
    """The model's first own marker of each sentence the repair left uncited."""
    cited = {c.sentence for c in kept}
    out: list[Citation] = []
    for citation in model_citations(record):
        if citation.quote and citation.sentence not in cited:
            cited.add(citation.sentence)
            out.append(citation)
    return out


def rescued(cache: CachedJudge, candidates: list[Citation], cut: float) -> list[Citation]:
    """The dropped markers the judge would put back at ``cut`` (none at 0)."""
    if cut <= 0:
        return []
    return [
        c for c in candidates if (cache.known.get(cache.key(c.sentence, c.quote)) or 0.0) >= cut
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=160, help="train claims (evaluation half)")
    parser.add_argument(
        "--fresh", type=int, default=0, help="train claims, calibration half (0: none)"
    )
    parser.add_argument("--cuts", default="0,0.5,0.7,0.8,0.9")
    parser.add_argument("--rescue", action="store_true", help="judge the dropped markers instead")
    args = parser.parse_args()
    cuts = [float(c) for c in args.cuts.split(",")]
    settings = load_settings()
    policy = repair_policy(settings)
    sets = recorded_sets(settings, train=args.train, fresh=args.fresh)
    replayed = {
        name: {q: replay(r, policy) for q, r in records.items()}
        for name, (_, records) in sets.items()
    }
    dropped: dict[str, dict[str, list[Citation]]] = {
        name: {q: dropped_markers(r, replayed[name][q][1]) for q, r in records.items()}
        for name, (_, records) in sets.items()
    }
    judged = (
        dropped
        if args.rescue
        else {name: {q: a[1] for q, a in answers.items()} for name, answers in replayed.items()}
    )
    pairs = sorted(
        {
            (c.sentence, c.quote)
            for answers in judged.values()
            for cs in answers.values()
            for c in cs
        }
    )
    # the cache answers the replays below; the model, if it had to be loaded, is closed
    with settings_judge(settings, default_cache_dir() / "judge") as cache:
        asked, seconds = asyncio.run(judge_all(cache, pairs))
    print(
        f"{len(pairs)} citations judged ({asked} asked now, "
        f"{seconds / asked if asked else 0.0:.2f} s each), {describe_llm(settings)}; "
        f"repair {policy}"
    )
    print(f"{'set':38} {'cut':>4} " + " ".join(f"{k[:12]:>12}" for k in KEYS))
    for name, (dataset, records) in sets.items():
        gold = GoldEvidence(dataset)
        for cut in cuts:
            if args.rescue:
                answers = {
                    qid: (answer, citations + (rescued(cache, dropped[name][qid], cut)))
                    for qid, (answer, citations) in replayed[name].items()
                }
            else:  # the workflow's own judge step, answered from the cache
                check = JudgeCheck(cache, cut=cut) if cut > 0 else None
                answers = asyncio.run(judged_replays(records, policy, check))
            rows = []
            for qid, (answer, kept) in answers.items():
                sources = [
                    SourceRecord(str(s["doc_id"]), str(s["text"])) for s in records[qid]["sources"]
                ]
                rows.append(score_answer(gold, qid, sources, answer, kept))
            m = aggregate(rows)
            print(f"{name:38} {cut:>4.2f} " + " ".join(f"{m[k]:>12.3f}" for k in KEYS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
