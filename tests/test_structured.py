"""Citing by construction: the answer schema, its streaming parser, and the LLMs that honour it.

The parser tests feed JSON text as a model streams it; the provider tests talk over real sockets
to `FakeOpenAIServer`; the last test constrains the real SmolLM2 through llama.cpp (slow).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any, Literal

import pytest
from llama_index.core.llms import ChatMessage, MockLLM

from citeflow.citations.stream import SentenceStream
from citeflow.citations.structured import (
    ANSWER_SCHEMA,
    StructuredSentenceStream,
    answer_schema,
    render_sentence,
    response_format,
)
from citeflow.errors import ModelError
from citeflow.providers.llm import CompatAzureOpenAI, CompatOpenAI, build_llm
from citeflow.providers.local_llm import LocalLlamaCppLLM
from citeflow.providers.openai_stream import stream_text, supports_response_format
from citeflow.testing.llm import ScriptedLLM
from citeflow.testing.openai_server import FakeOpenAIServer
from tests.conftest import smollm2_llm
from tests.server_helpers import listening
from tests.settings_helpers import llm_settings

Provider = Literal["openai", "azure"]
USER = [ChatMessage(role="user", content="What is the capital of France?")]

REPLY = json.dumps(
    {
        "sentences": [
            {"sources": [1, 3], "text": "Paris is the capital of France."},
            {"sources": [], "text": "The documents do not say when it was founded."},
            {"sources": [2], "text": "Its river is the Seine"},
        ]
    },
    indent=2,
)
EXPECTED = [
    "Paris is the capital of France [1][3]. ",
    "The documents do not say when it was founded. ",
    "Its river is the Seine [2] ",
]


def parse(text: str, sizes: Iterator[int] | None = None) -> list[str]:
    """Feed ``text`` in pieces (``sizes`` long; one character each by default), then flush."""
    stream = StructuredSentenceStream()
    out: list[str] = []
    index = 0
    while index < len(text):
        size = next(sizes) if sizes is not None else 1
        out += stream.feed(text[index : index + size])
        index += size
    return out + stream.flush()


def random_sizes(seed: int) -> Iterator[int]:
    rng = random.Random(seed)
    while True:
        yield rng.choice([1, 1, 2, 3, 5, 8, 13, 40])


def reply(*items: dict[str, Any]) -> str:
    return json.dumps({"sentences": list(items)})


# --- the schema ----------------------------------------------------------------------------------


def test_the_schema_asks_for_sources_before_text() -> None:
    item = ANSWER_SCHEMA["properties"]["sentences"]["items"]
    assert list(item["properties"]) == ["sources", "text"]
    assert item["required"] == ["sources", "text"]
    assert item["additionalProperties"] is False and ANSWER_SCHEMA["additionalProperties"] is False
    assert "minItems" not in item["properties"]["sources"]  # a sentence may cite nothing


def test_answer_schema_restricts_the_numbers_to_the_sources_shown() -> None:
    before = json.dumps(ANSWER_SCHEMA)
    schema = answer_schema(3)
    sources = schema["properties"]["sentences"]["items"]["properties"]["sources"]
    assert sources == {"type": "array", "items": {"type": "integer", "enum": [1, 2, 3]}}
    assert json.dumps(ANSWER_SCHEMA) == before  # a copy
    assert answer_schema(0) == ANSWER_SCHEMA  # no sources: no (empty, invalid) enum


def test_response_format_is_an_openai_strict_json_schema() -> None:
    assert response_format(2) == {
        "type": "json_schema",
        "json_schema": {"name": "cited_answer", "strict": True, "schema": answer_schema(2)},
    }


# --- the streaming parser ------------------------------------------------------------------------


def test_sentences_come_out_with_their_markers_whatever_the_chunking() -> None:
    assert parse(REPLY, iter([len(REPLY)])) == EXPECTED
    assert parse(REPLY) == EXPECTED
    for seed in range(20):
        assert parse(REPLY, random_sizes(seed)) == EXPECTED


def test_each_sentence_comes_out_as_soon_as_its_object_closes() -> None:
    stream = StructuredSentenceStream()
    first_end = REPLY.index("}") + 1
    assert stream.feed(REPLY[: first_end - 1]) == []
    assert stream.feed(REPLY[first_end - 1 : first_end]) == [EXPECTED[0]]
    assert stream.feed(REPLY[first_end:]) == EXPECTED[1:]
    assert stream.flush() == []


def test_json_escapes_and_brackets_inside_the_text() -> None:
    text = 'He said "hi" {not [an object]}\\ then: café,\ncrème \U0001f600 and a\ttab.'
    raw = reply({"sources": [1], "text": text})
    assert "\\u00e9" in json.dumps(text) and "\\ud83d\\ude00" in json.dumps(text)
    expected = ['He said "hi" {not [an object]}\\ then: café,\ncrème \U0001f600 and a\ttab [1]. ']
    assert parse(raw) == expected
    unescaped = json.dumps({"sentences": [{"sources": [1], "text": text}]}, ensure_ascii=False)
    assert parse(unescaped) == expected
    compact = '{"sentences":[{"sources":[1],"text":"A \\"quoted\\" \\/ \\u00e9t\\u00e9."}]}'
    assert parse(compact) == ['A "quoted" / été [1]. ']


def test_whitespace_anywhere() -> None:
    raw = (
        ' \n {\n"sentences"\n:\n[\n\n{ "sources" : [ 2 ,\n 1 ] ,\n'
        ' "text" : " Spaced out. " }\n ]\n}\n'
    )
    assert parse(raw) == ["Spaced out [2][1]. "]
    for seed in range(5):
        assert parse(raw, random_sizes(seed)) == ["Spaced out [2][1]. "]


def test_sources_are_kept_as_given_and_an_empty_list_adds_no_marker() -> None:
    raw = reply(
        {"sources": [0, 7, 99], "text": "Out of range."},
        {"sources": [2, 2, 1], "text": "Twice the same."},
        {"sources": [], "text": "No sources here."},
        {"sources": ["3", 4.0, True, None, "x"], "text": "Loose numbers!"},
        {"sources": "1", "text": "Not a list"},
    )
    assert parse(raw) == [
        "Out of range [0][7][99]. ",
        "Twice the same [2][1]. ",
        "No sources here. ",
        "Loose numbers [3][4]! ",
        "Not a list ",
    ]


def test_markers_already_in_the_text_are_left_and_not_repeated() -> None:
    raw = reply(
        {"sources": [1, 2], "text": "Paris [1] is the capital."},
        {"sources": [3], "text": "Berlin is big [3]."},
        {"sources": [], "text": "Rome is old (Source 4)."},
    )
    assert parse(raw) == [
        "Paris [1] is the capital [2]. ",
        "Berlin is big [3]. ",
        "Rome is old (Source 4). ",
    ]


def test_sentences_with_empty_text_or_no_text_are_skipped() -> None:
    raw = reply(
        {"sources": [1], "text": ""},
        {"sources": [1], "text": "   "},
        {"sources": [1]},
        {"sources": [1], "text": 5},
        {"sources": [2], "text": "Kept."},
    )
    assert parse(raw) == ["Kept [2]. "]


def test_render_sentence() -> None:
    assert render_sentence("Paris is the capital.", [1]) == "Paris is the capital [1]."
    assert render_sentence('He said "yes."', [2, 3]) == 'He said "yes" [2][3].'
    assert render_sentence("  No punctuation  ", [4]) == "No punctuation [4]"
    assert render_sentence(" ", [1]) == ""
    # a model's malformed numbers are skipped, never raised on
    assert render_sentence("Odd.", ["--5", "²", " 2 ", "x"]) == "Odd [2]."


def test_prose_is_passed_through_unchanged() -> None:
    prose = "  Paris is the capital of France [1]. It is on the Seine [2].\n"
    assert "".join(parse(prose)) == prose
    for seed in range(5):
        assert "".join(parse(prose, random_sizes(seed))) == prose
    stream = StructuredSentenceStream()
    assert stream.feed("  ") == []  # not yet known
    assert stream.feed("Yes") == ["  Yes"]
    assert stream.feed(", {it} is.") == [", {it} is."]
    assert stream.flush() == []
    assert "".join(parse("`x` is code.")) == "`x` is code."
    assert parse("Short", iter([5])) == ["Short"]
    assert parse("``", iter([2])) == ["``"]  # too short to tell: given back at the end


def test_a_fenced_json_reply_is_read_as_json() -> None:
    fenced = f"```json\n{REPLY}\n```\n"
    assert parse(fenced) == EXPECTED
    assert parse(f"```\n{REPLY}```") == EXPECTED
    assert "".join(parse("```python\nprint(1)\n```")) == "```python\nprint(1)\n```"


def test_text_after_the_answer_object_is_ignored() -> None:
    assert parse(REPLY + '\n{"sentences": [{"sources": [9], "text": "Again."}]} trailing') == (
        EXPECTED
    )


def test_a_reply_cut_short_gives_what_can_be_read() -> None:
    cut = REPLY[: REPLY.index("Seine") + 3]
    assert parse(cut) == [*EXPECTED[:2], "Its river is the Sei [2] "]
    assert parse('{"sentences": [{"sources": [1], "text": "Done."') == ["Done [1]. "]
    assert parse('{"sentences": [{"sources": [1], "text": "Caf\\u00') == ["Caf [1] "]
    assert parse('{"sentences": [{"sources": [1], "text": "A back\\') == ["A back [1] "]
    assert parse('{"sentences": [{"sources": [1, 2') == []  # no text yet
    assert parse('{"sentences": [{"sources": [1, 2], "te') == []
    assert parse('{"sentences": [') == []
    assert parse("{") == []
    assert parse("") == []


def test_every_truncation_of_a_reply_is_safe() -> None:
    """No prefix of a reply makes the parser raise; what it gives is a prefix of the answer
    except for the last, cut-off sentence."""
    for end in range(len(REPLY) + 1):
        pieces = parse(REPLY[:end])
        complete = [p for p in pieces if p in EXPECTED]
        assert complete == EXPECTED[: len(complete)]
        assert len(pieces) - len(complete) <= 1


def test_malformed_sentence_objects_are_read_as_far_as_possible() -> None:
    raw = (
        '{"sentences": [{"sources": [1,], "text": "Trailing comma."}, '
        '{"sources": [2], "text": "Raw\nnewline."}, '
        '{"text": "Text first.", "sources": [3]}, '
        '{"sources": [4] "text": "Missing comma."}]}'
    )
    assert parse(raw) == [
        "Trailing comma [1]. ",
        "Raw\nnewline [2]. ",
        "Text first [3]. ",
        "Missing comma [4]. ",
    ]


def test_flush_resets_the_stream_for_another_reply() -> None:
    stream = StructuredSentenceStream()
    assert stream.feed("Plain answer.") == ["Plain answer."]
    assert stream.flush() == []
    assert stream.feed(REPLY) + stream.flush() == EXPECTED


def test_the_rendered_pieces_split_into_the_same_sentences() -> None:
    """What the synthesizer does with the pieces: the sentence splitter cuts them back into the
    same sentences."""
    splitter = SentenceStream()
    segments = [s for piece in EXPECTED for s in splitter.feed(piece)] + splitter.flush()
    assert [s.strip() for s in segments] == [p.strip() for p in EXPECTED]


# --- LLMs -----------------------------------------------------------------------------------------


def test_which_llms_support_response_format(upstream: FakeOpenAIServer) -> None:
    assert supports_response_format(build_llm(llm_settings(upstream, "openai")))
    azure = build_llm(llm_settings(upstream, "azure"))
    assert isinstance(azure, CompatAzureOpenAI) and supports_response_format(azure)
    preview = build_llm(llm_settings(upstream, "azure", azure_api_version="2024-08-01-preview"))
    assert supports_response_format(preview)
    old = build_llm(llm_settings(upstream, "azure", azure_api_version="2024-06-01"))
    assert not supports_response_format(old)  # before structured outputs
    legacy = CompatOpenAI(model="gpt-3.5-turbo-instruct", api_key="k")
    assert not legacy.metadata.is_chat_model and not supports_response_format(legacy)
    assert not supports_response_format(MockLLM())
    assert not supports_response_format(ScriptedLLM())


#: the answer's response format for three sources, as request options
FORMAT = {"response_format": response_format(3)}


async def stream_sentences(llm: Any, messages: list[ChatMessage]) -> tuple[list[str], list[str]]:
    """What `stream_text` streams with the answer's response format: its deltas, and the
    sentences the structured parser makes of them."""
    stream = StructuredSentenceStream()
    deltas: list[str] = []
    sentences: list[str] = []
    async for delta in await stream_text(llm, messages, **FORMAT):
        deltas.append(delta)
        sentences += stream.feed(delta)
    return deltas, sentences + stream.flush()


@pytest.mark.parametrize("provider", ["openai", "azure"])
async def test_openai_streams_with_response_format_in_the_body(
    upstream: FakeOpenAIServer, provider: Provider
) -> None:
    upstream.script([REPLY])
    llm = build_llm(llm_settings(upstream, provider), max_retries=0)
    deltas, sentences = await stream_sentences(llm, USER)
    assert sentences == EXPECTED
    assert len(deltas) > 10  # streamed, not in one piece
    body = upstream.last_request.json
    assert body["response_format"] == response_format(3)
    assert body["stream"] is True and body["messages"][-1]["content"] == USER[0].content
    assert upstream.last_request.is_azure == (provider == "azure")


async def test_without_response_format_the_request_is_unchanged(upstream: FakeOpenAIServer) -> None:
    upstream.script(["Paris [1]."])
    llm = build_llm(llm_settings(upstream, "openai"), max_retries=0)
    assert "".join([d async for d in await stream_text(llm, USER)]) == "Paris [1]."
    assert "response_format" not in upstream.last_request.json


async def test_response_format_also_goes_through_llama_index_when_observed(
    upstream: FakeOpenAIServer,
) -> None:
    """With an event handler listening, `stream_text` goes through LlamaIndex's own streaming
    chat (and the SDK's ``create``): ``response_format`` still reaches the request."""
    upstream.script([REPLY])
    llm = build_llm(llm_settings(upstream, "openai"), max_retries=0)
    with listening() as recorder:
        text = "".join([d async for d in await stream_text(llm, USER, **FORMAT)])
    assert "LLMChatInProgressEvent" in recorder.seen
    assert text == REPLY
    assert upstream.last_request.json["response_format"] == response_format(3)


async def test_a_non_streamed_chat_passes_response_format_too(upstream: FakeOpenAIServer) -> None:
    upstream.script([REPLY])
    llm = build_llm(llm_settings(upstream, "openai"), max_retries=0)
    answer = await llm.achat(USER, **FORMAT)
    assert answer.message.content == REPLY
    assert upstream.last_request.json["response_format"] == response_format(3)
    assert not upstream.last_request.stream


async def test_stream_text_passes_keyword_arguments_to_other_llms() -> None:
    scripted = ScriptedLLM(replies=["Plain text [1]."])
    stream = await stream_text(scripted, USER, temperature=0.25)
    assert "".join([d async for d in stream]) == "Plain text [1]."
    assert scripted.call_kwargs[-1]["temperature"] == 0.25


def test_local_llm_requests_carry_the_response_format() -> None:
    """The request bodies llama.cpp gets (no model loaded): chat requests take the OpenAI-style
    object; a raw completion (which would ignore it) gets the schema as ``json_schema``."""
    llm = LocalLlamaCppLLM.model_construct(model_path="unused.gguf", max_tokens=8, temperature=0)
    request = llm._chat_request(USER, FORMAT)
    assert request["response_format"] == response_format(3) and request["stream"] is True
    assert "response_format" not in llm._chat_request(USER, {})
    endpoint, chat = llm._completion_request("hi", False, FORMAT)
    assert endpoint == "chat" and chat["response_format"] == response_format(3)
    endpoint, raw = llm._completion_request("hi", True, FORMAT)
    assert endpoint == "completion" and raw["json_schema"] == answer_schema(3)
    assert "response_format" not in raw
    _, loose = llm._completion_request("hi", True, {"response_format": {"type": "json_object"}})
    assert loose["json_schema"] == {"type": "object"}
    _, text = llm._completion_request("hi", True, {"response_format": {"type": "text"}})
    assert "json_schema" not in text
    with pytest.raises(ModelError, match="response_format"):
        llm._chat_request(USER, {"response_format": "json"})


# --- the real local model -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2() -> Iterator[LocalLlamaCppLLM]:
    yield from smollm2_llm(max_tokens=128, temperature=0)


@pytest.mark.slow
async def test_smollm2_stays_in_the_schema(smollm2: LocalLlamaCppLLM) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    assert supports_response_format(smollm2)
    sources = (
        "[1] Paris is the capital of France.\n"
        "[2] Berlin is the capital of Germany.\n"
        "[3] Ducks live near ponds."
    )
    messages = [
        ChatMessage(
            role="system",
            content="You answer using only the numbered sources. Reply in JSON: the answer's "
            "sentences, each with the numbers of the sources it is taken from, then its text.",
        ),
        ChatMessage(
            role="user",
            content=f"Sources:\n{sources}\n\nQuestion: Where do ducks live? "
            "Answer in one short sentence.",
        ),
    ]
    deltas, sentences = await stream_sentences(smollm2, messages)
    reply_json = json.loads("".join(deltas))
    jsonschema.validate(reply_json, answer_schema(3))
    expected = [render_sentence(s["text"], s["sources"]) for s in reply_json["sentences"]]
    assert sentences == [f"{s} " for s in expected if s]
    assert sentences, "".join(deltas)
