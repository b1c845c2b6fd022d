"""Citation evaluation against gold evidence, and calibration of the support threshold.

SciFact gives, for some claims, the *rationale sentences* of the abstracts that support or
contradict them (`BeirDataset.evidence`). Both parts of this module score citeflow's citations at
that sentence level:

* `calibrate`: for each claim of the *calibration* half, the sources the workflow would build for
  its question (round one: retrieve, score grader, `make_sources`), each scored against the claim
  by the scorer the repair uses (`LexicalSupport`): a (claim, source) pair is *correct* when the
  source's document is relevant and the quote chosen is a gold sentence. Precision and recall by
  threshold tell which ``support_threshold`` makes a citation trustworthy.
* `evaluate_citations`: the whole workflow (configured LLM, cached corpus index) answers the
  question of each claim of the *evaluation* half; every citation of the answer is checked.

The two halves are fixed by a hash of the query id (`split_of`), so a threshold is never chosen on
the claims it is then measured on.

A citation is **correct** when the cited source's document is judged relevant to the claim and
its quote is a gold evidence sentence: the quote is placed in the abstract and mapped to the
dataset's own sentences (a sentence counts when the quote covers at least half of it, or it at
least half of the quote); *strict* precision asks that every sentence of the quote be gold.
**Recall** is the share of gold sentences that some correct citation quotes; the *ceiling* is the
share that stood in the sources at all. **No citation**: answers without any citation; **broken**:
answers with a marker naming no source (the repair should make this 0).

A dataset with qrels but no gold sentences (most teams' own data, or SciFact's train split) is
checked at **document level** (`evidence_level`): a citation is correct when its document is judged
relevant, recall is the share of relevant documents some correct citation names, and the ceiling
the share that stood in the sources. Precision at this level bounds the sentence-level one from
above (a relevant abstract, a quote that is not the evidence) and needs no annotation beyond qrels.

Generations are cached per claim (``<cache>/citations/<dataset>-<key>/<query id>.json``, ``key``
hashing the corpus index, the LLM, the prompts and every setting that changes what the model
sees). A cached claim costs nothing: an interrupted run resumes where it stopped, and a re-run
only replays the repair (`repair_text`) over the model's recorded reply with the current
threshold, which is exactly what the workflow would have returned.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tqdm.auto import tqdm

from citeflow.citations.judge import JudgeCheck
from citeflow.citations.markers import find_markers
from citeflow.citations.repair import (
    Citation,
    CitationRepairer,
    RepairPolicy,
    arepair_text,
    repair_text,
)
from citeflow.citations.sources import SELECTION_VERSION, make_sources, source_text
from citeflow.citations.support import LexicalSupport, directions, negates, opposed
from citeflow.citations.text import frame_denies, statement_of, term_set
from citeflow.errors import InvalidRequestError
from citeflow.evaluation.dataset import BeirDataset
from citeflow.evaluation.table import text_table
from citeflow.query.synthesis import CitationSynthesizer, Synthesis

if TYPE_CHECKING:
    from llama_index.core.llms import LLM
    from llama_index.core.schema import NodeWithScore

    from citeflow.evaluation.judging import CachedJudge
    from citeflow.evaluation.runner import EvalContext
    from citeflow.query.retrieval import Retriever
    from citeflow.settings import Settings
    from citeflow.workflows.citation_query import CitationQueryWorkflow

__all__ = [
    "DEFAULT_QUESTION",
    "CalibrationReport",
    "CitationResult",
    "GenerationCache",
    "GoldEvidence",
    "SourceRecord",
    "SupportPair",
    "acalibrate",
    "aevaluate_citations",
    "areplay",
    "calibrate",
    "calibration_section",
    "citation_section",
    "compact_record",
    "denies",
    "evaluate_citations",
    "evidence_level",
    "evidence_queries",
    "expand_record",
    "judged_queries",
    "model_citations",
    "question_for",
    "recorded_answers",
    "repair_policy",
    "replay",
    "score_answer",
    "score_records",
    "split_of",
    "stance_conflict",
]

#: how a claim becomes the question the workflow answers (see `question_for`)
DEFAULT_QUESTION = "Is it true that {claim}?"
#: bump when what a cached generation holds changes
CACHE_FORMAT = 1
#: calibration thresholds shown in the table
THRESHOLDS: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(2, 19))
#: the precision a chosen threshold must reach, and the fewest kept pairs that can show it
TARGET_PRECISION = 0.9
MIN_KEPT = 20

Split = Literal["calibration", "evaluation"]
Level = Literal["sentence", "document"]

#: settings that change what the model is shown or how it writes, hence the generation cache's
#: key (the repair's settings are not among them: it is replayed). Add a setting here when it
#: changes retrieval, grading, sources or the LLM; settings not (yet) defined are skipped.
GENERATION_SETTINGS: tuple[str, ...] = (
    "llm_provider",
    "llm_model",
    "llm_temperature",
    "llm_max_tokens",
    "local_model_path",
    "local_context_window",
    "openai_base_url",
    "azure_endpoint",
    "embed_provider",
    "embed_model",
    "chunk_size",
    "chunk_overlap",
    "top_k",
    "retrieval",
    "fusion",
    "dense_weight",
    "rrf_k",
    "hybrid_candidates",
    "feedback_chunks",
    "feedback_weight",
    "grader",
    "relevance_threshold",
    "relevance_coverage",
    "max_rounds",
    "on_no_relevant",
    "citation_chunk_size",
    "citation_chunk_overlap",
    "max_sources",
    "context_budget",
)


# --- claims, halves and questions ----------------------------------------------------------------
def split_of(query_id: str) -> Split:
    """The fixed half a claim belongs to: calibration or evaluation (a hash of its id)."""
    return "calibration" if hashlib.sha256(query_id.encode()).digest()[0] % 2 == 0 else "evaluation"


def evidence_queries(dataset: BeirDataset, split: Split | None = None) -> list[str]:
    """Query ids (qrels order) that have gold evidence, optionally of one half only."""
    return [
        qid
        for qid in dataset.queries
        if dataset.evidence.get(qid) and (split is None or split_of(qid) == split)
    ]


def evidence_level(dataset: BeirDataset) -> Level:
    """How citations of this dataset's answers are checked: against gold sentences when it has
    any, else against the documents its qrels judge relevant."""
    return "sentence" if dataset.evidence else "document"


def judged_queries(dataset: BeirDataset, split: Split | None = None) -> list[str]:
    """The claims whose citations can be checked (qrels order), optionally of one half: those
    with gold evidence, or (document level) those with a document judged relevant."""
    if evidence_level(dataset) == "sentence":
        return evidence_queries(dataset, split)
    return [
        qid
        for qid in dataset.queries
        if dataset.relevant(qid) and (split is None or split_of(qid) == split)
    ]


_FIRST_WORD = re.compile(r"^([A-Z])([a-z-]*)\b")


def question_for(claim: str, template: str = DEFAULT_QUESTION) -> str:
    """The question the workflow is asked about ``claim``.

    SciFact claims are statements ("Aspirin reduces the risk of ..."); people ask questions, and
    "Is it true that ...?" makes the model check the claim against the sources rather than
    restate it. A leading capital is lowered for an ordinary word only (not "BRCA1", "UK").
    """
    if "{claim}" not in template:
        raise InvalidRequestError(f"the question template must contain {{claim}}: {template!r}")
    text = " ".join(claim.split()).rstrip(" .")
    if text.endswith("?"):
        return text  # already a question (other BEIR datasets)
    if not template.startswith("{claim}"):
        text = _FIRST_WORD.sub(lambda m: m.group(1).lower() + m.group(2), text, count=1)
    return template.replace("{claim}", text)


# --- gold evidence at sentence level --------------------------------------------------------------
class GoldEvidence:
    """A dataset's gold rationale sentences, placed in the abstracts' text."""

    def __init__(self, dataset: BeirDataset) -> None:
        self.dataset = dataset
        self._spans: dict[str, list[tuple[int, int]]] = {}

    def label(self, query_id: str, doc_id: str) -> str:
        """The label of the query's gold evidence in ``doc_id`` ("" when it has none)."""
        return next(
            (e.label for e in self.dataset.evidence.get(query_id, []) if e.doc_id == doc_id), ""
        )

    def gold(self, query_id: str) -> dict[str, frozenset[int]]:
        """Document id → indices of its gold sentences for the query."""
        out: dict[str, set[int]] = {}
        for ev in self.dataset.evidence.get(query_id, []):
            out.setdefault(ev.doc_id, set()).update(ev.sentences)
        return {doc: frozenset(s) for doc, s in out.items()}

    def spans(self, doc_id: str) -> list[tuple[int, int]]:
        """Character spans of the dataset's sentences in the document's text ((-1, -1): absent)."""
        if doc_id not in self._spans:
            doc = self.dataset.corpus.get(doc_id)
            text = doc.text if doc else ""
            spans: list[tuple[int, int]] = []
            pos = 0
            for sentence in self.dataset.sentences.get(doc_id, []):
                wanted = sentence.strip()
                at = text.find(wanted, pos) if wanted else -1
                if at < 0:
                    spans.append((-1, -1))
                    continue
                spans.append((at, at + len(wanted)))
                pos = at + len(wanted)
            self._spans[doc_id] = spans
        return self._spans[doc_id]

    def locate(self, doc_id: str, text: str) -> int:
        """Where ``text`` (a source cut from the document) starts in the document, or -1."""
        doc = self.dataset.corpus.get(doc_id)
        return doc.text.find(text) if doc and text else -1

    def sentences_in(self, doc_id: str, start: int, end: int) -> frozenset[int]:
        """The document's sentences a character span quotes (half of either side overlaps)."""
        if end <= start:
            return frozenset()
        out = set()
        for index, (a, b) in enumerate(self.spans(doc_id)):
            if a < 0:
                continue
            shared = min(b, end) - max(a, start)
            if shared > 0 and shared >= 0.5 * min(b - a, end - start):
                out.add(index)
        return frozenset(out)

    def contained(self, doc_id: str, start: int, end: int) -> frozenset[int]:
        """The document's sentences that stand wholly inside a character span."""
        return frozenset(
            i for i, (a, b) in enumerate(self.spans(doc_id)) if a >= 0 and start <= a and b <= end
        )


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """One numbered source of an answer: its document, its text, and the retriever's score of
    its chunk (the cosine similarity to the question; None when not recorded)."""

    doc_id: str
    text: str
    score: float | None = None


