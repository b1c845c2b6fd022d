"""Property-based fuzzing of the HTTP API: whatever a client sends, no response is a 5xx.

Hand-written strategies for each route's input (chat completion bodies, well-formed or not,
raw bytes, lone surrogates, deep nesting; multipart uploads with odd file names; collection
names, document ids and signed-link parameters; search bodies of either form; wrong methods and
paths), sent through ASGI to the app over fakes. Every response must be under 500; every JSON
response an object (an error's in the OpenAI shape); every stream must end with ``data: [DONE]``.

Bounded for CI: a fixed number of examples from a fixed seed (``derandomize``), a few seconds
in all. To explore further: ``FUZZ_EXAMPLES=2000 FUZZ_RANDOM=1 pytest tests/test_server_fuzz.py``.
Over 400 lines: most of it is the input strategies, one per route, which only this file uses.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from citeflow.api.schemas import ROLES
from citeflow.knowledge_base import KnowledgeBase
from citeflow.testing.llm import ScriptedLLM
from tests.server_helpers import asgi_client, make_engine, parse_sse

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=not os.environ.get("FUZZ_RANDOM"),
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
KEY = "fuzz-key"
BOUNDARY = "fuzzboundary"
MULTIPART = f"multipart/form-data; boundary={BOUNDARY}"
#: Seconds one request may take before the fuzz test calls it hung.
REQUEST_TIMEOUT = 20.0


# --- strategies ----------------------------------------------------------------------------------
#: Any text, lone surrogates included now and then.
texts = st.one_of(
    st.text(max_size=40),
    st.text(st.characters(categories=["Cs", "L", "N", "P", "Z", "C"]), max_size=12),
    st.sampled_from(["", " ", "...", "..", ".", "citeflow-kb", "kb", "\x00", "a" * 300]),
)
json_leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), texts)
json_values = st.recursive(
    json_leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=10,
)
content_parts = st.lists(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "input_text", "image_url"]) | texts},
        optional={"text": texts | json_values, "image_url": json_values},
    )
    | json_values,
    max_size=3,
)
#: A well-formed turn of a chat, any text in it.
turns = st.fixed_dictionaries({"role": st.sampled_from(ROLES), "content": st.text(max_size=40)})
messages = st.one_of(
    st.fixed_dictionaries(  # mostly well-formed turns, any text
        {"role": st.sampled_from(ROLES), "content": st.text(max_size=40) | content_parts}
    ),
    turns,
    st.fixed_dictionaries(
        {"role": st.sampled_from([*ROLES, "wizard"]) | texts},
        optional={"content": texts | content_parts | json_values, "name": texts},
    ),
)
#: The text of a question: any, and the two kinds the server tells apart.
question_texts = st.one_of(
    st.text(min_size=1, max_size=60),
    st.sampled_from(["### Task:\nGenerate a title.", "Who bought Viaweb?"]),
    texts,
)
questions = st.fixed_dictionaries({"role": st.just("user"), "content": question_texts})
chat_bodies = st.fixed_dictionaries(
    {
        "model": st.one_of(
            st.just("citeflow-kb"),
            st.just("citeflow-kb"),
            st.sampled_from(["kb", "citeflow-nothing", "citeflow-"]),
            texts,
        ),
        "messages": st.one_of(
            st.builds(lambda h, q: [*h, q], st.lists(messages, max_size=3), questions),
            st.builds(lambda q: [q], questions),
            st.lists(messages, max_size=4),
            json_values,
        ),
    },
    optional={
        "stream": st.booleans() | json_values,
        "stream_options": st.one_of(
            st.fixed_dictionaries({}, optional={"include_usage": st.booleans()}), json_values
        ),
        "citeflow": st.one_of(
            st.fixed_dictionaries({}, optional={"source_list": st.booleans() | st.none()}),
            json_values,
        ),
        "tools": json_values,
        "temperature": json_values,
        "user": json_values,
    },
)


#: Requests an Open WebUI could send: valid turns, a user question, any text in them.
well_formed_chats = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["citeflow-kb", "kb"]),
        "messages": st.builds(
            lambda history, question: [*history, question],
            st.lists(turns, max_size=3),
            st.fixed_dictionaries(
                {"role": st.just("user"), "content": question_texts | content_parts}
            ),
        ),
        "stream": st.booleans(),
    },
    optional={
        "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
        "citeflow": st.fixed_dictionaries({"source_list": st.booleans() | st.none()}),
        "tools": json_values,
    },
)


def _encode(value: Any, how: str) -> bytes:
    if how == "ascii":  # surrogates as \\udXXX escapes
        return json.dumps(value).encode()
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _raw(
    bodies: st.SearchStrategy[Any], weight: int, nested: bytes = b""
) -> st.SearchStrategy[bytes]:
    """``bodies`` as request bytes: JSON (``weight`` branches of them), JSON cut short, random
    bytes and, after the ``nested`` opening when given, arrays nested thousands deep."""
    # one branch per builds() call: one_of drops a branch that is the very same strategy object
    branches = [
        st.builds(_encode, bodies, st.sampled_from(["ascii", "utf-8"])) for _ in range(weight)
    ]
    branches += [
        st.builds(lambda body, cut: _encode(body, "ascii")[:cut], bodies, st.integers(0, 80)),
        st.binary(max_size=64),
    ]
    if nested:
        deep = st.builds(lambda n: nested + b"[" * n + b"]" * n + b"}", st.integers(1, 3000))
        branches.append(deep)
    return st.one_of(branches)


chat_raw = _raw(chat_bodies, 3, b'{"model": "citeflow-kb", "messages": ')
#: ``POST /search`` bodies: either form, well-formed or not, any text in them.
search_bodies = st.fixed_dictionaries(
    {},
    optional={
        "queries": st.one_of(
            st.lists(st.text(min_size=1, max_size=60) | texts, max_size=3),
            st.lists(st.sampled_from(["Who bought Viaweb?", "ducks"]), min_size=1, max_size=2),
            json_values,
        ),
        "messages": st.one_of(
            st.builds(lambda h, q: [*h, q], st.lists(messages, max_size=3), questions),
            st.lists(messages, max_size=3),
            json_values,
        ),
        "collection_names": st.one_of(
            st.lists(st.sampled_from(["kb", "citeflow-kb", "nothing"]) | texts, max_size=3),
            json_values,
        ),
        "k": st.one_of(st.integers(-2, 60), st.integers(), json_values),
        "retrieval_query_generation_prompt_template": json_values,
    },
)
search_raw = _raw(search_bodies, 2)
content_types = st.sampled_from(
    ["application/json", "application/json", "text/plain", "", "application/json; charset=x"]
)


def _quote(text: str) -> str:
    """``text`` percent-encoded for a URL, surrogates as their (invalid) UTF-8 bytes."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


