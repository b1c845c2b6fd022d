"""The wire adapter on scripted workflow events: exact SSE sequences, numbering, sources."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from functools import partial
from typing import Any

from llama_index.core.schema import TextNode
from workflows.events import Event

from citeflow.api.chat_stream import ChatStream
from citeflow.api.links import DocumentLinks, document_path
from citeflow.api.source_events import source_payload
from citeflow.api.sse import DONE, KEEPALIVE, EventStreamResponse, ready_batches, sse_stream
from citeflow.api.webui_tasks import extract_json
from citeflow.citations.markers import cited_numbers
from citeflow.citations.repair import Citation
from citeflow.citations.sources import Source
from citeflow.errors import UpstreamError
from citeflow.events import AnswerDeltaEvent, CitationSourcesEvent, StatusEvent
from citeflow.result import CitedResponse
from tests.server_helpers import content_of, events_of, parse_sse


def _source(number: int, doc_id: str, text: str, score: float = 0.8, **meta: Any) -> Source:
    metadata = {"doc_id": doc_id, "file_name": f"{doc_id}.txt", **meta}
    parent = TextNode(id_=f"{doc_id}:{number}", text=text, metadata=metadata)
    return Source(number, text, doc_id, parent, 0, len(text), score)


def _delta(text: str) -> AnswerDeltaEvent:
    """A checked answer piece citing the sources its markers name (as the workflow sends it)."""
    return AnswerDeltaEvent(text=text, citations=cited_numbers(text))


SOURCES = [
    _source(1, "viaweb", "Yahoo bought Viaweb in 1998.", 0.91),
    _source(2, "ducks", "Ducks live near ponds.", 0.72, file_name="ducks.pdf", page_label="4"),
    _source(3, "viaweb", "Viaweb became Yahoo Store.", 0.65),
    _source(4, "other", "Nothing anyone cites.", 0.3),
]


def _status(stage: str, description: str) -> StatusEvent:
    return StatusEvent(stage=stage, description=description, done=stage == "done")  # type: ignore[arg-type]


def _result(text: str, cited: list[int], sources: Sequence[Source] = SOURCES) -> CitedResponse:
    citations = [Citation(n, "s", f"quote of source {n}", 0, 10, 0.9, "model") for n in cited]
    return CitedResponse(
        response=text,
        source_nodes=[s.with_score() for s in sources],
        sources=list(sources),
        cited=cited,
        citations=citations,
    )


async def _scripted(
    events: Sequence[Event],
    result: CitedResponse | None = None,
    *,
    error: BaseException | None = None,
    delay: float = 0.0,
) -> AsyncGenerator[Event | CitedResponse, None]:
    for event in events:
        if delay:
            await asyncio.sleep(delay)
        yield event
    if error is not None:
        raise error
    assert result is not None
    yield result


async def _run(
    items: AsyncGenerator[Event | CitedResponse, None], keepalive: float = 10.0, **kw: Any
) -> list[Any]:
    writer = ChatStream(model="citeflow-kb", collection="kb", **kw)
    lines = [line async for line in sse_stream(items, writer, keepalive=keepalive)]
    assert all(line.endswith("\n\n") for line in lines)
    return parse_sse("".join(lines))


async def _answer(
    text: str | list[str],
    cited: list[int],
    result: CitedResponse | None = None,
    *,
    delay: float = 0.0,
    **kw: Any,
) -> list[Any]:
    """The SSE items of a run that sends its sources, then ``text`` in checked pieces (one for a
    string), each after ``delay`` seconds."""
    pieces = [text] if isinstance(text, str) else text
    events: list[Event] = [CitationSourcesEvent(query="q", sources=SOURCES), *map(_delta, pieces)]
    scripted = _scripted(events, result or _result("".join(pieces), cited), delay=delay)
    return await _run(scripted, **kw)


def _shape(items: Sequence[Any]) -> list[tuple[Any, ...]]:
    """A compact view: (kind, detail) per SSE item."""
    out: list[tuple[Any, ...]] = []
    for item in items:
        if item == "[DONE]":
            out.append(("DONE",))
        elif isinstance(item, str):
            out.append(("comment", item))
        elif "error" in item:
            out.append(("error", item["error"]["type"]))
        elif "event" in item:
            data = item["event"]["data"]
            if item["event"]["type"] == "status":
                out.append(("status", data["description"], data["done"]))
            else:
                out.append(("source", data["metadata"][0]["source"], data["document"][0]))
        else:
            choice = item["choices"][0]
            if choice["finish_reason"]:
                out.append(("finish", choice["finish_reason"]))
            elif "role" in choice["delta"]:
                out.append(("role", choice["delta"]["role"]))
            else:
                out.append(("text", choice["delta"]["content"]))
    return out


async def test_stream_sends_cited_sources_before_the_text_citing_them() -> None:
    text = [
        "Ducks live near ponds [2]. ",
        "Yahoo bought Viaweb [1][2]. ",
        "It became Yahoo Store [3]. ",
    ]
    events: list[Event] = [
        _status("searching", "Searching"),
        _status("grading", "Checking 4 passages"),
        _status("citing", "Preparing sources"),
        CitationSourcesEvent(query="q", sources=SOURCES),
        _status("writing", "Writing"),
        *(_delta(t) for t in text),
        _status("done", "Done"),
    ]
    items = await _run(_scripted(events, _result("".join(text), [2, 1, 3])))
    assert _shape(items) == [
        ("role", "assistant"),
        ("status", "Searching", False),
        ("status", "Checking 4 passages", False),
        ("status", "Preparing sources", False),
        ("status", "Writing", False),
        ("source", "ducks#1", "Ducks live near ponds."),
        ("text", "Ducks live near ponds [1]. "),
        ("source", "viaweb#2", "Yahoo bought Viaweb in 1998."),
        ("text", "Yahoo bought Viaweb [2][1]. "),
        ("source", "viaweb#3", "Viaweb became Yahoo Store."),
        ("text", "It became Yahoo Store [3]. "),
        ("status", "Done", True),
        ("finish", "stop"),
        ("DONE",),
    ]
    # one chunk object per item, all of the same completion
    chunks = [i for i in items if isinstance(i, dict)]
    assert len({c["id"] for c in chunks}) == 1
    assert all(
        c["object"] == "chat.completion.chunk" and c["model"] == "citeflow-kb" for c in chunks
    )
    assert all(c["choices"] == [] for c in chunks if "event" in c)
    usage = chunks[-1]["usage"]
    assert usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_source_event_shape_matches_open_webui() -> None:
    link = partial(DocumentLinks(None).url, "http://h:8000/")  # an open server's links
    items = await _answer("Ducks live near ponds [2].", [2], link=link)
    (data,) = events_of(items, "source")
    assert data == {
        "source": {
            "id": "ducks",
            "name": "ducks.pdf, page 4",
            "url": "http://h:8000/v1/documents/kb/ducks/file",
        },
        "document": ["Ducks live near ponds."],
        "metadata": [
            {
                "source": "ducks#1",
                "name": "ducks.pdf, page 4",
                "page": 3,
                "doc_id": "ducks",
                "file_name": "ducks.pdf",
            }
        ],
        "distances": [0.72],
    }


def test_source_payload_prefers_the_original_url_and_skips_pages_without_label() -> None:
    web = _source(1, "doc-1", "Text.", url="https://example.org/a.html")
    data = source_payload(web, 1, collection="kb")
    assert data["source"]["url"] == "https://example.org/a.html"
    assert data["metadata"][0]["source"] == "doc-1#1"  # never the URL
    assert "page" not in data["metadata"][0]
    assert document_path("my kb", "a/b") == "/v1/documents/my%20kb/a%2Fb/file"


async def test_only_cited_sources_are_sent_in_first_citation_order() -> None:
    items = await _answer("Viaweb became Yahoo Store [3]. Yahoo bought it [1]. Again [3].", [3, 1])
    keys = [d["metadata"][0]["source"] for d in events_of(items, "source")]
    assert keys == ["viaweb#1", "viaweb#2"]  # two chips for one document, unique keys
    assert content_of(items) == "Viaweb became Yahoo Store [1]. Yahoo bought it [2]. Again [1]."


async def test_each_source_goes_before_the_first_text_citing_it() -> None:
    items = await _answer(["Ducks [4]. ", "Viaweb [1, 2]. ", "Done [4]."], [4, 1, 2])
    shape = _shape(items)
    texts = [s[1] for s in shape if s[0] == "text"]
    assert texts == ["Ducks [1]. ", "Viaweb [2][3]. ", "Done [1]."]
    first_text_with = {
        n: next(i for i, s in enumerate(shape) if s[0] == "text" and f"[{n}]" in s[1])
        for n in (1, 2, 3)
    }
    source_at = {int(s[1].split("#")[1]): i for i, s in enumerate(shape) if s[0] == "source"}
    assert all(source_at[n] < first_text_with[n] for n in (1, 2, 3))


async def test_text_is_held_until_the_sources_are_known() -> None:
    # without a CitationSourcesEvent (a plain workflow), text waits for the final result
    text = "Ducks live near ponds [2]."
    items = await _run(_scripted([_delta(text)], _result(text, [2])))
    assert _shape(items)[1:3] == [
        ("source", "ducks#1", "Ducks live near ponds."),
        ("text", "Ducks live near ponds [1]."),
    ]


async def test_failure_mid_stream_ends_with_an_error_line_then_done() -> None:
    events: list[Event] = [
        _status("writing", "Writing"),
        CitationSourcesEvent(query="q", sources=SOURCES),
        _delta("Ducks live near ponds [2]. "),
    ]
    error = UpstreamError("the LLM provider answered HTTP 500: boom")
    items = await _run(_scripted(events, error=error))
    assert _shape(items)[-4:] == [
        ("text", "Ducks live near ponds [1]. "),
        ("status", "Failed", True),
        ("error", "upstream_error"),
        ("DONE",),
    ]
    # the provider's words are for the server log; the client is told in general terms
    assert items[-2]["error"]["message"] == error.public
    assert "boom" not in items[-2]["error"]["message"]


async def test_unexpected_error_is_a_generic_server_error() -> None:
    items = await _run(_scripted([], error=RuntimeError("secret internals")))
    assert items[-2]["error"]["type"] == "server_error"
    assert "secret" not in items[-2]["error"]["message"]
    assert items[-1] == "[DONE]"


async def test_keepalive_comments_during_silence() -> None:
    items = await _answer("Ducks live near ponds [2].", [2], delay=0.25, keepalive=0.1)
    assert items.count(KEEPALIVE.strip()) >= 2
    assert content_of(items) == "Ducks live near ponds [1]."
    assert items[-1] == DONE.strip()[len("data: ") :]


async def test_include_usage_sends_openai_usage_chunk() -> None:
    items = await _answer("Ducks [2].", [2], include_usage=True)
    finish, usage, done = items[-3:]
    assert finish["choices"][0]["finish_reason"] == "stop" and "usage" not in finish
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] > 0
    assert done == "[DONE]"


async def test_markdown_source_list_on_request() -> None:
    items = await _answer(
        "Ducks live near ponds [2]. Yahoo bought Viaweb [1].", [2, 1], source_list=True
    )
    content = content_of(items)
    assert content.startswith(
        "Ducks live near ponds [1]. Yahoo bought Viaweb [2].\n\n**Sources**\n"
    )
    assert "1. ducks.pdf, page 4: “quote of source 2”" in content
    assert "2. viaweb.txt: “quote of source 1”" in content


def test_non_streaming_completion_carries_sources() -> None:
    text = "Viaweb became Yahoo Store [3]. Ducks live near ponds [2]."
    writer = ChatStream(model="citeflow-kb", collection="kb", prompt_text="question")
    body = writer.completion(_result(text, [3, 2]))
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {
        "role": "assistant",
        "content": "Viaweb became Yahoo Store [1]. Ducks live near ponds [2].",
    }
    assert [s["metadata"][0]["source"] for s in body["sources"]] == ["viaweb#1", "ducks#2"]
    assert body["usage"]["completion_tokens"] > 0


def test_extract_json() -> None:
    assert extract_json('{"title": "Ducks"}') == '{"title": "Ducks"}'
    assert extract_json('Sure! ```json\n{"title": "A {b}"}\n``` done') == '{"title": "A {b}"}'
    assert extract_json('x {broken {"tags": ["a"]} y') == '{"tags": ["a"]}'
    assert extract_json("no json here") == "no json here"


# --- batching of ready events into one write -----------------------------------------------------
async def test_events_ready_together_go_out_in_one_write() -> None:
    """Events written back to back by the workflow are one SSE string (one socket write); the
    result's chunks go out with [DONE]."""
    gate = asyncio.Event()

    async def run() -> AsyncGenerator[Event | CitedResponse, None]:
        yield _status("citing", "Preparing sources")
        yield CitationSourcesEvent(query="q", sources=SOURCES)
        yield _status("writing", "Writing")
        await gate.wait()
        yield _delta("Ducks [2]. ")
        await asyncio.sleep(0.01)
        yield _status("done", "Done")
        yield _result("Ducks [2].", [2])

    writer = ChatStream(model="citeflow-kb", collection="kb")
    stream = sse_stream(run(), writer, keepalive=10.0)
    first = await anext(stream)
    gate.set()
    writes = [first] + [line async for line in stream]
    shapes = [[kind for kind, *_ in _shape(parse_sse(w))] for w in writes]
    assert shapes == [
        ["role", "status", "status"],
        ["source", "text"],
        ["status", "finish", "DONE"],
    ]


