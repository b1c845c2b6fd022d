"""A loaded BEIR dataset and its records: corpus documents and gold evidence."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["BeirDataset", "CorpusDocument", "Evidence"]


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
        return [
            (ev.doc_id, ev.label, [self.sentences.get(ev.doc_id, [])[i] for i in ev.sentences])
            for ev in self.evidence.get(query_id, [])
        ]

    def corpus_digest(self) -> str:
        """sha256 of the sorted document ids (identifies a corpus slice)."""
        ids = b"".join(doc_id.encode() + b"\0" for doc_id in sorted(self.corpus))
        return hashlib.sha256(ids).hexdigest()

    def summary(self) -> str:
        """One line for people, e.g. ``scifact/test: 300 queries, 339 judgements, 5183 docs``."""
        sliced = "" if self.full_corpus else " (corpus slice)"
        return (
            f"{self.name}/{self.split}: {len(self.queries)} queries, {self.judgements} judgements, "
            f"{len(self.corpus)} documents{sliced}"
            + (f", evidence for {len(self.evidence)} queries" if self.evidence else "")
        )