names = st.one_of(
    st.sampled_from(["kb", "animals", "notes"]),
    st.sampled_from(["kb", "animals", "...", "a" * 65, "-x", "x_1"]),
    texts.map(_quote),
)
doc_ids = texts.map(_quote) | st.sampled_from(["ducks", "x"])


def _multipart(parts: list[tuple[bytes, bytes, bytes]], end: bool) -> bytes:
    """A multipart body of ``parts`` (field name, file name, content), closed when ``end``."""
    head = b'--%s\r\nContent-Disposition: form-data; name="%s"; filename="%s"\r\n'
    part = head + b"Content-Type: text/plain\r\n\r\n%s\r\n"
    body = b"".join(part % (BOUNDARY.encode(), *fields) for fields in parts)
    return body + (f"--{BOUNDARY}--\r\n".encode() if end else b"")


file_names = st.one_of(
    st.builds(
        lambda stem, suffix: stem.encode("utf-8", "surrogatepass") + suffix,
        texts,
        st.sampled_from([b".txt", b".md", b".html", b".pdf", b".docx"]),
    ),
    st.builds(lambda stem: stem.encode() + b".txt", st.text(min_size=1, max_size=20)),
    st.binary(max_size=30),
    texts.map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.sampled_from([b"notes.txt", b"a.md", b"..", b"x" * 300 + b".txt", b"../up.txt"]),
)
uploads = st.builds(
    _multipart,
    st.lists(
        st.tuples(
            st.sampled_from([b"file", b"other", b""]),
            file_names,
            st.binary(max_size=200) | st.just(b"Owls hunt at night. Barn owls eat mice."),
        ),
        max_size=3,
    ),
    st.booleans(),
)


Request = tuple[str, str, dict[str, str], bytes | None]  # method, path and query, headers, body