def _doc_id(source: NodeWithScore) -> str:
    node = source.node
    return str(node.metadata.get("doc_id") or node.ref_doc_id or "")


@dataclass(frozen=True, slots=True)
class CitationCheck:
    """One citation checked against the gold evidence."""

    number: int
    doc_id: str
    relevant: bool
    quoted: tuple[int, ...]
    correct: bool
    strict: bool
    label: str = ""
    """the gold evidence's label for the cited document (SUPPORT, CONTRADICT; "" when none)"""


def check_citation(
    gold: GoldEvidence,
    query_id: str,
    sources: Sequence[SourceRecord],
    number: int,
    quote_start: int,
    quote_end: int,
) -> CitationCheck:
    """Whether a citation of Source ``number`` with that quote span is correct (at the dataset's
    `evidence_level`)."""
    if not 1 <= number <= len(sources):
        return CitationCheck(number, "", False, (), False, False)
    source = sources[number - 1]
    relevant = source.doc_id in gold.dataset.relevant(query_id)
    offset = gold.locate(source.doc_id, source.text)
    quoted = (
        gold.sentences_in(source.doc_id, offset + quote_start, offset + quote_end)
        if offset >= 0
        else frozenset()
    )
    label = gold.label(query_id, source.doc_id)
    if evidence_level(gold.dataset) == "document":
        correct = strict = relevant  # no gold sentences: the document is what is checked
    else:
        golden = gold.gold(query_id).get(source.doc_id, frozenset())
        correct = relevant and bool(quoted & golden)
        strict = correct and quoted <= golden
    return CitationCheck(
        number, source.doc_id, relevant, tuple(sorted(quoted)), correct, strict, label
    )


def denies(sentence: str, claim: str) -> bool:
    """Whether an answer sentence denies the claim it answers (a heuristic): its statement
    negates where the claim does not (or the reverse), or says the opposite direction about the
    same thing ("CX3CR1 signalling promotes Th2 survival" against "CX3CR1 impairs T cell
    survival": a direction word of the claim whose nearest ones in the sentence all go the other
    way, `support.opposed`), or it opens with "No" / calls the claim not true before a
    statement without a negation of its own ("No, X is not Y" answering "X is not Y" says what
    the claim says: the content wins over the framing)."""
    statement = statement_of(sentence)
    if negates(statement) != negates(claim):
        return True
    words = {t: 1.0 for t in term_set(statement) | term_set(claim)}
    if opposed(directions(claim), directions(statement), words):
        return True
    return frame_denies(sentence) and not negates(statement)


#: share of the claim's content words a sentence must repeat for its stance on it to be judged
RESTATES = 0.6


def restates(sentence: str, claim: str) -> bool:
    """Whether an answer sentence is about the claim itself (repeats most of its content words),
    not a reason or a detail ("This is because X signaling promotes survival")."""
    wanted = term_set(claim)
    return bool(wanted) and len(wanted & term_set(statement_of(sentence))) >= RESTATES * len(wanted)


def stance_conflict(check: CitationCheck, sentence: str, claim: str) -> bool:
    """A correct citation whose sentence takes the other side from its evidence: "Yes, X [1]"
    quoting the gold sentence that *contradicts* X (or "No, X" quoting one that supports it).
    The issue's citation precision counts it correct (relevant document, gold sentence); a
    reader sees a quote that says the opposite of the sentence. Judged only for sentences that
    restate the claim; SciFact's labels say nothing about the others."""
    if not check.correct or check.label not in ("SUPPORT", "CONTRADICT"):
        return False
    if not restates(sentence, claim):
        return False
    return (check.label == "CONTRADICT") != denies(sentence, claim)


