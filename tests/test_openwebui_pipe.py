"""The Open WebUI Pipe function (integrations/openwebui_pipe.py) against a live citeflow server."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import sys
from collections.abc import AsyncGenerator, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from citeflow.knowledge_base import KnowledgeBase
from tests.e2e.procs import free_port
from tests.server_helpers import (
    ANSWER,
    QUESTION,
    PacedLLM,
    add_collection,
    chat_request,
    live_server,
    make_engine,
    wait_until,
)

PIPE_FILE = Path(__file__).resolve().parents[1] / "integrations" / "openwebui_pipe.py"

TITLE = {"title": "Viaweb and ducks"}
TASK = (
    "### Task:\nGenerate a concise, 3-5 word title summarizing the chat history.\n"
    '### Output:\nJSON format: { "title": "your concise title here" }\n'
    f"### Chat History:\n<chat_history>\nUSER: {QUESTION}\n</chat_history>"
)


def _load() -> ModuleType:
    """The pipe file as Open WebUI sees it: a module of its own, not part of any package."""
    spec = importlib.util.spec_from_file_location("citeflow_openwebui_pipe", PIPE_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


mod = _load()


def _reply(prompt: str) -> str:
    return json.dumps(TITLE) if "### Task:" in prompt else ANSWER


class Recorder:
    """A fake ``__event_emitter__`` that logs events, interleaved with the yielded text."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    async def __call__(self, event: dict[str, Any]) -> None:
        self.log.append(("event", event))

    @property
    def events(self) -> list[dict[str, Any]]:
        return [item for kind, item in self.log if kind == "event"]

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [e["data"] for e in self.events if e["type"] == kind]


async def consume(result: Any, recorder: Recorder) -> str:
    """Drain what ``pipe`` returned as Open WebUI does; the text lands in ``recorder`` too."""
    if isinstance(result, str):
        recorder.log.append(("text", result))
        return result
    assert isinstance(result, AsyncGenerator)
    async for piece in result:
        if isinstance(piece, dict):
            piece = piece["choices"][0]["delta"]["content"]
        assert isinstance(piece, str)
        recorder.log.append(("text", piece))
    return "".join(item for kind, item in recorder.log if kind == "text")


def body(
    content: str = QUESTION, *, stream: bool = True, model: str = "citeflow-kb"
) -> dict[str, Any]:
    """A chat request for ``model`` as Open WebUI hands it to the pipe (its id prefixed)."""
    return chat_request(content, model=f"citeflow.{model}", stream=stream)


def make_pipe(base_url: str, key: str = "") -> Any:
    pipe = mod.Pipe()
    pipe.valves = pipe.Valves(CITEFLOW_BASE_URL=f"{base_url}/v1", CITEFLOW_API_KEY=key, TIMEOUT=10)
    return pipe


async def ask(pipe: Any, request: dict[str, Any], **kwargs: Any) -> tuple[str, Recorder]:
    recorder = Recorder()
    result = await pipe.pipe(request, __user__={"id": "u1"}, __event_emitter__=recorder, **kwargs)
    return await consume(result, recorder), recorder


def assert_ends_done(recorder: Recorder) -> None:
    statuses = recorder.of_type("status")
    assert statuses, "no status events"
    assert statuses[-1]["done"] is True


@pytest.fixture
def server(kb: KnowledgeBase) -> Iterator[str]:
    add_collection(kb, "notes", {"n1": "A note about geese."})
    with live_server(make_engine(kb, PacedLLM([_reply]))) as url:
        yield url


# --- the file ------------------------------------------------------------------------------------
def test_the_file_is_self_contained_for_open_webui() -> None:
    text = PIPE_FILE.read_text(encoding="utf-8")
    # Open WebUI reads the frontmatter only from a docstring opening on the very first line
    lines = text.splitlines()
    assert lines[0] == '"""'
    frontmatter = lines[1 : lines.index('"""', 1)]
    assert any(line.startswith("title: ") for line in frontmatter)
    assert not any(line.startswith("requirements:") for line in frontmatter)  # nothing to install
    # its loader rewrites these phrases anywhere in the file
    for phrase in ("from utils", "from apps", "from main", "from config"):
        assert phrase not in text
    imported = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported - set(sys.stdlib_module_names) == {"httpx", "pydantic"}
    assert inspect.iscoroutinefunction(mod.Pipe.pipe)  # Open WebUI awaits it
    assert inspect.iscoroutinefunction(mod.Pipe.pipes)


def test_model_prefix_is_stripped() -> None:
    assert mod.Pipe.model_name("citeflow.citeflow-kb") == "citeflow-kb"
    assert mod.Pipe.model_name("my_fn.citeflow-v1.2") == "citeflow-v1.2"
    assert mod.Pipe.model_name("citeflow-kb") == "citeflow-kb"


