"""BEIR-format evaluation datasets: corpus, queries, graded relevance judgements, gold evidence.

A dataset folder holds::

    corpus.jsonl                  {"_id", "title", "text"}       one document per line
    queries.jsonl                 {"_id", "text"}                one query per line
    qrels/<split>.tsv             query-id  corpus-id  score     tab-separated, header line
    evidence_<split>.jsonl        optional (SciFact): {"_id", "evidence": [{"doc_id", "label",
                                  "sentences": [i, ...]}]}; sentence indices refer to
    corpus_sentences.jsonl        {"_id", "sentences": [...]}    (needed with evidence)

`load_beir` reads and checks all of it; every problem is one `DatasetError` naming the file and
the line. Only the queries of the split (those judged in its qrels) are kept.
"""

from citeflow.evaluation.dataset.files import DatasetError
from citeflow.evaluation.dataset.loader import load_beir
from citeflow.evaluation.dataset.records import BeirDataset, CorpusDocument, Evidence

__all__ = [
    "BeirDataset",
    "CorpusDocument",
    "DatasetError",
    "Evidence",
    "load_beir",
]