def score_answer(
    gold: GoldEvidence,
    query_id: str,
    sources: Sequence[SourceRecord],
    answer: str,
    citations: Sequence[Citation],
) -> dict[str, Any]:
    """Counts for one answer: citations, correct ones, gold sentences (document level: relevant
    documents) covered and shown, broken markers."""
    checks = [
        check_citation(gold, query_id, sources, c.number, c.quote_start, c.quote_end)
        for c in citations
    ]
    if evidence_level(gold.dataset) == "document":
        relevant = gold.dataset.relevant(query_id)
        gold_total = len(relevant)
        covered_docs = {c.doc_id for c in checks if c.correct}
        shown_docs = {s.doc_id for s in sources} & relevant
        covered_count, shown_count = len(covered_docs), len(shown_docs)
    else:
        golden = gold.gold(query_id)
        gold_total = sum(len(s) for s in golden.values())
        covered = {(c.doc_id, i) for c in checks if c.correct for i in c.quoted}
        covered &= {(doc, i) for doc, s in golden.items() for i in s}
        shown: set[tuple[str, int]] = set()
        for source in sources:
            offset = gold.locate(source.doc_id, source.text)
            if offset >= 0 and source.doc_id in golden:
                inside = gold.contained(source.doc_id, offset, offset + len(source.text))
                shown |= {(source.doc_id, i) for i in inside & golden[source.doc_id]}
        covered_count, shown_count = len(covered), len(shown)
    claim = gold.dataset.queries.get(query_id, "")
    conflicts = sum(
        stance_conflict(check, c.sentence, claim)
        for check, c in zip(checks, citations, strict=True)
    )
    broken = [n for m in find_markers(answer) for n in m.numbers if not 1 <= n <= len(sources)]
    origins: dict[str, list[int]] = {}
    for check, citation in zip(checks, citations, strict=True):
        counts = origins.setdefault(citation.origin, [0, 0])
        counts[0] += 1
        counts[1] += check.correct
    return {
        "citations": len(checks),
        "correct": sum(c.correct for c in checks),
        "strict": sum(c.strict for c in checks),
        "relevant": sum(c.relevant for c in checks),
        "stance_conflicts": conflicts,
        "gold": gold_total,
        "covered": covered_count,
        "shown": shown_count,
        "broken_markers": len(broken),
        "origins": origins,
        "checks": [asdict(c) for c in checks],
    }


def _ratio(num: float, den: float) -> float:
    return num / den if den else 0.0


def f_beta(precision: float, recall: float, beta: float) -> float:
    """F-beta of a precision and a recall (0 when both are 0)."""
    b2 = beta * beta
    den = b2 * precision + recall
    return (1 + b2) * precision * recall / den if den else 0.0