def test_valves_defaults() -> None:
    valves = mod.Pipe().valves
    assert valves.CITEFLOW_BASE_URL == "http://localhost:8000/v1"
    assert valves.CITEFLOW_API_KEY == ""
    assert valves.SOURCE_LIST is False
    schema = mod.Pipe.Valves.model_json_schema()["properties"]["CITEFLOW_API_KEY"]
    assert schema["input"] == {"type": "password"}  # masked in Open WebUI's valve editor


# --- against citeflow ----------------------------------------------------------------------------
async def test_pipes_lists_one_model_per_collection(server: str) -> None:
    models = await make_pipe(server).pipes()
    assert sorted(m["id"] for m in models) == ["citeflow-kb", "citeflow-notes"]
    assert {m["name"] for m in models} == {"citeflow kb", "citeflow notes"}
    # a bare host:port means citeflow's /v1
    pipe = make_pipe(server)
    pipe.valves.CITEFLOW_BASE_URL = server + "/"
    assert len(await pipe.pipes()) == 2


async def test_streamed_answer_with_sources_in_citation_order(server: str) -> None:
    text, rec = await ask(make_pipe(server), body())
    assert text == ANSWER
    # streamed (not one string): one piece per sentence
    assert sum(kind == "text" for kind, _ in rec.log) == 2
    sources = rec.of_type("source")
    assert [s["metadata"][0]["source"] for s in sources] == ["viaweb#1", "ducks#2"]
    assert [s["metadata"][0]["name"] for s in sources] == ["viaweb.txt", "ducks.txt"]
    assert [s["source"]["name"] for s in sources] == ["viaweb.txt", "ducks.txt"]
    assert "Yahoo bought Viaweb" in sources[0]["document"][0]
    # each source arrives before the first text that cites it
    kinds = [
        "source" if kind == "event" and item["type"] == "source" else kind for kind, item in rec.log
    ]
    first_1 = next(i for i, (k, t) in enumerate(rec.log) if k == "text" and "[1]" in t)
    first_2 = next(i for i, (k, t) in enumerate(rec.log) if k == "text" and "[2]" in t)
    assert kinds.index("source") < first_1
    assert len(kinds) - 1 - kinds[::-1].index("source") < first_2
    assert_ends_done(rec)


async def test_source_list_valve_appends_the_list(server: str) -> None:
    pipe = make_pipe(server)
    pipe.valves.SOURCE_LIST = True
    text, _ = await ask(pipe, body())
    assert text.startswith(ANSWER)
    assert "**Sources**" in text and "1. viaweb.txt" in text and "2. ducks.txt" in text


async def test_task_request_returns_the_llm_json(server: str) -> None:
    pipe = make_pipe(server)
    # as Open WebUI sends it: not streamed, task metadata
    result = await pipe.pipe(
        body(TASK, stream=False),
        __event_emitter__=(rec := Recorder()),
        __task__="title_generation",
        __metadata__={"task": "title_generation"},
    )
    assert isinstance(result, str)
    assert json.loads(result) == TITLE
    assert rec.events == []  # nothing lands on the chat message
    # the ### Task: text alone is enough, even when streaming is asked for
    text, rec = await ask(pipe, body(TASK, stream=True))
    assert json.loads(text) == TITLE
    assert rec.events == []


async def test_non_streamed_question_returns_text_and_sources(server: str) -> None:
    text, rec = await ask(make_pipe(server), body(stream=False))
    assert text == ANSWER
    assert [s["metadata"][0]["source"] for s in rec.of_type("source")] == ["viaweb#1", "ducks#2"]


async def test_wrong_or_missing_key_is_a_clear_message(kb: KnowledgeBase) -> None:
    engine = make_engine(kb, PacedLLM([_reply]), keys=["right-key"])
    with live_server(engine) as url:
        pipe = make_pipe(url, key="wrong-key")
        text, rec = await ask(pipe, body())
        assert text.startswith("**citeflow error:** citeflow rejected the API key")
        assert "invalid API key" in text and "is not one of the server's" in text
        assert_ends_done(rec)
        assert rec.of_type("status")[-1]["description"] == "citeflow: invalid API key"
        [entry] = await pipe.pipes()
        assert entry["id"] == mod.ERROR_MODEL_ID and "invalid API key" in entry["name"]
        text, _ = await ask(make_pipe(url), body(stream=False))
        assert "set CITEFLOW_API_KEY" in text
        good = make_pipe(url, key="right-key")
        assert [m["id"] for m in await good.pipes()] == ["citeflow-kb"]
        text, _ = await ask(good, body())
        assert text == ANSWER


