"""Azure AI Search's Custom Web API envelope, in and out.

In: ``{"values": [{"recordId", "data": {"text"}}]}``, read record by record (`read_records`):
a bad record is that record's errors, not the call's. Out: ``{"values": [{"recordId", "data":
{"vector"}, "errors", "warnings"}]}`` in the request's order, each record rendered to JSON as
soon as its vector exists (`vector_json`, `errors_json`, joined by `SkillAnswer`). The pydantic
models document the envelope in the OpenAPI schema.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from citeflow.api.errors import BadRequestError, PayloadTooLargeError
from citeflow.settings import ServerSettings


class SkillInput(BaseModel):
    """A record's ``data``: the skill input named ``text``."""

    model_config = ConfigDict(extra="allow")

    text: str = Field(description="The text to embed (at most 32,000 characters by default).")


class SkillRecord(BaseModel):
    """One record of a skill or vectorizer call."""

    model_config = ConfigDict(extra="allow")

    recordId: str = Field(description="Unique within the call; echoed in the answer.")
    data: SkillInput


class SkillRequest(BaseModel):
    """A Custom Web API skill (or vectorizer) call: up to 1,000 records by default."""

    model_config = ConfigDict(extra="allow")

    values: list[SkillRecord]


class SkillMessage(BaseModel):
    """An error or warning of one record."""

    message: str


class SkillVector(BaseModel):
    """A record's output: ``vector``, or nothing (``{}``) when the record has errors."""

    vector: list[float] | None = Field(default=None, description="Absent on a record error.")


class SkillResult(BaseModel):
    """One record's answer, in the order of the request."""

    recordId: str | None = Field(description="The request's recordId; null if it had none.")
    data: SkillVector
    errors: list[SkillMessage] | None = None
    warnings: list[SkillMessage] | None = None


class SkillResponse(BaseModel):
    """The answer to a skill (or vectorizer) call."""

    values: list[SkillResult]


@dataclass(frozen=True, slots=True)
class Record:
    """A request record as read: its id (None if missing or not a string), its text (None when
    the record is refused) and what is wrong with it."""

    record_id: str | None
    text: str | None
    errors: tuple[str, ...] = ()


def _kind(value: Any) -> str:
    """A JSON value's type, as a message names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "a string"


def _text_error(data: dict[str, Any], max_chars: int) -> str | None:
    """What is wrong with ``data["text"]``, or None."""
    if "text" not in data:
        others = [key for key in ("imageUrl", "imageBinary") if key in data]
        if others:
            return f"data.{others[0]}: citeflow embeds text only; send data.text"
        return "data.text is missing: map the skill input named 'text' to the text to embed"
    text = data["text"]
    if not isinstance(text, str):
        return f"data.text must be a string, not {_kind(text)}"
    if not text.strip():
        return "data.text is empty: there is nothing to embed"
    if len(text) > max_chars:
        return (
            f"data.text is {len(text):,} characters long, over the limit of {max_chars:,}; "
            "split it first (e.g. with the Text Split skill)"
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"data.text holds a lone UTF-16 surrogate (\\u{ord(text[exc.start]):04x}), which is "
            "not valid Unicode"
        )
    return None


def read_record(value: Any, max_chars: int) -> Record:
    """One element of ``values``, checked: every problem of it is listed."""
    if not isinstance(value, dict):
        return Record(
            None,
            None,
            (f"the record is {_kind(value)}, not an object {{'recordId': ..., 'data': ...}}",),
        )
    errors: list[str] = []
    record_id = value.get("recordId")
    if record_id is None:
        errors.append("recordId is missing: every record needs a unique string recordId")
    elif not isinstance(record_id, str):
        errors.append(f"recordId must be a string, not {_kind(record_id)}")
        record_id = None
    data = value.get("data")
    if not isinstance(data, dict):
        what = "missing" if data is None else f"{_kind(data)}, not an object"
        errors.append(f"data is {what}: expected {{'text': '...'}}")
    elif (problem := _text_error(data, max_chars)) is not None:
        errors.append(problem)
    if errors:
        return Record(record_id, None, tuple(errors))
    assert isinstance(data, dict)
    return Record(record_id, data["text"])


def read_records(body: dict[str, Any], options: ServerSettings) -> list[Record]:
    """The records of a call, each checked.

    Raises:
        BadRequestError: ``values`` is missing or not a list (400).
        PayloadTooLargeError: more than ``max_skill_records`` records (413).
    """
    values = body.get("values")
    if values is None:
        raise BadRequestError(
            "values is missing: send {'values': [{'recordId': ..., 'data': {'text': ...}}]}",
            param="values",
        )
    if not isinstance(values, list):
        raise BadRequestError(f"values must be an array, not {_kind(values)}", param="values")
    limit = options.max_skill_records
    if len(values) > limit:
        raise PayloadTooLargeError(
            f"{len(values):,} records in one call, over the limit of {limit:,}; set the skill's "
            f"batchSize to {limit:,} or less",
            param="values",
        )
    return [read_record(value, options.max_skill_text_chars) for value in values]


_COMPACT = (",", ":")


def vector_json(record_id: str | None, vector: Sequence[float]) -> str:
    """A record's answer with its vector (rendered as `SkillResult` would be)."""
    return (
        f'{{"recordId":{json.dumps(record_id)},"data":{{"vector":'
        f'{json.dumps(vector, separators=_COMPACT)}}},"errors":null,"warnings":null}}'
    )


def errors_json(record_id: str | None, messages: Sequence[str]) -> str:
    """A refused record's answer: ``"data": {}`` and its errors."""
    errors = json.dumps([{"message": m} for m in messages], separators=_COMPACT)
    return f'{{"recordId":{json.dumps(record_id)},"data":{{}},"errors":{errors},"warnings":null}}'


class SkillAnswer(Response):
    """The ``{"values": [...]}`` body, joined from records rendered one by one."""

    media_type = "application/json"

    def __init__(self, parts: Sequence[str]) -> None:
        super().__init__(('{"values":[' + ",".join(parts) + "]}").encode())
