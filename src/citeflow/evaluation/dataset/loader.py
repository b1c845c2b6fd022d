"""`load_beir`: load a BEIR dataset folder, restricted to one split (and optional slices)."""

from __future__ import annotations

from pathlib import Path

from citeflow.errors import InvalidRequestError
from citeflow.evaluation.dataset.files import (
    DatasetError,
    read_answers,
    read_corpus,
    read_evidence,
    read_qrels,
    read_queries,
    read_sentences,
    relative_name,
    require_file,
)
from citeflow.evaluation.dataset.records import BeirDataset, Evidence

__all__ = ["load_beir"]


def load_beir(
    path: str | Path,
    *,
    split: str = "test",
    limit: int | None = None,
    corpus_limit: int | None = None,
    evidence: bool = True,
) -> BeirDataset:
    """Load and check a BEIR-format dataset folder.

    Args:
        path: the folder holding ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/``.
        split: which ``qrels/<split>.tsv`` (and ``evidence_<split>.jsonl``) to read.
        limit: keep only the first ``limit`` judged queries (in qrels order), with all of their
            judgements: a fast slice whose scores estimate the full split's.
        corpus_limit: keep only this many documents: every document judged for the kept
            queries, then the first others in corpus order (for smoke tests; scores on a corpus
            slice are higher than on the full corpus and not comparable with published ones).
        evidence: read ``evidence_<split>.jsonl`` and ``corpus_sentences.jsonl`` when present.

    Raises:
        DatasetError: a file is missing or a line is bad; the message names the file and line.
    """
    root = Path(path).expanduser()
    if not root.is_dir():
        raise DatasetError(
            root,
            0,
            "not a dataset folder (expected corpus.jsonl, queries.jsonl "
            "and qrels/<split>.tsv in it)",
        )
    for option, value in (("limit", limit), ("corpus_limit", corpus_limit)):
        if value is not None and value < 1:
            raise InvalidRequestError(f"{option} must be at least 1, got {value}")
    corpus_path = root / "corpus.jsonl"
    queries_path = root / "queries.jsonl"
    qrels_path = root / "qrels" / f"{split}.tsv"
    require_file(corpus_path, root)
    require_file(queries_path, root)
    splits = sorted(p.stem for p in (root / "qrels").glob("*.tsv"))
    require_file(
        qrels_path, root, f"splits here: {', '.join(splits)}" if splits else "no qrels/*.tsv"
    )

    corpus = read_corpus(corpus_path, root)
    all_queries, query_lines = read_queries(queries_path, root)
    qrels = read_qrels(qrels_path, root, all_queries, corpus)
    if limit is not None:
        qrels = dict(list(qrels.items())[:limit])
    queries: dict[str, str] = {}
    for query_id in qrels:
        text = all_queries[query_id]
        if not text.strip():
            raise DatasetError(
                relative_name(queries_path, root),
                query_lines[query_id],
                f"query {query_id!r} has no text",
            )
        queries[query_id] = text

    full = corpus_limit is None or corpus_limit >= len(corpus)
    if corpus_limit is not None and not full:
        keep = {doc for docs in qrels.values() for doc in docs}
        for doc_id in corpus:
            if len(keep) >= corpus_limit:
                break
            keep.add(doc_id)
        corpus = {doc_id: doc for doc_id, doc in corpus.items() if doc_id in keep}

    gold: dict[str, list[Evidence]] = {}
    sentences: dict[str, list[str]] = {}
    evidence_path = root / f"evidence_{split}.jsonl"
    if evidence and evidence_path.is_file():
        sentences_path = root / "corpus_sentences.jsonl"
        require_file(sentences_path, root, f"the sentence indices of {evidence_path.name}")
        found, cited = read_evidence(evidence_path, root, all_queries, queries)
        sentences = read_sentences(sentences_path, root, cited | set(corpus))
        name = relative_name(evidence_path, root)
        for query_id, items in found.items():
            for number, ev in items:
                if ev.doc_id not in sentences:
                    raise DatasetError(
                        name, number, f"doc_id {ev.doc_id!r} is not in corpus_sentences.jsonl"
                    )
                count = len(sentences[ev.doc_id])
                bad = [i for i in ev.sentences if i >= count]
                if bad:
                    raise DatasetError(
                        name,
                        number,
                        f"sentence index {bad[0]} out of range for document "
                        f"{ev.doc_id!r} ({count} sentences)",
                    )
                gold.setdefault(query_id, []).append(ev)

    return BeirDataset(
        path=root.resolve(),
        split=split,
        corpus=corpus,
        queries=queries,
        qrels=qrels,
        evidence=gold,
        sentences=sentences,
        answers=read_answers(root / "answers.json", root, set(queries)),
        corpus_file=corpus_path.resolve(),
        full_corpus=full,
    )