async def test_server_down_is_a_clear_message() -> None:
    pipe = make_pipe(f"http://127.0.0.1:{free_port()}")
    [entry] = await pipe.pipes()
    assert entry == {
        "id": mod.ERROR_MODEL_ID,
        "name": "citeflow unavailable: citeflow not reachable",
    }
    text, rec = await ask(pipe, body())
    assert text.startswith("**citeflow error:** citeflow is not reachable at http://127.0.0.1:")
    assert "CITEFLOW_BASE_URL" in text
    assert_ends_done(rec)
    text, _ = await ask(pipe, body(TASK, stream=False), __task__="title_generation")
    assert "not reachable" in text
    # the explanatory model entry, chosen anyway, explains itself
    text, _ = await ask(pipe, body(model=mod.ERROR_MODEL_ID))
    assert "not reachable" in text


async def test_a_base_url_that_is_not_a_url_is_a_clear_message() -> None:
    pipe = make_pipe("")
    pipe.valves.CITEFLOW_BASE_URL = "localhost:8000/v1"
    [entry] = await pipe.pipes()
    assert entry["name"] == "citeflow unavailable: citeflow: bad CITEFLOW_BASE_URL"
    for request in (body(), body(stream=False), body(model=mod.ERROR_MODEL_ID)):
        text, _ = await ask(pipe, request)
        assert "CITEFLOW_BASE_URL 'localhost:8000/v1' is not an http(s) URL" in text


async def test_unknown_model_and_wrong_path(server: str) -> None:
    pipe = make_pipe(server)
    text, rec = await ask(pipe, body(model="citeflow-nope"))
    assert "citeflow has no knowledge base for the model 'citeflow-nope'" in text
    assert "citeflow-kb" in text  # the server's message lists what exists
    assert_ends_done(rec)
    pipe.valves.CITEFLOW_BASE_URL = server + "/api"
    [entry] = await pipe.pipes()
    assert entry["id"] == mod.ERROR_MODEL_ID
    text, _ = await ask(pipe, body())
    assert "404" in text and "should end with /v1" in text


async def test_error_model_entry_when_citeflow_is_back(server: str) -> None:
    text, _ = await ask(make_pipe(server), body(model=mod.ERROR_MODEL_ID))
    assert "reachable now" in text and "citeflow-kb" in text


async def test_failure_mid_stream_ends_with_a_message(kb: KnowledgeBase) -> None:
    llm = PacedLLM([" ".join([ANSWER] * 10)], delay=0.01, fail_after=8)
    with live_server(make_engine(kb, llm)) as url:
        text, rec = await ask(make_pipe(url), body())
    answer, _, error = text.partition("\n\n**citeflow error:** ")
    assert answer.startswith("Yahoo bought Viaweb")
    assert error.startswith("citeflow stopped with an error: the LLM provider failed")
    assert "upstream went away" not in error  # the provider's words are for the server log
    assert_ends_done(rec)
    assert "the LLM provider failed" in rec.of_type("status")[-1]["description"]


async def test_closing_the_answer_early_cancels_the_run(kb: KnowledgeBase) -> None:
    llm = PacedLLM([" ".join([ANSWER] * 20)], delay=0.05)  # ~10 s if never cancelled
    with live_server(make_engine(kb, llm)) as url:
        result = await make_pipe(url).pipe(body(), __event_emitter__=Recorder())
        first = await anext(result)
        assert first.startswith("Yahoo bought Viaweb")
        await result.aclose()  # what a stopped generation does
        await wait_until(llm.closed_early.is_set, within=2.0)
    assert not llm.finished.is_set()


async def test_emitter_failures_and_missing_emitter_do_not_cost_the_answer(
    server: str,
) -> None:
    async def broken(event: dict[str, Any]) -> None:
        raise RuntimeError("socket closed")

    pipe = make_pipe(server)
    for emitter in (broken, None):
        result = await pipe.pipe(body(), __event_emitter__=emitter)
        assert await consume(result, Recorder()) == ANSWER


async def test_text_that_looks_like_an_sse_line_is_wrapped(kb: KnowledgeBase) -> None:
    # Open WebUI passes a yielded string starting with "data:" through as a raw SSE line
    with live_server(make_engine(kb, PacedLLM(["data: none [1]."], chunk_words=9))) as url:
        result = await make_pipe(url).pipe(body())
        pieces: Sequence[Any] = [p async for p in result]
    assert pieces[0]["choices"][0]["delta"]["content"].startswith("data:")
    assert json.dumps(pieces[0])  # serialisable as Open WebUI does
