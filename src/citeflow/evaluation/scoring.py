"""Scoring recorded answers: are they cited, are the citations right, is the answer right?

Per dataset, over the answers whose sources hold a gold (relevant) document:

* **cited**: the share of those answers with at least one citation;
* **document precision**: the share of citations whose source is cut from a relevant document
  (over every answer's citations), and the same over the answers whose sources hold one: a
  citation in an answer whose sources hold none is wrong whatever the check does (retrieval
  missed), so the gap between the two is retrieval's share of the wrong citations;
* **sentence precision** (datasets with gold rationale sentences, SciFact): the share of
  citations whose quote is one of the gold sentences (it covers half of one, or one covers half
  of it);
* **citations per answer**, **unsupported sentences** (reported by citeflow, per answer);
* **broken sentences**: answer sentences left with a space before punctuation, doubled
  punctuation, an empty bracket, or a clause of function words or a preposition, article or
  conjunction before the final stop ("which is.", "reported in."), a sentence opening with
  a lower-case word (its subject was a marker: "shows that X."), an opening phrase left
  without its object ("According to, X.") or the word "Source" without its number;
* **accuracy**: HotpotQA: a gold answer string stands in the answer (SQuAD normalisation:
  lower case, no punctuation or articles); PubMedQA: the answer's decision is the gold one
  (its first word when yes, no or maybe, else no when its first sentence denies, yes when it
  states);
* **seconds per answer** (median).
"""

from __future__ import annotations

import re
import statistics
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from citeflow.citations.markers import OBJECT_WORDS, find_markers, strip_markers
from citeflow.citations.saying import CONJUNCTION
from citeflow.citations.support import negates
from citeflow.citations.text import ends_no_sentence, split_sentences
from citeflow.evaluation.dataset import BeirDataset
from citeflow.evaluation.table import text_table

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans(dict.fromkeys(string.punctuation, " "))
_FUNCTION_WORDS = (
    "which|that|who|is|are|was|were|and|or|but|as|of|to|in|on|at|by|for|with|from|the|a|an|this"
)
_BROKEN = re.compile(
    r"\s[.,;:!?](?!\d)"  # a space before punctuation
    r"|[,;:]\s*[.!?]"  # a clause cut off: "first,."
    r"|(?<!\.)\.\.(?!\.)|[!?]\.|[,;]{2}"  # doubled punctuation (an ellipsis is fine)
    r"|\[\s*[,;]?\s*\]|\(\s*\)|【\s*】"  # an empty bracket
    rf"|,\s+(?:{_FUNCTION_WORDS})(?:\s+(?:{_FUNCTION_WORDS}))*\s*[.!?]$"  # ", which is."
    rf"|\s(?:{OBJECT_WORDS})\s*[.!?]$"  # a word whose object was a marker: "reported in."
    r"|(?-i:^[a-z]{2}|(?<=\w\w\w[.!?])\s+[a-z]{2})"  # one whose subject was: "It is. shows that"
    # a phrase cut off, opening the sentence or a clause: "According to, X", "Y, and as notes, X"
    rf"|(?:^|[,;]\s*|{CONJUNCTION}\s+)(?:according to|based on"
    r"|as \w+ (?:in|by)|as (?:notes?|shows?|says?|states?|reports?|suggests?|indicates?))\s*,"
    r"|(?-i:\bSources?)\s*[.,;:!?]",  # a label without its number: "as stated in Source."
    re.IGNORECASE,
)


def normalise(text: str) -> str:
    """SQuAD's answer normalisation: lower case, no punctuation, no articles, single spaces."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


# markers between a sentence's last word and its full stop or exclamation mark
_MARKERS_BEFORE_STOP = re.compile(r"\w((?:\s*\[[^\[\]]*\])+)\s*([.!])$")


def broken_sentences(answer: str) -> list[str]:
    """The sentences of ``answer`` whose text was left broken."""
    sentences = split_sentences(answer)
    return [
        s
        for i, s in enumerate(sentences)
        if _BROKEN.search(s.strip())
        or (i + 1 < len(sentences) and _cuts_a_name(s.strip()))
        or (i > 0 and _cut_off_tail(s))
    ]


def _cut_off_tail(sentence: str) -> bool:
    """The end of a sentence cut off at an abbreviation's stop, left with no word ("... World
    No [2]. 2 [2]."): a number and a full stop of its own, without a letter."""
    bare = strip_markers(sentence).strip()
    return (
        bare.endswith((".", "!", "?"))
        and any(c.isdigit() for c in bare)
        and not any(c.isalpha() for c in bare)
    )


def _cuts_a_name(sentence: str) -> bool:
    """A marker put inside a name, where a stop was taken for a sentence's end ("than J [1]. M.
    Barrie", "Hey Pa [1]! There's a Goat on the Roof"): the sentence ends on an initial,
    abbreviation or name, markers, then the stop, and the answer goes on (an answer's last word
    may well be a single letter)."""
    match = _MARKERS_BEFORE_STOP.search(sentence)
    if match is None:
        return False
    bare = sentence[: match.start(1)] + match[2] + " "  # the answer goes on after it
    return ends_no_sentence(bare, len(bare) - 2)


def decision_of(answer: str) -> str:
    """A yes/no/maybe answer's decision: its first word when that is yes, no or maybe; else
    what its first sentence does: deny (a negation in it: no) or state (yes)."""
    text = strip_markers(answer)
    words = normalise(text).split()
    if words and words[0] in ("yes", "no", "maybe"):
        return words[0]
    first = split_sentences(text)[:1]
    return "no" if first and negates(first[0]) else "yes"