def aggregate(scores: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Micro-averaged citation metrics over answers scored by `score_answer`."""
    rows = list(scores)
    total = sum(r["citations"] for r in rows)
    gold = sum(r["gold"] for r in rows)
    by_origin: dict[str, float] = {}
    for origin in ("model", "moved", "added"):  # kept as the model wrote it, moved, added
        made = sum(r.get("origins", {}).get(origin, (0, 0))[0] for r in rows)
        right = sum(r.get("origins", {}).get(origin, (0, 0))[1] for r in rows)
        by_origin[f"citations_{origin}"] = float(made)
        by_origin[f"precision_{origin}"] = _ratio(right, made)
    return {
        "precision": _ratio(sum(r["correct"] for r in rows), total),
        "precision_strict": _ratio(sum(r["strict"] for r in rows), total),
        "precision_stance": _ratio(sum(r["correct"] - r["stance_conflicts"] for r in rows), total),
        "stance_conflicts": float(sum(r["stance_conflicts"] for r in rows)),
        "doc_precision": _ratio(sum(r["relevant"] for r in rows), total),
        "recall": _ratio(sum(r["covered"] for r in rows), gold),
        "recall_ceiling": _ratio(sum(r["shown"] for r in rows), gold),
        "no_citation_rate": _ratio(sum(r["citations"] == 0 for r in rows), len(rows)),
        "broken_rate": _ratio(sum(r["broken_markers"] > 0 for r in rows), len(rows)),
        "citations_per_answer": _ratio(total, len(rows)),
        "answers": float(len(rows)),
        "citations": float(total),
        **by_origin,
    }


# --- calibration --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SupportPair:
    """One (claim, source) pair scored by the support scorer."""

    query_id: str
    number: int
    doc_id: str
    score: float
    relevant: bool
    """the source's document is judged relevant to the claim"""
    correct: bool
    """relevant, and the quote the scorer chose is a gold sentence"""
    possible: bool
    """the source holds a gold sentence of the claim (a correct quote existed)"""


def pair_scores(
    gold: GoldEvidence, query_id: str, claim: str, sources: Sequence[SourceRecord]
) -> list[SupportPair]:
    """Score ``claim`` against each source as the repair would, and check each quote."""
    support = LexicalSupport([s.text for s in sources], question=claim)
    golden = gold.gold(query_id)
    pairs = []
    for number, source in enumerate(sources, start=1):
        found = support.score(claim, number)
        check = check_citation(gold, query_id, sources, number, found.quote_start, found.quote_end)
        offset = gold.locate(source.doc_id, source.text)
        inside = (
            gold.contained(source.doc_id, offset, offset + len(source.text))
            if offset >= 0
            else frozenset()
        )
        pairs.append(
            SupportPair(
                query_id=query_id,
                number=number,
                doc_id=source.doc_id,
                score=found.score,
                relevant=check.relevant,
                correct=check.correct,
                possible=check.relevant and bool(inside & golden.get(source.doc_id, frozenset())),
            )
        )
    return pairs


@dataclass
class CalibrationRow:
    """Precision and recall of "support ≥ threshold" at one threshold."""

    threshold: float
    kept: int
    precision: float
    """kept pairs whose quote is a gold sentence of a relevant document"""
    recall: float
    """correct kept pairs / pairs whose source held a gold sentence"""
    doc_precision: float
    """kept pairs whose source's document is relevant"""


def calibration_rows(
    pairs: Sequence[SupportPair], thresholds: Sequence[float] = THRESHOLDS
) -> list[CalibrationRow]:
    """The precision/recall table of a threshold on the support score."""
    possible = sum(p.possible for p in pairs)
    rows = []
    for t in thresholds:
        kept = [p for p in pairs if p.score >= t - 1e-9]
        rows.append(
            CalibrationRow(
                threshold=t,
                kept=len(kept),
                precision=_ratio(sum(p.correct for p in kept), len(kept)),
                recall=_ratio(sum(p.correct for p in kept), possible),
                doc_precision=_ratio(sum(p.relevant for p in kept), len(kept)),
            )
        )
    return rows


def choose_threshold(
    rows: Sequence[CalibrationRow],
    *,
    target: float = TARGET_PRECISION,
    min_kept: int = MIN_KEPT,
    metric: Literal["precision", "doc_precision"] = "precision",
) -> CalibrationRow | None:
    """The lowest threshold (most recall) whose precision reaches ``target`` on enough pairs."""
    for row in sorted(rows, key=lambda r: r.threshold):
        if row.kept >= min_kept and getattr(row, metric) >= target:
            return row
    return None


@dataclass
class CalibrationReport:
    """The calibration table and the thresholds it suggests."""

    rows: list[CalibrationRow]
    claims: int
    pairs: int
    possible: int
    info: dict[str, Any] = field(default_factory=dict)
    answers: list[dict[str, float]] = field(default_factory=list)
    """the workflow's answers to calibration claims replayed at each threshold (`sweep`)"""
    answer_claims: int = 0
    relevance: float = 0.0
    """the repair's minimum question relevance the answers were replayed with"""

    def chosen(self, metric: Literal["precision", "doc_precision"] = "precision") -> float | None:
        row = choose_threshold(self.rows, metric=metric)
        return row.threshold if row else None

    def chosen_for_answers(self) -> float | None:
        """The lowest threshold whose answers' citation precision reaches the target."""
        for row in self.answers:
            if row["citations"] >= MIN_KEPT and row["precision"] >= TARGET_PRECISION:
                return row["threshold"]
        return None

    def best_f05_for_answers(self) -> float | None:
        """The threshold with the best F0.5 (precision weighted twice recall) on the answers.

        The fallback when no threshold reaches the target precision; ties go to the lowest.
        """
        best: tuple[float, float] | None = None
        for row in self.answers:
            value = f_beta(row["precision"], row["recall"], 0.5)
            if row["citations"] >= MIN_KEPT and (best is None or value > best[0] + 1e-12):
                best = (value, row["threshold"])
        return best[1] if best else None

    def table(self) -> str:
        """Plain text: one line per threshold."""
        head = f"{'threshold':>9}  {'kept':>5}  {'precision':>9}  {'recall':>6}  {'doc prec':>8}"
        lines = [
            f"support calibration: {self.claims} claims (calibration half), {self.pairs} "
            f"(claim, source) pairs, {self.possible} with a gold sentence in the source",
            "-" * len(head),
            head,
            "-" * len(head),
        ]
        lines += [
            f"{r.threshold:>9.2f}  {r.kept:>5}  {r.precision:>9.3f}  {r.recall:>6.3f}  "
            f"{r.doc_precision:>8.3f}"
            for r in self.rows
        ]
        lines.append("-" * len(head))
        for metric in ("precision", "doc_precision"):
            chosen = self.chosen(metric)  # type: ignore[arg-type]
            lines.append(
                f"lowest threshold with {metric} >= {TARGET_PRECISION} "
                f"(>= {MIN_KEPT} pairs): " + (f"{chosen:.2f}" if chosen is not None else "none")
            )
        if self.answers:
            head = (
                f"{'threshold':>9}  {'citations':>9}  {'precision':>9}  {'strict':>6}  "
                f"{'doc prec':>8}  {'recall':>6}  {'no cit.':>7}"
            )
            lines += [
                "",
                f"answers: the workflow's answers to {self.answer_claims} calibration claims "
                f"({self.info.get('llm', '?')}), repair replayed at each threshold "
                f"(citation relevance {self.relevance:g})",
                "-" * len(head),
                head,
                "-" * len(head),
            ]
            lines += [
                f"{r['threshold']:>9.2f}  {int(r['citations']):>9}  {r['precision']:>9.3f}  "
                f"{r['precision_strict']:>6.3f}  {r['doc_precision']:>8.3f}  {r['recall']:>6.3f}  "
                f"{r['no_citation_rate']:>7.3f}"
                for r in self.answers
            ]
            lines.append("-" * len(head))
            chosen = self.chosen_for_answers()
            lines.append(
                f"lowest threshold with answer citation precision >= {TARGET_PRECISION}: "
                + (f"{chosen:.2f}" if chosen is not None else "none")
            )
            fallback = self.best_f05_for_answers()
            lines.append(
                "threshold with the best F0.5 on the answers: "
                + (f"{fallback:.2f}" if fallback is not None else "none")
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "claims": self.claims,
            "pairs": self.pairs,
            "possible": self.possible,
            "target_precision": TARGET_PRECISION,
            "chosen_threshold": self.chosen("precision"),
            "chosen_threshold_doc": self.chosen("doc_precision"),
            "rows": [{k: round(v, 6) for k, v in asdict(r).items()} for r in self.rows],
            "answer_claims": self.answer_claims,
            "answer_relevance": self.relevance,
            "chosen_threshold_answers": self.chosen_for_answers(),
            "best_f05_threshold_answers": self.best_f05_for_answers(),
            "answers": [{k: round(v, 6) for k, v in r.items()} for r in self.answers],
            "info": self.info,
        }


async def workflow_sources(
    retriever: Retriever, settings: Settings, question: str
) -> list[NodeWithScore]:
    """The sources round one of the workflow builds for ``question`` (score grader, no LLM)."""
    from citeflow.query.grading import ScoreGrader

    nodes = await retriever.aretrieve(question)
    relevant = await ScoreGrader.from_settings(settings).grade(question, nodes)
    if not relevant and settings.on_no_relevant == "best":
        relevant = sorted(nodes, key=lambda n: -(n.score or 0.0))[:3]
    return make_sources(
        relevant,
        question,
        chunk_tokens=settings.citation_chunk_size,
        overlap_tokens=settings.citation_chunk_overlap,
        max_sources=settings.max_sources,
    )


async def acalibrate(
    dataset: BeirDataset,
    sources_for: Callable[[str], Any],
    *,
    query_ids: Sequence[str] | None = None,
    template: str = DEFAULT_QUESTION,
    progress: bool = True,
) -> CalibrationReport:
    """Score each calibration claim against the sources built for its question.

    ``sources_for(question)`` is awaited and returns the `SourceRecord`s (see `workflow_sources`).
    """
    gold = GoldEvidence(dataset)
    ids = list(query_ids) if query_ids is not None else evidence_queries(dataset, "calibration")
    pairs: list[SupportPair] = []
    for qid in tqdm(ids, desc="calibration", unit="claim", disable=not progress):
        claim = dataset.queries[qid]
        sources: Sequence[SourceRecord] = await sources_for(question_for(claim, template))
        pairs += pair_scores(gold, qid, claim, sources)
    return CalibrationReport(
        rows=calibration_rows(pairs),
        claims=len(ids),
        pairs=len(pairs),
        possible=sum(p.possible for p in pairs),
    )


def calibrate(
    dataset: BeirDataset,
    sources_for: Callable[[str], Any],
    **kwargs: Any,
) -> CalibrationReport:
    """`acalibrate` on its own event loop."""
    import asyncio

    report: CalibrationReport = asyncio.run(acalibrate(dataset, sources_for, **kwargs))
    return report


# --- the generation cache -------------------------------------------------------------------------
def _safe_name(query_id: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", query_id)[:80]
    digest = hashlib.sha256(query_id.encode()).hexdigest()[:8]
    return f"{cleaned}-{digest}.json"


class GenerationCache:
    """One JSON file per claim under ``directory``; written atomically, read defensively."""

    def __init__(self, directory: Path, facts: Mapping[str, Any]) -> None:
        self.directory = directory
        self.facts = dict(facts)

    @classmethod
    def for_facts(cls, root: Path, name: str, facts: Mapping[str, Any]) -> GenerationCache:
        blob = json.dumps(facts, sort_keys=True, default=str).encode()
        key = hashlib.sha256(blob).hexdigest()[:16]
        return cls(root / f"{name}-{key}", facts)

    def path(self, query_id: str) -> Path:
        return self.directory / _safe_name(query_id)

    def get(self, query_id: str, question: str) -> dict[str, Any] | None:
        """The cached generation, or None (missing, unreadable, or for another question)."""
        try:
            data = json.loads(self.path(query_id).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        ok = (
            isinstance(data, dict)
            and data.get("format") == CACHE_FORMAT
            and data.get("query_id") == query_id
            and data.get("question") == question
            and isinstance(data.get("sources"), list)
            and isinstance(data.get("raw_text"), str)
        )
        return data if ok else None

    def put(self, record: Mapping[str, Any]) -> None:
        """Store one claim's generation (and, the first time, what the cache's key hashes)."""
        self.write("config.json", self.facts, only_new=True)
        self.write(_safe_name(str(record["query_id"])), record)

    def write(self, name: str, data: Any, *, only_new: bool = False) -> None:
        """Write ``name`` in the cache's directory atomically (a crash leaves no half file)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.directory / name
        if only_new and target.exists():
            return
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
        tmp.replace(target)


def generation_facts(settings: Settings, *, index_key: str, llm: str) -> dict[str, Any]:
    """What a cached generation depends on: the corpus index, the LLM, prompts and settings."""
    from citeflow.prompts import (
        CITATION_QA_TEMPLATE,
        CITATION_REFINE_TEMPLATE,
        CITATION_SYSTEM_PROMPT,
        RETRY_HYPOTHETICAL_PROMPT,
        RETRY_KEYWORDS_PROMPT,
    )

    prompts = "\0".join(
        [
            CITATION_SYSTEM_PROMPT,
            CITATION_QA_TEMPLATE.get_template(),
            CITATION_REFINE_TEMPLATE.get_template(),
            RETRY_KEYWORDS_PROMPT.get_template(),
            RETRY_HYPOTHETICAL_PROMPT.get_template(),
        ]
    )
    dumped = settings.model_dump(mode="json")
    knobs = {name: dumped[name] for name in GENERATION_SETTINGS if name in dumped}
    return {
        "format": CACHE_FORMAT,
        "index": index_key,
        "sources": SELECTION_VERSION,
        "llm": llm,
        "prompts": hashlib.sha256(prompts.encode()).hexdigest()[:16],
        "settings": knobs,
    }


def compact_record(record: Mapping[str, Any], dataset: BeirDataset) -> dict[str, Any]:
    """A cached generation with each source as ``[doc_id, start, end]`` in the corpus text.

    For fixtures and for sharing results: the corpus text is not copied (`expand_record` puts it
    back). Raises `InvalidRequestError` if a source is not a span of its document.
    """
    spans = []
    for source in record["sources"]:
        doc = dataset.corpus.get(str(source["doc_id"]))
        start = doc.text.find(str(source["text"])) if doc else -1
        if start < 0:
            raise InvalidRequestError(f"a source of {record['query_id']} is not in the corpus")
        span = [source["doc_id"], start, start + len(str(source["text"]))]
        if source.get("score") is not None:
            span.append(round(float(source["score"]), 6))
        spans.append(span)
    keep = (
        "query_id",
        "question",
        "raw_text",
        "answer",
        "support_threshold",
        "citation_relevance",
        "citation_score_gap",
        "seconds",
    )
    return {**{k: record[k] for k in keep if k in record}, "sources": spans}


def expand_record(compact: Mapping[str, Any], dataset: BeirDataset) -> dict[str, Any]:
    """The generation `compact_record` shortened, with its sources' text."""
    sources = [
        {
            "doc_id": span[0],
            "text": dataset.corpus[span[0]].text[span[1] : span[2]],
            "score": span[3] if len(span) > 3 else None,
        }
        for span in compact["sources"]
    ]
    return {"format": CACHE_FORMAT, "repair_citations": True, **compact, "sources": sources}


# --- the citation evaluation ---------------------------------------------------------------------
@dataclass
class CitationResult:
    """Citation metrics of the workflow's answers (and of the model's own markers)."""

    metrics: dict[str, float]
    """citeflow's answers: the repair with the current settings"""
    model_metrics: dict[str, float]
    """the model's own markers, before any repair (out-of-range numbers count as broken)"""
    per_query: dict[str, dict[str, Any]]
    queries: int
    generated: int
    """answers generated by this run (the others came from the cache)"""
    seconds: float
    """wall time of this run"""
    seconds_per_answer: float
    """mean wall time of one workflow run, when it was generated"""
    info: dict[str, Any] = field(default_factory=dict)

    def table(self) -> str:
        """Plain text: the model's raw citations and citeflow's checked ones."""
        columns = [
            "citations",
            "precision",
            "strict",
            "stance ok",
            "doc prec",
            "recall",
            "ceiling",
            "no cit.",
            "broken",
            "cit/ans",
        ]
        keys = [
            "precision",
            "precision_strict",
            "precision_stance",
            "doc_precision",
            "recall",
            "recall_ceiling",
            "no_citation_rate",
            "broken_rate",
            "citations_per_answer",
        ]
        rows = [
            ["model (raw)", *(f"{self.model_metrics.get(k, 0.0):.3f}" for k in keys)],
            ["citeflow", *(f"{self.metrics.get(k, 0.0):.3f}" for k in keys)],
        ]
        which = (
            "judged claims, checked at document level (no gold sentences)"
            if self.info.get("level") == "document"
            else "claims with gold evidence"
        )
        title = (
            f"citations: {self.queries} {which} ({self.info.get('split', 'evaluation')} half), "
            f"{self.info.get('llm', '?')}, threshold {self.info.get('support_threshold', '?')}, "
            f"relevance {self.info.get('citation_relevance', '?')}, "
            f"score gap {self.info.get('citation_score_gap', '?')}, "
            f"judge {self.info.get('citation_judge_cut') or 'off'}; "
            f"{self.generated} generated, {self.queries - self.generated} cached, "
            f"{self.seconds_per_answer:.1f} s per answer"
        )
        return text_table(title, columns, rows)

    def to_dict(self) -> dict[str, Any]:
        return {
            "metrics": {k: round(v, 6) for k, v in self.metrics.items()},
            "model_metrics": {k: round(v, 6) for k, v in self.model_metrics.items()},
            "queries": self.queries,
            "generated": self.generated,
            "seconds": round(self.seconds, 3),
            "seconds_per_answer": round(self.seconds_per_answer, 3),
            "info": self.info,
            "per_query": self.per_query,
        }


def replay(record: Mapping[str, Any], policy: RepairPolicy) -> tuple[str, list[Citation]]:
    """The answer and citations the workflow gives for a recorded reply under ``policy`` (the
    question is the record's; the score-gap rule applies when the record has its sources'
    retrieval scores)."""
    if not record["sources"]:
        return str(record.get("answer", "")), []
    return repair_text(_repairer(record, policy), str(record["raw_text"]))


async def areplay(
    record: Mapping[str, Any], policy: RepairPolicy, check: JudgeCheck | None
) -> tuple[str, list[Citation]]:
    """`replay`, each sentence's citations also put to the citation judge (``check``), as the
    workflow does when ``CITEFLOW_CITATION_JUDGE`` is on."""
    if check is None or not record["sources"]:
        return replay(record, policy)
    return await arepair_text(_repairer(record, policy), str(record["raw_text"]), check)


def _repairer(record: Mapping[str, Any], policy: RepairPolicy) -> CitationRepairer:
    """The repairer the workflow used for a recorded answer: its sources, question and scores."""
    return policy.repairer(
        LexicalSupport(
            [str(s["text"]) for s in record["sources"]], question=str(record.get("question") or "")
        ),
        [s.get("score") for s in record["sources"]],
    )


def model_citations(record: Mapping[str, Any]) -> list[Citation]:
    """The model's own markers, each with the quote the scorer finds in the source it names."""
    sources = [str(s["text"]) for s in record["sources"]]
    if not sources:
        return []
    _, citations = replay(record, RepairPolicy(threshold=1.0, enabled=False))
    return citations


async def _generate(
    workflow: CitationQueryWorkflow, recorder: _Recorder, query_id: str, claim: str, question: str
) -> dict[str, Any]:
    from citeflow.result import CitedResponse

    started = time.perf_counter()
    returned: object = await workflow.run(query=question)
    seconds = time.perf_counter() - started
    if not isinstance(returned, CitedResponse):  # pragma: no cover - the workflow's contract
        raise TypeError(f"the workflow returned {type(returned).__name__}")
    result = returned
    synthesis = recorder.last
    recorder.last = None
    return {
        "format": CACHE_FORMAT,
        "query_id": query_id,
        "claim": claim,
        "question": question,
        "sources": [
            asdict(SourceRecord(_doc_id(s), source_text(s), s.score)) for s in result.source_nodes
        ],
        "raw_text": synthesis.raw_text if synthesis else "",
        "answer": result.response or "",
        "citations": [asdict(c) for c in result.citations],
        "support_threshold": workflow.options.support_threshold,
        "citation_relevance": workflow.options.citation_relevance,
        "citation_score_gap": workflow.options.citation_score_gap,
        "repair_citations": workflow.options.repair_citations,
        "citation_judge_cut": _judge_cut(workflow.synthesizer.check),
        "grounded": result.grounded,
        "rounds": result.rounds,
        "seconds": round(seconds, 3),
        "llm_seconds": round(result.timings.get("llm", 0.0), 3),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }


class _Recorder(CitationSynthesizer):
    """`CitationSynthesizer` that keeps its last `Synthesis`: the model's raw reply with it."""

    last: Synthesis | None = None

    async def synthesize(self, *args: Any, **kwargs: Any) -> Synthesis:
        self.last = await super().synthesize(*args, **kwargs)
        return self.last


def _judge_cut(check: object) -> float | None:
    """The cut of the citation judge a synthesizer checks with (None: no judge)."""
    return check.cut if isinstance(check, JudgeCheck) else None


def _recording(workflow: CitationQueryWorkflow) -> _Recorder:
    """Swap the workflow's synthesizer for one that keeps the model's raw reply."""
    base = workflow.synthesizer
    recorder = _Recorder(
        base.llm, context_budget=base.context_budget, policy=base.policy, check=base.check
    )
    workflow.synthesizer = recorder
    return recorder


async def agenerate(
    dataset: BeirDataset,
    query_ids: Sequence[str],
    cache: GenerationCache,
    *,
    workflow: Callable[[], CitationQueryWorkflow] | None,
    template: str = DEFAULT_QUESTION,
    progress: bool = True,
    desc: str = "citations",
    rescore: Callable[[str], Awaitable[list[NodeWithScore]]] | None = None,
) -> tuple[dict[str, dict[str, Any]], int]:
    """Each claim's recorded generation, from the cache or by running the workflow now.

    ``workflow`` builds the workflow on first need (only claims missing from the cache need it);
    None means the cache must hold every claim. Each generation is written to the cache as soon
    as it is done, so an interrupted run loses at most the answer in progress. Returns the
    records by query id and how many were generated.

    ``rescore(question)`` gives the sources round one of the workflow builds (`workflow_sources`):
    a cached generation recorded without its sources' retrieval scores gets them from it, when
    the sources are the same (they are: retrieval is deterministic over the same index), and is
    written back, so that the replay applies the repair's score rule as the workflow does.
    """
    live: tuple[CitationQueryWorkflow, _Recorder] | None = None
    records: dict[str, dict[str, Any]] = {}
    generated = 0
    bar = tqdm(total=len(query_ids), desc=desc, unit="claim", disable=not progress)
    try:
        for qid in query_ids:
            claim = dataset.queries[qid]
            question = question_for(claim, template)
            record = cache.get(qid, question)
            if (
                record is not None
                and rescore is not None
                and _unscored(record)
                and _add_scores(record, await rescore(question))
            ):
                cache.put(record)
            if record is None:
                if workflow is None:
                    raise InvalidRequestError(f"claim {qid} is not in the citation cache")
                if live is None:
                    built = workflow()
                    live = (built, _recording(built))
                record = await _generate(live[0], live[1], qid, claim, question)
                cache.put(record)
                generated += 1
            records[qid] = record
            bar.update(1)
            bar.set_postfix(generated=generated, refresh=False)
    finally:
        bar.close()
    return records, generated


def _same(recorded: Any, setting: float | None) -> bool:
    """Whether a setting a record was generated with (None: not recorded) is ``setting``."""
    if recorded is None or setting is None:
        return recorded is None and setting is None
    return math.isclose(float(recorded), setting)


def _unscored(record: Mapping[str, Any]) -> bool:
    return any(s.get("score") is None for s in record["sources"])


def _add_scores(record: dict[str, Any], nodes: Sequence[NodeWithScore]) -> bool:
    """Put the scores of ``nodes`` on the record's sources if they are the same sources."""
    sources = record["sources"]
    same = len(nodes) == len(sources) and all(
        _doc_id(n) == s["doc_id"] and source_text(n) == s["text"]
        for n, s in zip(nodes, sources, strict=True)
    )
    if same:
        for node, source in zip(nodes, sources, strict=True):
            source["score"] = node.score
    return same


@dataclass
class Scored:
    """Recorded generations scored at one threshold."""

    metrics: dict[str, float]
    model_metrics: dict[str, float]
    per_query: dict[str, dict[str, Any]]
    mismatches: int
    """answers whose replay differs from what the workflow returned with the same settings"""


def score_records(
    dataset: BeirDataset,
    records: Mapping[str, Mapping[str, Any]],
    policy: RepairPolicy,
    *,
    details: bool = True,
    replayed: Mapping[str, tuple[str, list[Citation]]] | None = None,
    judge_cut: float | None = None,
) -> Scored:
    """Replay the repair over each recorded reply under ``policy`` and score the citations.

    ``replayed``: the answers and citations already replayed (`areplay`, with the citation
    judge), by query id; the replay's judge cut is then ``judge_cut``.
    """
    gold = GoldEvidence(dataset)
    per_query: dict[str, dict[str, Any]] = {}
    final_scores: list[dict[str, Any]] = []
    model_scores: list[dict[str, Any]] = []
    mismatches = 0
    for qid, record in records.items():
        sources = [SourceRecord(str(s["doc_id"]), str(s["text"])) for s in record["sources"]]
        answer, citations = replayed[qid] if replayed is not None else replay(record, policy)
        same_settings = (
            _same(record.get("citation_judge_cut"), judge_cut)
            and _same(record.get("support_threshold"), policy.threshold)
            and _same(record.get("citation_relevance"), policy.relevance)
            and _same(record.get("citation_score_gap"), policy.score_gap)
            and bool(record.get("repair_citations", True)) == policy.enabled
        )
        if same_settings and answer != record.get("answer"):
            mismatches += 1
        final = score_answer(gold, qid, sources, answer, citations)
        final_scores.append(final)
        if not details:
            continue
        model = score_answer(gold, qid, sources, str(record["raw_text"]), model_citations(record))
        model_scores.append(model)
        per_query[qid] = {
            "question": record["question"],
            "answer": answer,
            "raw_text": record["raw_text"],
            "sources": [s.doc_id for s in sources],
            "seconds": record.get("seconds"),
            **{k: v for k, v in final.items() if k != "checks"},
            "citations_checked": [
                {**check, "quote": c.quote, "score": round(c.score, 4), "origin": c.origin}
                for check, c in zip(final["checks"], citations, strict=True)
            ],
            "model": {k: v for k, v in model.items() if k != "checks"},
        }
    return Scored(
        metrics=aggregate(final_scores),
        model_metrics=aggregate(model_scores) if details else {},
        per_query=per_query,
        mismatches=mismatches,
    )


def sweep(
    dataset: BeirDataset,
    records: Mapping[str, Mapping[str, Any]],
    policy: RepairPolicy,
    thresholds: Sequence[float] = THRESHOLDS,
) -> list[dict[str, float]]:
    """Citation precision, recall and no-citation rate of recorded answers at each threshold
    (the rest of ``policy`` unchanged)."""
    rows = []
    for t in thresholds:
        m = score_records(dataset, records, policy.at(t), details=False)
        rows.append({"threshold": t, **m.metrics})
    return rows


async def aevaluate_citations(
    dataset: BeirDataset,
    query_ids: Sequence[str],
    cache: GenerationCache,
    *,
    workflow: Callable[[], CitationQueryWorkflow] | None,
    policy: RepairPolicy,
    template: str = DEFAULT_QUESTION,
    progress: bool = True,
    info: Mapping[str, Any] | None = None,
    rescore: Callable[[str], Awaitable[list[NodeWithScore]]] | None = None,
    check: JudgeCheck | None = None,
) -> CitationResult:
    """Answer each claim's question with the workflow (or take it from the cache) and score it.

    See `agenerate` for ``workflow`` and the cache; the scores replay the repair under
    ``policy`` (`score_records`), then the citation judge ``check`` when there is one (`areplay`).
    """
    started = time.perf_counter()
    records, generated = await agenerate(
        dataset,
        query_ids,
        cache,
        workflow=workflow,
        template=template,
        progress=progress,
        rescore=rescore,
    )
    replayed = None
    if check is not None:
        replayed = {}
        for qid, record in tqdm(
            records.items(), desc="judge", unit="claim", disable=not progress, leave=False
        ):
            replayed[qid] = await areplay(record, policy, check)
    scored = score_records(dataset, records, policy, replayed=replayed, judge_cut=_judge_cut(check))
    times = [float(r.get("seconds") or 0.0) for r in records.values()]
    return CitationResult(
        metrics=scored.metrics,
        model_metrics=scored.model_metrics,
        per_query=scored.per_query,
        queries=len(records),
        generated=generated,
        seconds=time.perf_counter() - started,
        seconds_per_answer=_ratio(sum(times), len(times)),
        info={
            **dict(info or {}),
            "support_threshold": policy.threshold,
            "citation_relevance": policy.relevance,
            "citation_score_gap": policy.score_gap,
            "repair_citations": policy.enabled,
            "citation_judge_cut": _judge_cut(check),
            "question_template": template,
            "cache": str(cache.directory),
            "replay_mismatches": scored.mismatches,
        },
    )


def evaluate_citations(
    dataset: BeirDataset, query_ids: Sequence[str], cache: GenerationCache, **kwargs: Any
) -> CitationResult:
    """`aevaluate_citations` on its own event loop."""
    import asyncio

    result: CitationResult = asyncio.run(aevaluate_citations(dataset, query_ids, cache, **kwargs))
    return result


# --- the command's sections ---------------------------------------------------------------------
def _index_key(dataset: BeirDataset, context: EvalContext) -> str:
    """The corpus index's cache key, computed without opening it or loading the embedder."""
    from citeflow.evaluation.dense import index_key

    settings = context.settings
    name = context.embedder_name
    if name is None:
        from citeflow.providers.embeddings import describe_embeddings

        name = describe_embeddings(settings)
    size = context.chunk_size or settings.chunk_size
    overlap = context.chunk_overlap if context.chunk_overlap is not None else settings.chunk_overlap
    key, _ = index_key(dataset, embedder=name, chunk_size=size, chunk_overlap=overlap)
    return key


class _RoundOne:
    """The sources round one of the workflow builds for a question, without the LLM
    (`workflow_sources` over the cached corpus index, opened on first use)."""

    def __init__(self, dataset: BeirDataset, context: EvalContext) -> None:
        self.dataset = dataset
        self.context = context
        self.retriever: Retriever | None = None

    async def __call__(self, question: str) -> list[NodeWithScore]:
        if self.retriever is None:
            from citeflow.evaluation.runner import corpus_index

            self.retriever = corpus_index(self.dataset, self.context).kb.retriever()
        return await workflow_sources(self.retriever, self.context.settings, question)


class _Generations:
    """The generation cache of this evaluation and, on first need, the workflow that fills it."""

    def __init__(self, dataset: BeirDataset, context: EvalContext, llm: LLM | None) -> None:
        from citeflow.providers.llm import describe_llm

        self.dataset = dataset
        self.context = context
        self.llm = llm
        self.name = describe_llm(context.settings)
        if llm is not None:
            self.name = f"{type(llm).__name__} {llm.metadata.model_name}".strip()
        self.cache = GenerationCache.for_facts(
            context.cache_dir / "citations",
            dataset.name,
            generation_facts(
                context.settings, index_key=_index_key(dataset, context), llm=self.name
            ),
        )
        self._owned: list[Any] = []
        self._workflow: CitationQueryWorkflow | None = None
        self.judge_cache: CachedJudge | None = None

    def model(self) -> LLM:
        """The LLM: the one given, else built from the settings on first use."""
        if self.llm is None:
            from citeflow.providers.llm import build_llm

            self.llm = build_llm(self.context.settings)
            self._owned.append(self.llm)
        return self.llm

    def workflow(self) -> CitationQueryWorkflow:
        """The workflow over the cached corpus index (one per evaluation, built on first use);
        its citation judge, if on, answers from the evaluation's judge cache."""
        if self._workflow is None:
            from citeflow.evaluation.runner import corpus_index

            self._workflow = corpus_index(self.dataset, self.context).kb.workflow(self.model())
            if self._workflow.synthesizer.check is not None:
                self._workflow.synthesizer.check = self.check
        return self._workflow

    @cached_property
    def check(self) -> JudgeCheck | None:
        """The citation judge the settings ask for, as the workflow decides it, in front of
        the judge cache (built on first use; the model is loaded on the first question the
        cache cannot answer); None when it is off."""
        from citeflow.citations.judge import LLMJudge, TokenLogprobs, build_judge_check, judge_on
        from citeflow.evaluation.judging import CachedJudge

        settings = self.context.settings
        given = self.llm
        if given is not None and build_judge_check(settings, given) is None:
            return None  # off, or a given LLM without log-probabilities
        if given is None and not judge_on(settings):
            return None  # (every provider's LLM built from settings gives log-probabilities)

        def make_judge() -> LLMJudge:
            model = self.model()
            if not isinstance(model, TokenLogprobs):  # pragma: no cover - checked above
                raise TypeError(f"{type(model).__name__} gives no log-probabilities")
            return LLMJudge(model)

        self.judge_cache = CachedJudge(self.context.cache_dir / "judge", self.name, make_judge)
        return JudgeCheck(
            self.judge_cache, cut=settings.citation_judge_cut, timeout=settings.llm_timeout
        )

    def close(self) -> None:
        if self.judge_cache is not None:
            self.judge_cache.save()
        for model in self._owned:
            close = getattr(model, "close", None)
            if callable(close):
                close()
        self._owned.clear()


def repair_policy(settings: Settings) -> RepairPolicy:
    """The workflow's citation repair under ``settings``: what every replay applies."""
    from citeflow.workflows.citation_query import QueryOptions

    return QueryOptions.from_settings(settings).repair_policy()


def recorded_answers(
    dataset: BeirDataset, query_ids: Sequence[str], context: EvalContext
) -> dict[str, dict[str, Any]]:
    """The answers `citeflow eval --citations` recorded for ``query_ids`` under ``context``'s
    settings, by query id; nothing is generated (a claim never answered is an error)."""
    import asyncio

    cache = _Generations(dataset, context, None).cache
    records, _ = asyncio.run(agenerate(dataset, query_ids, cache, workflow=None, progress=False))
    return records


def _claims(dataset: BeirDataset, split: Split, *, sentences: bool = False) -> list[str]:
    """The half's checkable claims; ``sentences``: only claims with gold evidence will do."""
    ids = evidence_queries(dataset, split) if sentences else judged_queries(dataset, split)
    if not ids:
        wanted = "gold evidence" if sentences or dataset.evidence else "a relevant document"
        raise InvalidRequestError(
            f"{dataset.name}/{dataset.split} has no claims with {wanted} in its {split} half "
            f"(evidence_{dataset.split}.jsonl, qrels/{dataset.split}.tsv) to check citations "
            "against"
        )
    return ids


def citation_section(
    dataset: BeirDataset,
    context: EvalContext,
    *,
    claims: int,
    template: str = DEFAULT_QUESTION,
    llm: LLM | None = None,
    half: Split = "evaluation",
) -> CitationResult:
    """``citeflow eval --citations N``: the first N evaluation-half claims with gold evidence
    (without any in the dataset: with a relevant document, checked at document level).

    ``half`` (``--half calibration``) answers the other half's claims instead: on a split whose
    calibration half nothing was calibrated on (SciFact train has no gold sentences), these are
    claims no setting was chosen on, a second untouched set.
    """
    settings = context.settings
    ids = _claims(dataset, half)
    generations = _Generations(dataset, context, llm)
    try:
        return evaluate_citations(
            dataset,
            ids[:claims],
            generations.cache,
            workflow=generations.workflow,
            policy=repair_policy(settings),
            template=template,
            progress=context.progress,
            info={
                "llm": generations.name,
                "split": half,
                "available": len(ids),
                "level": evidence_level(dataset),
            },
            rescore=_RoundOne(dataset, context),
            check=generations.check,
        )
    finally:
        generations.close()


def calibration_section(
    dataset: BeirDataset,
    context: EvalContext,
    *,
    template: str = DEFAULT_QUESTION,
    claims: int | None = None,
    llm: LLM | None = None,
) -> CalibrationReport:
    """``citeflow eval --calibrate [--citations N]``: the support threshold's tables.

    Always: every calibration-half claim scored against the sources built for its question. With
    ``claims``: also the workflow's answers to the first N calibration-half claims, replayed at
    each threshold. The sources are cached next to the generations: a re-run needs no index.
    """
    settings = context.settings
    ids = _claims(dataset, "calibration", sentences=True)
    facts = {
        **generation_facts(settings, index_key=_index_key(dataset, context), llm="none"),
        "template": template,
        "claims": ids,
    }
    cache = GenerationCache.for_facts(context.cache_dir / "calibration", dataset.name, facts)
    try:
        known: dict[str, list[dict[str, str]]] = json.loads(
            (cache.directory / "sources.json").read_text(encoding="utf-8")
        )
    except (OSError, ValueError):
        known = {}
    round_one = _RoundOne(dataset, context)

    async def sources_for(question: str) -> list[SourceRecord]:
        if question in known:
            return [SourceRecord(s["doc_id"], s["text"]) for s in known[question]]
        found = [SourceRecord(_doc_id(n), source_text(n)) for n in await round_one(question)]
        known[question] = [{"doc_id": s.doc_id, "text": s.text} for s in found]
        return found

    report = calibrate(
        dataset, sources_for, query_ids=ids, template=template, progress=context.progress
    )
    if round_one.retriever is not None:
        cache.write("config.json", cache.facts, only_new=True)
        cache.write("sources.json", known)
    report.info = {"cache": str(cache.directory), "template": template, "scorer": "LexicalSupport"}
    if claims:
        import asyncio

        generations = _Generations(dataset, context, llm)
        try:
            records, _ = asyncio.run(
                agenerate(
                    dataset,
                    ids[:claims],
                    generations.cache,
                    workflow=generations.workflow,
                    template=template,
                    progress=context.progress,
                    desc="calibration answers",
                    rescore=round_one,
                )
            )
        finally:
            generations.close()
        report.answers = sweep(dataset, records, repair_policy(settings))
        report.relevance = settings.citation_relevance
        report.answer_claims = len(records)
        report.info["llm"] = generations.name
    return report
