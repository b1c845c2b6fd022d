"""Freeze the regression slice's inputs from `citeflow eval`'s caches (see README.md here).

Run after ``citeflow eval ../shared/data/scifact --retrievers none --calibrate
--calibration-claims 101 --citations 40``, ``citeflow eval ../shared/data/scifact --split train
--retrievers none --citations 400`` and the same with ``--half calibration --citations 436``, with
the default settings; takes the newest generation and calibration caches (or the directories
given) and rewrites the five JSONL files, then ``judge_verdicts.json``: the local judge's P(Yes)
for every citation the repair keeps in the frozen answers at the defaults (from the judge's cache:
run ``bench/citation_judge.py --train 400 --fresh 436`` first):

    .venv/bin/python tests/data/scifact_citations/freeze.py [--generations DIR] [--calibration DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import NoReturn

from citeflow.evaluation.citations import (
    compact_record,
    evidence_queries,
    expand_record,
    judged_queries,
    question_for,
    repair_policy,
    replay,
    split_of,
)
from citeflow.evaluation.dataset import load_beir
from citeflow.evaluation.judging import CachedJudge
from citeflow.providers.llm import describe_llm
from citeflow.settings import load_settings

HERE = Path(__file__).resolve().parent
SCIFACT = HERE.parents[2].parent / "shared" / "data" / "scifact"
CACHE = Path.home() / ".cache" / "citeflow" / "eval"


def newest(directory: Path) -> Path:
    return max(directory.glob("scifact-*"), key=lambda p: p.stat().st_mtime)


def write(name: str, rows: list[dict[str, object]]) -> None:
    lines = [json.dumps(r, ensure_ascii=False) for r in rows]
    (HERE / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{name}: {len(rows)} rows")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=Path, default=None)
    parser.add_argument("--calibration", type=Path, default=None)
    args = parser.parse_args()
    generations = args.generations or newest(CACHE / "citations")
    calibration = args.calibration or newest(CACHE / "calibration")
    dataset = load_beir(SCIFACT)
    known = json.loads((calibration / "sources.json").read_text(encoding="utf-8"))
    rows = []
    for qid in evidence_queries(dataset, "calibration"):
        question = question_for(dataset.queries[qid])
        record = {"query_id": qid, "question": question, "sources": known[question]}
        rows.append(compact_record(record, dataset))
    write("calibration_sources.jsonl", rows)
    by_id: dict[str, dict[str, object]] = {}
    for path in generations.glob("*.json"):
        if path.name == "config.json":
            continue
        record = json.loads(path.read_text(encoding="utf-8"))
        by_id[record["query_id"]] = record
    for name, split, count in (
        ("calibration_answers.jsonl", "calibration", None),  # all 101
        ("answers.jsonl", "evaluation", 40),
    ):
        ids = [q for q in evidence_queries(dataset, split) if q in by_id][:count]
        assert all(split_of(q) == split for q in ids)
        assert ids == evidence_queries(dataset, split)[:count], f"{name}: claims missing"
        write(name, [compact_record(by_id[q], dataset) for q in ids])
    train = load_beir(SCIFACT, split="train")
    for name, split in (
        ("train_answers.jsonl", "evaluation"),
        ("train_calibration_answers.jsonl", "calibration"),
    ):
        ids = [q for q in judged_queries(train, split) if q in by_id]
        assert ids == judged_queries(train, split)[: len(ids)], f"{name}: claims missing"
        write(name, [compact_record(by_id[q], train) for q in ids])
    print(f"from {generations} and {calibration}")
    freeze_verdicts()


def freeze_verdicts() -> None:
    """The judge's verdicts on the citations the frozen answers keep at the defaults."""
    settings = load_settings()
    policy = repair_policy(settings)

    def no_model() -> NoReturn:
        raise SystemExit("a citation is not judged yet: run bench/citation_judge.py first")

    cache = CachedJudge(CACHE / "judge", describe_llm(settings), no_model)
    verdicts: dict[str, float | None] = {}
    for name, split in (
        ("calibration_answers.jsonl", "test"),
        ("answers.jsonl", "test"),
        ("train_answers.jsonl", "train"),
        ("train_calibration_answers.jsonl", "train"),
    ):
        dataset = load_beir(SCIFACT, split=split)
        for line in (HERE / name).read_text(encoding="utf-8").splitlines():
            _, citations = replay(expand_record(json.loads(line), dataset), policy)
            for c in citations:
                key = cache.key(c.sentence, c.quote)
                if key not in cache.known:
                    no_model()
                verdicts[key] = cache.known[key]
    (HERE / "judge_verdicts.json").write_text(json.dumps(verdicts, indent=0, sort_keys=True))
    print(f"judge_verdicts.json: {len(verdicts)} verdicts")


if __name__ == "__main__":
    main()