def correct_answer(answer: str, gold: Any) -> bool | None:
    """Whether ``answer`` gives the ``gold`` answer (None: the dataset has none for it)."""
    if isinstance(gold, Mapping) and "decision" in gold:
        return decision_of(answer) == str(gold["decision"]).lower()
    if isinstance(gold, list) and gold:
        said = normalise(strip_markers(answer))
        for option in gold:
            wanted = normalise(str(option))
            if wanted in ("yes", "no"):
                if decision_of(answer) == wanted:
                    return True
            elif wanted and re.search(rf"\b{re.escape(wanted)}\b", said):
                return True
        return False
    return None


def _overlaps(quote: str, gold: str) -> bool:
    a, b = normalise(quote), normalise(gold)
    if not a or not b:
        return False
    return (b in a and len(b) * 2 >= len(a)) or (a in b and len(a) * 2 >= len(b))


@dataclass
class DatasetScore:
    """The figures of one dataset's answers (see the module's docstring)."""

    answers: int = 0
    with_gold: int = 0
    cited_with_gold: int = 0
    citations: int = 0
    citations_with_gold: int = 0
    doc_correct: int = 0
    sentence_checked: int = 0
    sentence_correct: int = 0
    broken: int = 0
    unsupported: int = 0
    accuracy_known: int = 0
    accurate: int = 0
    seconds: list[float] = field(default_factory=list)

    def add(self, score: DatasetScore) -> None:
        for name, value in vars(score).items():
            if isinstance(value, list):
                getattr(self, name).extend(value)
            else:
                setattr(self, name, getattr(self, name) + value)

    def figures(self) -> dict[str, float | int | None]:
        def ratio(a: int, b: int) -> float | None:
            return round(a / b, 3) if b else None

        return {
            "answers": self.answers,
            "cited": ratio(self.cited_with_gold, self.with_gold),
            "doc_precision": ratio(self.doc_correct, self.citations),
            "doc_precision_gold_retrieved": ratio(self.doc_correct, self.citations_with_gold),
            "sentence_precision": ratio(self.sentence_correct, self.sentence_checked),
            "citations_per_answer": ratio(self.citations, self.answers),
            "citations": self.citations,
            "unsupported_per_answer": ratio(self.unsupported, self.answers),
            "broken_sentences": self.broken,
            "accuracy": ratio(self.accurate, self.accuracy_known),
            "seconds_median": round(statistics.median(self.seconds), 2) if self.seconds else None,
        }


def score_record(
    record: Mapping[str, Any], dataset: BeirDataset, answer: str | None = None
) -> DatasetScore:
    """One recorded answer's figures (``answer``: the text to score instead of the recorded
    one, e.g. the raw model text re-checked under other settings)."""
    qid = str(record["query_id"])
    text = record["answer"] if answer is None else answer
    sources: Sequence[Mapping[str, Any]] = record["sources"]
    relevant = dataset.relevant(qid)
    gold_sentences = [s for _, _, sents in dataset.evidence_texts(qid) for s in sents]
    score = DatasetScore(answers=1, seconds=[float(record.get("seconds") or 0.0)])
    score.with_gold = int(any(s["doc_id"] in relevant for s in sources))
    numbers = [n for m in find_markers(text) for n in m.numbers if 1 <= n <= len(sources)]
    score.citations = len(numbers)
    score.citations_with_gold = score.citations * score.with_gold
    score.cited_with_gold = int(score.with_gold == 1 and bool(numbers))
    score.doc_correct = sum(sources[n - 1]["doc_id"] in relevant for n in numbers)
    if gold_sentences and answer is None:
        quotes = [c["quote"] for c in record.get("citations", [])]
        score.sentence_checked = len(quotes)
        score.sentence_correct = sum(any(_overlaps(q, g) for g in gold_sentences) for q in quotes)
    score.broken = len(broken_sentences(text))
    score.unsupported = len(record.get("unsupported", []))
    verdict = correct_answer(text, dataset.answers.get(qid))
    if verdict is not None:
        score.accuracy_known, score.accurate = 1, int(verdict)
    return score


def score_all(
    records: Iterable[Mapping[str, Any]], dataset: BeirDataset, *, raw: bool = False
) -> DatasetScore:
    """The figures of many answers (``raw``: of the model's own text, before any checking)."""
    total = DatasetScore()
    for record in records:
        total.add(score_record(record, dataset, record["raw_text"] if raw else None))
    return total


#: the table's columns: figure name → heading
_COLUMNS = {
    "answers": "answers",
    "cited": "cited",
    "doc_precision": "doc prec.",
    "doc_precision_gold_retrieved": "doc prec. (gold retrieved)",
    "sentence_precision": "sent. prec.",
    "citations_per_answer": "cit./answer",
    "unsupported_per_answer": "unsupported",
    "broken_sentences": "broken",
    "accuracy": "accuracy",
    "seconds_median": "s/answer",
}


def table(title: str, rows: Mapping[str, DatasetScore]) -> str:
    """One row per (dataset, variant): the issue's figures side by side."""
    body = []
    for name, score in rows.items():
        f = score.figures()
        body.append([name] + ["-" if f[k] is None else str(f[k]) for k in _COLUMNS])
    return text_table(title, ["set", *_COLUMNS.values()], body)
