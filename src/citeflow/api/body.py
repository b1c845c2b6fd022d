"""A request's JSON body, parsed into a value the server can safely work with.

``json.loads`` accepts two things that break later, far from the request:

* a lone UTF-16 surrogate (``"\\ud800"``, or its raw bytes): Python keeps it in the string, and
  the first UTF-8 encoding of it (the answer's stream, an LLM request) raises
  `UnicodeEncodeError`, after HTTP 200 was sent;
* deep nesting: ``json.loads`` itself, and any recursive walk after it, raises `RecursionError`
  (a thousand ``[`` is enough).

`parse_json_object` refuses both up front, as HTTP 400 naming what is wrong. A route that checks
its strings one by one itself (`citeflow.api.skills`: a record with a bad text is that record's
error, not the call's) passes ``check_strings=False`` and keeps the depth check.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request

from citeflow.api.errors import BadRequestError, PayloadTooLargeError, param_path

#: Deepest nesting of objects and arrays accepted (Open WebUI's requests nest about 8 deep).
MAX_DEPTH = 64

_SURROGATE = re.compile(r"[\ud800-\udfff]")

#: (parent path, key): a path built into a string only for an error message.
_Path = tuple[Any, str | int] | None


async def read_within(
    request: Request, limit: int, too_large: PayloadTooLargeError
) -> AsyncIterator[bytes]:
    """The pieces of the request body as they arrive; ``too_large`` is raised when a declared
    ``Content-Length`` is over ``limit`` bytes (before a byte is read), or once the body read so
    far is."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    size = 0
    async for piece in request.stream():
        size += len(piece)
        if size > limit:
            raise too_large
        yield piece


def parse_json_object(body: bytes | bytearray, *, check_strings: bool = True) -> dict[str, Any]:
    """``body`` as a JSON object, nested at most `MAX_DEPTH` deep, with valid Unicode strings
    (unless ``check_strings`` is false: then the caller checks the strings it uses).

    Raises:
        BadRequestError: not JSON, not an object, nested too deep, or a string (or key) holds
            a lone surrogate (HTTP 400).
    """
    try:
        value = json.loads(body)
    except RecursionError:
        raise _too_deep() from None
    except ValueError as exc:
        raise BadRequestError(
            f"the request body is not valid JSON: {exc}", code="invalid_json"
        ) from None
    if not isinstance(value, dict):
        raise BadRequestError("the request body must be a JSON object")
    check_json_value(value, check_strings=check_strings)
    return value


def check_json_value(value: Any, *, check_strings: bool = True) -> None:
    """Check a parsed JSON value's depth and (unless ``check_strings`` is false) its strings,
    without recursion.

    Raises:
        BadRequestError: nested deeper than `MAX_DEPTH`, or a lone surrogate in a string.
    """
    stack: list[tuple[Any, int, _Path]] = [(value, 0, None)]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, str) and check_strings:
            _check_text(item, path)
        elif isinstance(item, dict | list):
            if depth >= MAX_DEPTH:
                raise _too_deep()
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in pairs:
                if check_strings and isinstance(key, str):
                    _check_text(key, path)
                stack.append((child, depth + 1, (path, key)))


def _check_text(text: str, path: _Path) -> None:
    found = _SURROGATE.search(text)
    if found is None:
        return
    where = _path_text(path)
    raise BadRequestError(
        f"{where or 'the request body'} holds a lone UTF-16 surrogate "
        f"(\\u{ord(found.group()):04x}), which is not valid Unicode; send well-formed text "
        "(a surrogate escape must be one of a high-low pair)",
        param=where or None,
        code="invalid_unicode",
    )


def _path_text(path: _Path) -> str:
    keys: list[str | int] = []
    while path is not None:
        path, key = path
        keys.append(key)
    return param_path(reversed(keys))


def _too_deep() -> BadRequestError:
    return BadRequestError(
        f"the request body nests objects and arrays more than {MAX_DEPTH} levels deep; "
        "send a flatter JSON object",
        code="invalid_json",
    )