@st.composite
def chat_requests(draw: st.DrawFn) -> Request:
    """``POST /v1/chat/completions`` with any body and content type."""
    headers = {"content-type": draw(content_types)}
    if draw(st.booleans()):
        headers["x-citeflow-source-list"] = draw(st.sampled_from(["true", "no", "", "1"]))
    return "POST", "/v1/chat/completions", headers, draw(chat_raw)


@st.composite
def well_formed_chat_requests(draw: st.DrawFn) -> Request:
    """``POST /v1/chat/completions`` as a client means it, with any text in the messages."""
    body = _encode(draw(well_formed_chats), draw(st.sampled_from(["ascii", "utf-8"])))
    return "POST", "/v1/chat/completions", {"content-type": "application/json"}, body


@st.composite
def document_requests(draw: st.DrawFn) -> Request:
    """Upload, list and delete documents, fetch a document's file, get a model."""
    route = draw(st.sampled_from(["upload", "upload", "upload", "list", "delete", "file", "model"]))
    name = draw(st.sampled_from(["kb", "animals"]) | names)
    if route == "upload":
        kinds = [MULTIPART, MULTIPART, "multipart/form-data", "text/plain"]
        content_type = draw(st.sampled_from(kinds))
        path = f"/v1/collections/{name}/documents"
        return "POST", path, {"content-type": content_type}, draw(uploads)
    if route == "list":
        return "GET", f"/v1/collections/{name}/documents", {}, None
    if route == "delete":
        return "DELETE", f"/v1/collections/{name}/documents/{draw(doc_ids)}", {}, None
    if route == "file":
        query = draw(
            st.sampled_from(["", "?expires=0&sig=x", "?expires=99999999999999&sig=", "?sig=%FF"])
            | texts.map(lambda t: f"?expires={_quote(t)}&sig={_quote(t)}")
        )
        return "GET", f"/v1/documents/{name}/{draw(doc_ids)}/file{query}", {}, None
    return "GET", f"/v1/models/{name}", {}, None


@st.composite
def well_formed_upload_requests(draw: st.DrawFn) -> Request:
    """An upload as a client means it: ``file`` parts with any names and contents."""
    files = draw(
        st.lists(
            st.tuples(
                st.just(b"file"),
                st.from_regex(r"\w[\w .()-]{0,30}\.(txt|md|html)", fullmatch=True).map(str.encode),
                st.one_of(
                    st.text(max_size=200).map(str.encode),
                    st.just(b"Owls hunt at night. Barn owls eat mice."),
                    st.binary(max_size=100),
                ),
            ),
            min_size=1,
            max_size=3,
            unique_by=lambda part: part[1].strip(),
        )
    )
    name = draw(st.sampled_from(["kb", "animals", "notes"]))
    headers = {"content-type": MULTIPART}
    return "POST", f"/v1/collections/{name}/documents", headers, _multipart(files, True)


#: Azure AI Search's Custom Web API records, well-formed or not.
skill_records = st.one_of(
    st.fixed_dictionaries({"recordId": texts, "data": st.fixed_dictionaries({"text": texts})}),
    st.fixed_dictionaries({"recordId": texts, "data": st.fixed_dictionaries({"text": texts})}),
    st.fixed_dictionaries(
        {},
        optional={
            "recordId": json_values,
            "data": st.fixed_dictionaries(
                {}, optional={"text": json_values, "imageUrl": json_values}
            )
            | json_values,
        },
    ),
    json_values,
)
skill_bodies = st.one_of(
    st.fixed_dictionaries({"values": st.lists(skill_records, max_size=6)}),
    st.fixed_dictionaries({"values": st.lists(skill_records, max_size=6)}),
    st.fixed_dictionaries({}, optional={"values": json_values, "other": json_values}),
    json_values,
)
skill_raw = _raw(skill_bodies, 2, b'{"values": ')


@st.composite
def skill_requests(draw: st.DrawFn) -> Request:
    """``POST /v1/skills/embeddings`` (the Azure AI Search skill and vectorizer), any body."""
    query = draw(
        st.sampled_from(["", "", "?input_type=query", "?input_type=document", "?input_type="])
        | texts.map(lambda t: f"?input_type={_quote(t)}")
    )
    headers = {"content-type": draw(content_types)}
    return "POST", f"/v1/skills/embeddings{query}", headers, draw(skill_raw)


