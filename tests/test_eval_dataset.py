"""Loading BEIR-format datasets, and a clear error naming file and line for each bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from citeflow.errors import CiteflowError, InvalidRequestError
from citeflow.evaluation.dataset import DatasetError, Evidence, load_beir
from tests.conftest import MINI


def _write(path: Path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n")


def _set_line(path: Path, index: int, text: str) -> None:
    """Line ``index`` (from 0) of ``path`` becomes ``text`` (one past the last: is added)."""
    lines = path.read_text().splitlines()
    lines[index : index + 1] = [text]
    _write(path, lines)


# --- loading -----------------------------------------------------------------------------------
def test_loads_the_mini_dataset() -> None:
    ds = load_beir(MINI)
    assert ds.name == "beir_mini" and ds.split == "test"
    assert len(ds.corpus) == 12
    assert ds.corpus["d1"].title == "Ducks"
    assert ds.corpus["d1"].text.startswith("Ducks are waterfowl birds.")
    assert list(ds.queries) == ["q1", "q2", "q3", "q4"]  # only the split's queries, qrels order
    assert ds.qrels["q1"] == {"d1": 2, "d2": 1}
    assert ds.judgements == 6
    assert ds.relevant("q2") == {"d3", "d4"}
    assert ds.full_corpus
    assert "4 queries, 6 judgements, 12 documents" in ds.summary()


def test_loads_gold_evidence_with_sentence_texts() -> None:
    ds = load_beir(MINI)
    assert ds.evidence["q2"] == [
        Evidence("d3", "SUPPORT", (0,)),
        Evidence("d4", "SUPPORT", (1,)),
    ]
    assert "q3" not in ds.evidence  # a claim with no rationale
    assert ds.evidence_texts("q1") == [
        (
            "d1",
            "SUPPORT",
            ["Ducks are waterfowl birds.", "They live near ponds, rivers and lakes."],
        )
    ]
    # sentences join back into the corpus text
    assert " ".join(ds.sentences["d1"]) == ds.corpus["d1"].text
    assert load_beir(MINI, evidence=False).evidence == {}


def test_other_split_without_evidence() -> None:
    ds = load_beir(MINI, split="train")
    assert list(ds.queries) == ["q5"]
    assert ds.evidence == {}


def test_limit_keeps_first_queries_with_all_their_judgements() -> None:
    ds = load_beir(MINI, limit=2)
    assert list(ds.queries) == ["q1", "q2"]
    assert ds.qrels == {"q1": {"d1": 2, "d2": 1}, "q2": {"d3": 2, "d4": 1}}
    assert set(ds.evidence) == {"q1", "q2"}
    assert len(ds.corpus) == 12  # the corpus is untouched


def test_corpus_limit_keeps_judged_documents_first() -> None:
    ds = load_beir(MINI, limit=1, corpus_limit=3)
    assert set(ds.corpus) == {"d1", "d2", "d3"}  # judged d1, d2; then d3, first in file order
    assert not ds.full_corpus
    assert "corpus slice" in ds.summary()
    # fewer slots than judged documents: every judged document is still kept
    assert set(load_beir(MINI, limit=2, corpus_limit=1).corpus) == {"d1", "d2", "d3", "d4"}


def test_corpus_digest_identifies_the_slice() -> None:
    full, sliced = load_beir(MINI), load_beir(MINI, corpus_limit=5)
    assert full.corpus_digest() == load_beir(MINI, limit=1).corpus_digest()
    assert full.corpus_digest() != sliced.corpus_digest()


def test_crlf_qrels_and_blank_lines(mini_copy: Path) -> None:
    qrels = mini_copy / "qrels" / "test.tsv"
    qrels.write_bytes(qrels.read_bytes().replace(b"\n", b"\r\n") + b"\r\n")
    corpus = mini_copy / "corpus.jsonl"
    corpus.write_text(corpus.read_text() + "\n\n")
    assert load_beir(mini_copy).judgements == 6


def test_ids_may_be_json_numbers(mini_copy: Path) -> None:
    _write(mini_copy / "queries.jsonl", [json.dumps({"_id": 7, "text": "Why do ducks quack?"})])
    _write(mini_copy / "qrels" / "test.tsv", ["query-id\tcorpus-id\tscore", "7\td1\t1"])
    assert load_beir(mini_copy, evidence=False).queries == {"7": "Why do ducks quack?"}


# --- errors ------------------------------------------------------------------------------------
def _error(path: Path, **kwargs: object) -> DatasetError:
    with pytest.raises(DatasetError) as info:
        load_beir(path, **kwargs)  # type: ignore[arg-type]
    err = info.value
    assert isinstance(err, InvalidRequestError) and isinstance(err, CiteflowError)
    assert err.status == 400
    return err


def test_not_a_folder(tmp_path: Path) -> None:
    err = _error(tmp_path / "nope")
    assert "not a dataset folder" in str(err)


@pytest.mark.parametrize("name", ["corpus.jsonl", "queries.jsonl"])
def test_missing_file(mini_copy: Path, name: str) -> None:
    (mini_copy / name).unlink()
    err = _error(mini_copy)
    assert str(err) == f"{name}: not found"
    assert (err.file, err.line) == (name, 0)


def test_missing_split_lists_the_available_ones(mini_copy: Path) -> None:
    err = _error(mini_copy, split="dev")
    assert str(err) == "qrels/dev.tsv: not found (splits here: test, train)"


def test_invalid_json_line(mini_copy: Path) -> None:
    _set_line(mini_copy / "corpus.jsonl", 2, '{"_id": "d3", "text": "cut off')
    err = _error(mini_copy)
    assert str(err).startswith("corpus.jsonl line 3: invalid JSON (")
    assert (err.file, err.line) == ("corpus.jsonl", 3)


@pytest.mark.parametrize(
    ("name", "line", "text", "message"),
    [
        ("corpus.jsonl", 2, '{"_id": "d2", "title": "Geese"}', "missing field 'text'"),
        ("corpus.jsonl", 2, '{"title": "Geese", "text": "Geese fly."}', "missing field '_id'"),
        ("queries.jsonl", 2, '{"_id": "q2"}', "missing field 'text'"),
        ("queries.jsonl", 2, '{"text": "Why?"}', "missing field '_id'"),
        ("queries.jsonl", 6, "[1, 2]", "expected a JSON object, got list"),
        (
            "corpus.jsonl",
            1,
            '{"_id": "d1", "title": "Ducks", "text": ["not", "a", "string"]}',
            "field 'text' must be a string",
        ),
        (
            "corpus.jsonl",
            13,
            '{"_id": "d5", "text": "Again."}',
            "duplicate _id 'd5' (first on line 5)",
        ),
        ("qrels/test.tsv", 4, "q2\td99\t1", "corpus id 'd99' is not in corpus.jsonl"),
        (
            "qrels/test.tsv",
            8,
            "q1\td3",
            "expected 3 tab-separated fields (query-id corpus-id score), got 2",
        ),
        ("qrels/test.tsv", 8, "q1\td3\thigh", "score 'high' is not an integer"),
        ("qrels/test.tsv", 8, "q1\td1\t0", "(q1, d1) judged twice with different scores"),
        ("qrels/test.tsv", 8, "q9\td1\t1", "query id 'q9' is not in queries.jsonl"),
        (
            "evidence_test.jsonl",
            1,
            '{"_id": "q1", "evidence": [{"doc_id": "d77", "label": "SUPPORT", "sentences": [0]}]}',
            "doc_id 'd77' is not in corpus_sentences.jsonl",
        ),
        (
            "evidence_test.jsonl",
            2,
            '{"_id": "q2", "evidence": [{"doc_id": "d4", "label": "SUPPORT", "sentences": [7]}]}',
            "sentence index 7 out of range for document 'd4' (3 sentences)",
        ),
    ],
)
def test_a_bad_line_is_named_by_its_file_and_number(
    mini_copy: Path, name: str, line: int, text: str, message: str
) -> None:
    _set_line(mini_copy / name, line - 1, text)
    err = _error(mini_copy)
    assert str(err) == f"{name} line {line}: {message}"
    assert (err.file, err.line) == (name, line)


def test_empty_query_text(mini_copy: Path) -> None:
    _set_line(mini_copy / "queries.jsonl", 2, json.dumps({"_id": "q3", "text": "   "}))
    err = _error(mini_copy)
    assert str(err) == "queries.jsonl line 3: query 'q3' has no text"
    assert err.line == 3
    # a query outside the split may be empty: it is never asked
    assert load_beir(mini_copy, split="train").queries == {"q5": "Why does Mars look red?"}


def test_empty_qrels(mini_copy: Path) -> None:
    _write(mini_copy / "qrels" / "test.tsv", ["query-id\tcorpus-id\tscore"])
    assert str(_error(mini_copy)) == "qrels/test.tsv: holds no judgements"


def test_evidence_needs_the_sentences_file(mini_copy: Path) -> None:
    (mini_copy / "corpus_sentences.jsonl").unlink()
    assert str(_error(mini_copy)) == (
        "corpus_sentences.jsonl: not found (the sentence indices of evidence_test.jsonl)"
    )
    assert load_beir(mini_copy, evidence=False).judgements == 6


def test_limits_must_be_positive() -> None:
    with pytest.raises(InvalidRequestError, match="limit must be at least 1"):
        load_beir(MINI, limit=0)
    with pytest.raises(InvalidRequestError, match="corpus_limit must be at least 1"):
        load_beir(MINI, corpus_limit=0)
