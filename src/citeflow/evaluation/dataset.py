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

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from citeflow.errors import InvalidRequestError

__all__ = [
    "BeirDataset",
    "CorpusDocument",
    "DatasetError",
    "Evidence",
    "load_beir",
]


class DatasetError(InvalidRequestError):
    """An evaluation dataset is missing a file or holds a bad line.

    ``file`` is the offending file (relative to the dataset folder when inside it) and ``line``
    its 1-based line number, or 0 when the problem is the file as a whole.
    """

    def __init__(self, file: Path | str, line: int, problem: str) -> None:
        where = f"{file} line {line}" if line else str(file)
        super().__init__(f"{where}: {problem}")
        self.file = str(file)
        self.line = line
        self.problem = problem


@dataclass(frozen=True, slots=True)
class CorpusDocument:
    """One document of the corpus."""

    id: str
    title: str
    text: str


@dataclass(frozen=True, slots=True)
class Evidence:
    """One gold rationale: sentences of ``doc_id`` that support or contradict the claim.

    ``sentences`` index ``BeirDataset.sentences[doc_id]``; `BeirDataset.evidence_texts` turns
    them into text.
    """

    doc_id: str
    label: str
    sentences: tuple[int, ...]


@dataclass(frozen=True)
class BeirDataset:
    """A loaded dataset, restricted to one split's queries (and, optionally, a corpus slice)."""

    path: Path
    split: str
    corpus: dict[str, CorpusDocument]
    queries: dict[str, str]
    """Query id → text, for the split's judged queries, in qrels order."""
    qrels: dict[str, dict[str, int]]
    """Query id → {document id → graded relevance}; grades ≤ 0 are judged non-relevant."""
    evidence: dict[str, list[Evidence]] = field(default_factory=dict)
    """Query id → gold rationales (only queries that have some)."""
    sentences: dict[str, list[str]] = field(default_factory=dict)
    """Document id → its sentences (only with evidence); ``" ".join`` gives the text."""
    answers: dict[str, Any] = field(default_factory=dict)
    """Query id → gold answer from ``answers.json`` when present: a list of answer strings
    (HotpotQA) or ``{"decision": "yes" | "no" | "maybe", ...}`` (PubMedQA)."""
    corpus_file: Path | None = None
    """The corpus file read (its content keys the embedding cache)."""
    full_corpus: bool = True
    """False when a ``corpus_limit`` dropped documents (scores are then not comparable)."""

    @property
    def name(self) -> str:
        """The folder's name, e.g. ``scifact``."""
        return self.path.name

    @property
    def judgements(self) -> int:
        """Number of (query, document) pairs judged."""
        return sum(len(docs) for docs in self.qrels.values())

    def relevant(self, query_id: str) -> set[str]:
        """Documents judged relevant (grade > 0) to a query."""
        return {doc for doc, grade in self.qrels.get(query_id, {}).items() if grade > 0}

    def evidence_texts(self, query_id: str) -> list[tuple[str, str, list[str]]]:
        """A query's gold rationales as ``(doc_id, label, [sentence text, ...])``."""
        out: list[tuple[str, str, list[str]]] = []
        for ev in self.evidence.get(query_id, []):
            sents = self.sentences.get(ev.doc_id, [])
            out.append((ev.doc_id, ev.label, [sents[i] for i in ev.sentences]))
        return out

    def corpus_digest(self) -> str:
        """sha256 of the sorted document ids (identifies a corpus slice)."""
        digest = hashlib.sha256()
        for doc_id in sorted(self.corpus):
            digest.update(doc_id.encode())
            digest.update(b"\0")
        return digest.hexdigest()

    def summary(self) -> str:
        """One line for people, e.g. ``scifact/test: 300 queries, 339 judgements, 5183 docs``."""
        sliced = "" if self.full_corpus else " (corpus slice)"
        return (
            f"{self.name}/{self.split}: {len(self.queries)} queries, {self.judgements} judgements, "
            f"{len(self.corpus)} documents{sliced}"
            + (f", evidence for {len(self.evidence)} queries" if self.evidence else "")
        )


# --- reading -----------------------------------------------------------------------------------
def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _require_file(path: Path, root: Path, hint: str = "") -> None:
    if not path.is_file():
        raise DatasetError(_rel(path, root), 0, "not found" + (f" ({hint})" if hint else ""))