@st.composite
def search_requests(draw: st.DrawFn) -> Request:
    """``POST /search`` (or ``/v1/search``) with any body."""
    path = draw(st.sampled_from(["/search", "/v1/search"]))
    return "POST", path, {"content-type": draw(content_types)}, draw(search_raw)


@st.composite
def other_requests(draw: st.DrawFn) -> Request:
    """Any method on any path of the API, and paths that are not."""
    method = draw(st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]))
    path = draw(
        st.sampled_from(
            [
                "/v1/chat/completions",
                "/v1/models",
                "/health",
                "/health/ready",
                "/v1/collections/kb/documents",
                "/v1/collections/kb/documents/ducks",
                "/v1/documents/kb/ducks/file",
                "/search",
                "/v1/search",
                "/v1/skills/embeddings",
                "/openapi.json",
                "/docs",
                "/v1/nothing",
            ]
        )
        | names.map(lambda name: f"/v1/{name}")
    )
    return method, path, {}, draw(st.binary(max_size=32) | st.none())


any_requests = st.one_of(
    well_formed_chat_requests(),
    chat_requests(),
    document_requests(),
    search_requests(),
    skill_requests(),
    other_requests(),
)


# --- the app ------------------------------------------------------------------------------------
def _echo(prompt: str) -> str:
    """An answer that repeats some of the question (whatever it holds) and cites source 1."""
    return f"Echo: {prompt[-80:]} [1]."


@pytest.fixture
async def client(kb: KnowledgeBase) -> AsyncIterator[httpx.AsyncClient]:
    engine = make_engine(kb, ScriptedLLM([_echo]), max_upload_bytes=4000, max_body_bytes=20_000)
    async with asgi_client(engine, raise_errors=False) as c:
        yield c


async def _check(client: httpx.AsyncClient, request: Request, **extra: str | bytes) -> None:
    """Send ``request`` with the ``extra`` headers: the response is no 5xx, and well-formed."""
    method, path, headers, body = request
    what = f"{method} {path} {headers} {body!r:.300}"
    sent = client.request(method, path, headers={**headers, **extra}, content=body)
    response = await asyncio.wait_for(sent, REQUEST_TIMEOUT)
    kind = response.headers.get("content-type", "").split(";")[0]
    event(f"{method} {response.status_code} {kind}")  # statistics
    assert response.status_code < 500, f"{what} -> {response.status_code}: {response.text[:500]}"
    if method == "HEAD":
        assert not response.content, what
    elif kind.startswith("application/json"):
        answer = response.json()
        assert isinstance(answer, dict), what
        if response.status_code >= 400:
            assert set(answer["error"]) == {"message", "type", "param", "code"}, what
            assert isinstance(answer["error"]["message"], str) and answer["error"]["message"], what
    elif kind.startswith("text/event-stream"):
        items = parse_sse(response.text)
        assert items[-1] == "[DONE]", f"{what}: the stream does not end with [DONE]"


# --- the properties ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "requests",
    [
        well_formed_chat_requests(),
        chat_requests(),
        well_formed_upload_requests() | document_requests(),
        search_requests(),
        skill_requests(),
        other_requests(),
    ],
    ids=["well_formed_chat", "chat", "document", "search", "skill", "method_or_path"],
)
@FUZZ
@given(data=st.data())
async def test_no_request_gets_a_5xx(
    client: httpx.AsyncClient, requests: st.SearchStrategy[Request], data: st.DataObject
) -> None:
    await _check(client, data.draw(requests, label="request"))


@FUZZ
@given(
    authorization=st.one_of(
        st.just(f"Bearer {KEY}"),
        st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=30),
        st.builds(
            lambda t: f"Bearer {t}",
            st.text(st.characters(min_codepoint=32, max_codepoint=255), max_size=20),
        ),
    ),
    request=any_requests,
)
async def test_no_request_gets_a_5xx_with_keys(
    kb: KnowledgeBase, authorization: str, request: Request
) -> None:
    engine = make_engine(kb, ScriptedLLM([_echo]), keys=[KEY], max_upload_bytes=4000)
    async with asgi_client(engine, raise_errors=False) as c:
        await _check(c, request, authorization=authorization.encode("latin-1"))
