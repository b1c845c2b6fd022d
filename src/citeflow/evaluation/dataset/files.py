"""Reading and checking each file of a BEIR dataset folder, line by line.

Every problem is a `DatasetError` naming the file (relative to the dataset folder) and the line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from citeflow.errors import InvalidRequestError
from citeflow.evaluation.dataset.records import CorpusDocument, Evidence

__all__ = [
    "DatasetError",
    "read_answers",
    "read_corpus",
    "read_evidence",
    "read_qrels",
    "read_queries",
    "read_sentences",
    "relative_name",
    "require_file",
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


def relative_name(path: Path, root: Path) -> str:
    """`path` relative to the dataset folder when inside it (for error messages)."""
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def require_file(path: Path, root: Path, hint: str = "") -> None:
    """A `DatasetError` unless `path` is a file; `hint` says what the file is needed for."""
    if not path.is_file():
        raise DatasetError(
            relative_name(path, root), 0, "not found" + (f" ({hint})" if hint else "")
        )


def _lines(path: Path, name: str) -> Iterator[tuple[int, str]]:
    """(line number, line) for each non-blank line; an unreadable file is a `DatasetError`."""
    try:
        fh = path.open(encoding="utf-8")
    except OSError as exc:
        raise DatasetError(name, 0, f"cannot read ({exc.strerror})") from None
    with fh:
        try:
            for number, raw in enumerate(fh, start=1):
                if raw.strip():
                    yield number, raw
        except UnicodeDecodeError as exc:
            raise DatasetError(name, 0, f"not UTF-8 text ({exc.reason})") from None


def _jsonl(path: Path, root: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; a bad line is a `DatasetError`."""
    name = relative_name(path, root)
    for number, line in _lines(path, name):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(name, number, f"invalid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise DatasetError(name, number, f"expected a JSON object, got {type(obj).__name__}")
        yield number, obj


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


def _first_time(lines: dict[str, int], record_id: str, name: str, number: int) -> None:
    """Note that ``record_id`` is on line ``number``; a `DatasetError` if an earlier line was."""
    if record_id in lines:
        first = lines[record_id]
        raise DatasetError(name, number, f"duplicate _id {record_id!r} (first on line {first})")
    lines[record_id] = number


def read_corpus(path: Path, root: Path) -> dict[str, CorpusDocument]:
    name = relative_name(path, root)
    corpus: dict[str, CorpusDocument] = {}
    lines: dict[str, int] = {}
    for number, obj in _jsonl(path, root):
        doc_id = _field_id(obj, "_id", name, number)
        text = _field_text(obj, "text", name, number, required=True)
        title = _field_text(obj, "title", name, number, required=False)
        _first_time(lines, doc_id, name, number)
        if not text.strip() and not title.strip():
            raise DatasetError(name, number, f"document {doc_id!r} has no title and no text")
        corpus[doc_id] = CorpusDocument(doc_id, title, text)
    if not corpus:
        raise DatasetError(name, 0, "holds no documents")
    return corpus


def read_queries(path: Path, root: Path) -> tuple[dict[str, str], dict[str, int]]:
    """Query id → text, and query id → line number (to point at an empty query later)."""
    name = relative_name(path, root)
    queries: dict[str, str] = {}
    lines: dict[str, int] = {}
    for number, obj in _jsonl(path, root):
        query_id = _field_id(obj, "_id", name, number)
        text = _field_text(obj, "text", name, number, required=True)
        _first_time(lines, query_id, name, number)
        queries[query_id] = text
    return queries, lines


def read_qrels(
    path: Path,
    root: Path,
    queries: Mapping[str, str],
    corpus: Mapping[str, CorpusDocument],
) -> dict[str, dict[str, int]]:
    name = relative_name(path, root)
    qrels: dict[str, dict[str, int]] = {}
    for number, raw in _lines(path, name):
        line = raw.strip()
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


def read_answers(path: Path, root: Path, wanted: set[str]) -> dict[str, Any]:
    """The gold answers of the split's queries (an optional ``answers.json``: query id → answer)."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DatasetError(relative_name(path, root), 0, f"not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise DatasetError(relative_name(path, root), 0, "expected an object: query id -> answer")
    return {str(k): v for k, v in data.items() if str(k) in wanted}


def read_sentences(path: Path, root: Path, wanted: set[str]) -> dict[str, list[str]]:
    name = relative_name(path, root)
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


def read_evidence(
    path: Path,
    root: Path,
    known_queries: Mapping[str, str],
    keep: Mapping[str, str],
) -> tuple[dict[str, list[tuple[int, Evidence]]], set[str]]:
    """Rationales of the kept queries (with their line numbers) and the documents they cite."""
    name = relative_name(path, root)
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