async def test_ready_batches_keepalive_and_error_after_the_items() -> None:
    async def items() -> AsyncGenerator[int, None]:
        yield 1
        yield 2
        await asyncio.sleep(0.25)
        yield 3
        raise RuntimeError("boom")

    got: list[Any] = []
    try:
        async for batch in ready_batches(items(), 0.1):
            got.append(batch)
    except RuntimeError as exc:
        got.append(str(exc))
    assert got[0] == [1, 2]
    assert got[1:-2] == [None] * (len(got) - 3) and len(got) >= 4  # keep-alives in the pause
    assert got[-2:] == [[3], "boom"]


async def test_items_that_may_wait_linger_for_company_and_text_never_waits() -> None:
    """Statuses (odd numbers here) a few ms apart share one batch; a text item (even) goes out at
    once with what was held; a lone status waits the linger, not the keep-alive interval."""
    loop = asyncio.get_running_loop()
    started = loop.time()

    async def items() -> AsyncGenerator[int, None]:
        for item in (1, 3, 5):
            yield item
            await asyncio.sleep(0.005)
        yield 2
        await asyncio.sleep(0.05)
        yield 7  # alone: out after the linger
        await asyncio.sleep(0.3)
        yield 4

    batches = ready_batches(items(), 10.0, hold=lambda i: i % 2 == 1, linger=0.1)
    got = [(batch, loop.time() - started) async for batch in batches]
    assert [batch for batch, _ in got] == [[1, 3, 5, 2], [7], [4]]
    first, lone, last = (at for _, at in got)
    assert first < 0.09  # the text did not wait for the linger to end
    assert 0.1 <= lone - first < 0.3  # the lone status waited the linger, not the interval
    assert last - lone >= 0.15