def _jsonl(path: Path, root: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; a bad line is a `DatasetError`."""
    name = _rel(path, root)
    try:
        fh = path.open(encoding="utf-8")
    except OSError as exc:
        raise DatasetError(name, 0, f"cannot read ({exc.strerror})") from None
    with fh:
        try:
            for number, raw in enumerate(fh, start=1):
                if not raw.strip():
                    continue
                try:
                    obj = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise DatasetError(name, number, f"invalid JSON ({exc.msg})") from None
                if not isinstance(obj, dict):
                    raise DatasetError(
                        name, number, f"expected a JSON object, got {type(obj).__name__}"
                    )
                yield number, obj
        except UnicodeDecodeError as exc:
            raise DatasetError(name, 0, f"not UTF-8 text ({exc.reason})") from None


def _field_id(obj: Mapping[str, Any], key: str, name: str, number: int) -> str:
    if key not in obj:
        raise DatasetError(name, number, f"missing field {key!r}")
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise DatasetError(name, number, f"field {key!r} must be a string")
    text = str(value).strip()
    if not text:
        raise DatasetError(name, number, f"field {key!r} is empty")
    return text


def _field_text(obj: Mapping[str, Any], key: str, name: str, number: int, *, required: bool) -> str:
    if key not in obj or obj[key] is None:
        if required:
            raise DatasetError(name, number, f"missing field {key!r}")
        return ""
    value = obj[key]
    if not isinstance(value, str):
        raise DatasetError(name, number, f"field {key!r} must be a string")
    return value


def _read_corpus(path: Path, root: Path) -> dict[str, CorpusDocument]:
    name = _rel(path, root)
    corpus: dict[str, CorpusDocument] = {}
    lines: dict[str, int] = {}
    for number, obj in _jsonl(path, root):
        doc_id = _field_id(obj, "_id", name, number)
        text = _field_text(obj, "text", name, number, required=True)
        title = _field_text(obj, "title", name, number, required=False)
        if doc_id in lines:
            raise DatasetError(
                name, number, f"duplicate _id {doc_id!r} (first on line {lines[doc_id]})"
            )
        if not text.strip() and not title.strip():
            raise DatasetError(name, number, f"document {doc_id!r} has no title and no text")
        lines[doc_id] = number
        corpus[doc_id] = CorpusDocument(doc_id, title, text)
    if not corpus:
        raise DatasetError(name, 0, "holds no documents")
    return corpus


def _read_queries(path: Path, root: Path) -> tuple[dict[str, str], dict[str, int]]:
    """Query id → text, and query id → line number (to point at an empty query later)."""
    name = _rel(path, root)
    queries: dict[str, str] = {}
    lines: dict[str, int] = {}
    for number, obj in _jsonl(path, root):
        query_id = _field_id(obj, "_id", name, number)
        text = _field_text(obj, "text", name, number, required=True)
        if query_id in lines:
            raise DatasetError(
                name, number, f"duplicate _id {query_id!r} (first on line {lines[query_id]})"
            )
        lines[query_id] = number
        queries[query_id] = text
    return queries, lines


def _read_qrels(
    path: Path,
    root: Path,
    queries: Mapping[str, str],
    corpus: Mapping[str, CorpusDocument],
) -> dict[str, dict[str, int]]:
    name = _rel(path, root)
    qrels: dict[str, dict[str, int]] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DatasetError(name, 0, f"cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise DatasetError(name, 0, f"not UTF-8 text ({exc.reason})") from None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        fields = line.split("\t") if "\t" in line else line.split()
        fields = [f.strip() for f in fields]
        if number == 1 and (len(fields) != 3 or not _is_int(fields[2])):
            continue  # the header: query-id  corpus-id  score
        if len(fields) != 3:
            raise DatasetError(
                name,
                number,
                f"expected 3 tab-separated fields (query-id corpus-id score), got {len(fields)}",
            )
        query_id, doc_id, score = fields
        if not _is_int(score):
            raise DatasetError(name, number, f"score {score!r} is not an integer")
        if query_id not in queries:
            raise DatasetError(name, number, f"query id {query_id!r} is not in queries.jsonl")
        if doc_id not in corpus:
            raise DatasetError(name, number, f"corpus id {doc_id!r} is not in corpus.jsonl")
        judged = qrels.setdefault(query_id, {})
        if doc_id in judged and judged[doc_id] != int(score):
            raise DatasetError(
                name, number, f"({query_id}, {doc_id}) judged twice with different scores"
            )
        judged[doc_id] = int(score)
    if not qrels:
        raise DatasetError(name, 0, "holds no judgements")
    return qrels


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _read_answers(path: Path, root: Path, wanted: set[str]) -> dict[str, Any]:
    """The gold answers of the split's queries (an optional ``answers.json``: query id → answer)."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DatasetError(_rel(path, root), 0, f"not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise DatasetError(_rel(path, root), 0, "expected an object: query id -> answer")
    return {str(k): v for k, v in data.items() if str(k) in wanted}


def _read_sentences(path: Path, root: Path, wanted: set[str]) -> dict[str, list[str]]:
    name = _rel(path, root)
    sentences: dict[str, list[str]] = {}
    for number, obj in _jsonl(path, root):
        doc_id = _field_id(obj, "_id", name, number)
        if doc_id not in wanted:
            continue
        value = obj.get("sentences")
        if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
            raise DatasetError(name, number, "field 'sentences' must be a list of strings")
        sentences[doc_id] = list(value)
    return sentences


def _read_evidence(
    path: Path,
    root: Path,
    known_queries: Mapping[str, str],
    keep: Mapping[str, str],
) -> tuple[dict[str, list[tuple[int, Evidence]]], set[str]]:
    """Rationales of the kept queries (with their line numbers) and the documents they cite."""
    name = _rel(path, root)
    evidence: dict[str, list[tuple[int, Evidence]]] = {}
    docs: set[str] = set()
    for number, obj in _jsonl(path, root):
        query_id = _field_id(obj, "_id", name, number)
        if query_id not in known_queries:
            raise DatasetError(name, number, f"query id {query_id!r} is not in queries.jsonl")
        items = obj.get("evidence")
        if not isinstance(items, list):
            raise DatasetError(name, number, "missing field 'evidence' (a list)")
        if query_id not in keep:
            continue
        for item in items:
            if not isinstance(item, dict):
                raise DatasetError(name, number, "each evidence item must be an object")
            doc_id = _field_id(item, "doc_id", name, number)
            label = _field_text(item, "label", name, number, required=False)
            indices = item.get("sentences")
            if not isinstance(indices, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indices
            ):
                raise DatasetError(
                    name, number, "evidence 'sentences' must be a list of sentence indices"
                )
            evidence.setdefault(query_id, []).append(
                (number, Evidence(doc_id, label, tuple(indices)))
            )
            docs.add(doc_id)
    return evidence, docs


# --- the loader --------------------------------------------------------------------------------
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
    if limit is not None and limit < 1:
        raise InvalidRequestError(f"limit must be at least 1, got {limit}")
    if corpus_limit is not None and corpus_limit < 1:
        raise InvalidRequestError(f"corpus_limit must be at least 1, got {corpus_limit}")
    corpus_path = root / "corpus.jsonl"
    queries_path = root / "queries.jsonl"
    qrels_path = root / "qrels" / f"{split}.tsv"
    _require_file(corpus_path, root)
    _require_file(queries_path, root)
    splits = sorted(p.stem for p in (root / "qrels").glob("*.tsv"))
    _require_file(
        qrels_path, root, f"splits here: {', '.join(splits)}" if splits else "no qrels/*.tsv"
    )

    corpus = _read_corpus(corpus_path, root)
    all_queries, query_lines = _read_queries(queries_path, root)
    qrels = _read_qrels(qrels_path, root, all_queries, corpus)
    if limit is not None:
        qrels = dict(list(qrels.items())[:limit])
    queries: dict[str, str] = {}
    for query_id in qrels:
        text = all_queries[query_id]
        if not text.strip():
            raise DatasetError(
                _rel(queries_path, root), query_lines[query_id], f"query {query_id!r} has no text"
            )
        queries[query_id] = text

    full = True
    if corpus_limit is not None and corpus_limit < len(corpus):
        judged = {doc for docs in qrels.values() for doc in docs}
        keep = set(judged)
        for doc_id in corpus:
            if len(keep) >= corpus_limit:
                break
            keep.add(doc_id)
        corpus = {doc_id: doc for doc_id, doc in corpus.items() if doc_id in keep}
        full = False

    gold: dict[str, list[Evidence]] = {}
    sentences: dict[str, list[str]] = {}
    evidence_path = root / f"evidence_{split}.jsonl"
    if evidence and evidence_path.is_file():
        sentences_path = root / "corpus_sentences.jsonl"
        _require_file(sentences_path, root, f"the sentence indices of {evidence_path.name}")
        found, cited = _read_evidence(evidence_path, root, all_queries, queries)
        sentences = _read_sentences(sentences_path, root, cited | set(corpus))
        name = _rel(evidence_path, root)
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
        answers=_read_answers(root / "answers.json", root, set(queries)),
        corpus_file=corpus_path.resolve(),
        full_corpus=full,
    )
