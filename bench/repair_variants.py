"""Would another repair rule make the local model's citations more precise? A replay, no model.

Takes the answers `citeflow eval` recorded (SciFact test claims with gold sentences, both halves;
SciFact train claims of the evaluation half and, when answered with ``--half calibration``, of
the calibration half, checked at document level) and the essay benchmark's recorded answers
(`tests/data/essay/answers.json`), and replays the repair under each variant:

- ``defaults``: today's repair (`repair_policy(load_settings())`);
- ``stop-12 defaults``: citation relevance 0.5 and score gap 0.04, the defaults before the
  calibration rules were applied to all 101 calibration answers;
- ``one threshold``: the model's own marker needs the full support threshold, as a moved or added
  one does (``RepairPolicy.keep_ratio`` 1.0 instead of 0.6);
- ``gap for the model's markers``: the model's own markers are also held to the score gap (a
  kept marker whose source the retriever scored more than ``CITEFLOW_CITATION_SCORE_GAP`` below
  the best source is dropped; the grader's keyword chunks are exempt, as for moves).

Prints, per set and variant: citations, the issue's precision, stance ok, doc precision, recall
and answers left uncited; for the essay, answers cited and citations correct.

    .venv/bin/python bench/repair_variants.py [--train 400] [--fresh 220]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from citeflow.citations.repair import Citation, RepairPolicy, move_targets  # noqa: E402
from citeflow.evaluation.citations import (  # noqa: E402
    GoldEvidence,
    SourceRecord,
    aggregate,
    repair_policy,
    replay,
    score_answer,
)
from citeflow.evaluation.dataset import BeirDataset  # noqa: E402
from citeflow.settings import load_settings  # noqa: E402
from essay_citations import QUESTIONS, dump_record, holds  # noqa: E402
from scifact_sets import KEYS, recorded_sets  # noqa: E402

ESSAY_ANSWERS = ROOT / "tests" / "data" / "essay" / "answers.json"

Replay = Callable[[Mapping[str, Any], RepairPolicy], tuple[str, list[Citation]]]


def stop12(record: Mapping[str, Any], policy: RepairPolicy) -> tuple[str, list[Citation]]:
    return replay(record, replace(policy, relevance=0.5, score_gap=0.04))


def one_threshold(record: Mapping[str, Any], policy: RepairPolicy) -> tuple[str, list[Citation]]:
    return replay(record, replace(policy, keep_ratio=1.0))


def gap_for_model(record: Mapping[str, Any], policy: RepairPolicy) -> tuple[str, list[Citation]]:
    """The defaults, then the model's own markers dropped unless their source is one the repair
    may move a marker to (`move_targets`: within the score gap, or a keyword chunk)."""
    answer, citations = replay(record, policy)
    scores = [s.get("score") for s in record["sources"]]
    near = move_targets(scores, policy.score_gap, len(scores), policy.keyword_below)
    return answer, [c for c in citations if c.origin != "model" or c.number in near]


VARIANTS: dict[str, Replay] = {
    "defaults": replay,
    "stop-12 defaults (0.5, gap 0.04)": stop12,
    "one threshold (keep 1.0)": one_threshold,
    "gap for the model's markers": gap_for_model,
}


def scifact_row(
    dataset: BeirDataset, records: dict[str, dict[str, Any]], policy: RepairPolicy, variant: Replay
) -> dict[str, float]:
    gold = GoldEvidence(dataset)
    rows = []
    for qid, record in records.items():
        answer, citations = variant(record, policy)
        sources = [SourceRecord(str(s["doc_id"]), str(s["text"])) for s in record["sources"]]
        rows.append(score_answer(gold, qid, sources, answer, citations))
    return aggregate(rows)


def essay_row(policy: RepairPolicy, variant: Replay) -> tuple[int, int, int]:
    """Answers cited, citations, citations whose source holds the answer."""
    gold = {q.text: q.gold for q in QUESTIONS}
    cited = citations = correct = 0
    for item in json.loads(ESSAY_ANSWERS.read_text(encoding="utf-8")):
        _, found = variant(dump_record(item), policy)
        numbers = list(dict.fromkeys(c.number for c in found))
        cited += bool(numbers)
        citations += len(numbers)
        correct += sum(holds(item["sources"][n - 1], gold[item["question"]]) for n in numbers)
    return cited, citations, correct


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=400, help="train claims, evaluation half")
    parser.add_argument(
        "--fresh", type=int, default=0, help="train claims, calibration half (0: none)"
    )
    args = parser.parse_args()
    settings = load_settings()
    policy = repair_policy(settings)
    sets = recorded_sets(settings, train=args.train, fresh=args.fresh)
    print(f"repair {policy}")
    print(f"{'set':40} {'variant':34} " + " ".join(f"{k[:12]:>12}" for k in KEYS))
    for name, (dataset, records) in sets.items():
        for label, variant in VARIANTS.items():
            m = scifact_row(dataset, records, policy, variant)
            print(f"{name:40} {label:34} " + " ".join(f"{m[k]:>12.3f}" for k in KEYS))
    for label, variant in VARIANTS.items():
        cited, citations, correct = essay_row(policy, variant)
        print(
            f"{'essay, 12 recorded answers':40} {label:34} "
            f"cited {cited}/12, correct {correct}/{citations}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