async def test_closing_ready_batches_cancels_and_closes_the_items() -> None:
    closed = asyncio.Event()

    async def items() -> AsyncGenerator[int, None]:
        try:
            yield 1
            await asyncio.sleep(30)
            yield 2
        finally:
            closed.set()

    batches = ready_batches(items(), 10.0)
    assert await anext(batches) == [1]
    await asyncio.sleep(0.01)  # the pump now waits in the sleep
    await batches.aclose()
    assert closed.is_set()


async def test_the_done_chunk_ends_the_response_in_the_same_message() -> None:
    async def lines() -> AsyncGenerator[str, None]:
        yield "data: {}\n\n"
        yield "data: {}\n\n" + DONE

    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        await asyncio.sleep(30)

    scope = {"type": "http", "asgi": {"spec_version": "2.3"}}
    await EventStreamResponse(lines())(scope, receive, send)
    bodies = [(m["body"], m["more_body"]) for m in sent if m["type"] == "http.response.body"]
    assert bodies == [(b"data: {}\n\n", True), (("data: {}\n\n" + DONE).encode(), False)]


async def test_unsupported_sentences_reach_api_clients() -> None:
    """A sentence no source supports is reported: on the streamed finish chunk and in the
    non-streaming completion; an answer with none says so with an empty list (non-streaming)
    and nothing extra on the stream."""
    text = "Ducks live near ponds [2]. Penguins compose symphonies."
    result = _result(text, [2])
    result.unsupported = ["Penguins compose symphonies."]
    finish = (await _answer(text, [2], result))[-2]  # the last chunk before [DONE]
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert finish["unsupported"] == ["Penguins compose symphonies."]
    writer = ChatStream(model="citeflow-kb", collection="kb", prompt_text="question")
    assert writer.completion(result)["unsupported"] == ["Penguins compose symphonies."]
    clean = await _answer(text, [2])
    assert all("unsupported" not in i for i in clean if isinstance(i, dict))
    plain = ChatStream(model="citeflow-kb", collection="kb", prompt_text="question")
    assert plain.completion(_result(text, [2]))["unsupported"] == []
