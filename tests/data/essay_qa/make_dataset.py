"""Writes this folder: the essay's twelve questions as a BEIR-format dataset for `citeflow eval`.

The corpus is the essay's paragraphs (``data/paul_graham_essay.txt`` split at blank lines); a
paragraph is relevant to a question when it holds one of the question's ``gold`` words
(``questions.json``). Run from the repository root: ``python tests/data/essay_qa/make_dataset.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
ESSAY = HERE.parents[2] / "data" / "paul_graham_essay.txt"


def main() -> None:
    paragraphs = [" ".join(p.split()) for p in ESSAY.read_text(encoding="utf-8").split("\n\n")]
    paragraphs = [p for p in paragraphs if p]
    questions = json.loads((HERE / "questions.json").read_text(encoding="utf-8"))
    out = HERE
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as corpus:
        for i, text in enumerate(paragraphs):
            doc = {"_id": f"p{i:03d}", "title": "What I Worked On", "text": text}
            corpus.write(json.dumps(doc) + "\n")
    with (
        (out / "queries.jsonl").open("w", encoding="utf-8") as queries,
        (out / "qrels" / "test.tsv").open("w", encoding="utf-8") as qrels,
    ):
        qrels.write("query-id\tcorpus-id\tscore\n")
        for n, item in enumerate(questions, start=1):
            qid = f"q{n:02d}"
            queries.write(json.dumps({"_id": qid, "text": item["question"]}) + "\n")
            hits = [i for i, p in enumerate(paragraphs) if any(g in p for g in item["gold"])]
            if not hits:
                raise SystemExit(f"no paragraph holds the gold words of {item['question']!r}")
            for i in hits:
                qrels.write(f"{qid}\tp{i:03d}\t1\n")


if __name__ == "__main__":
    main()
