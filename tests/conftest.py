"""Shared fixtures: settings isolated from the developer's environment, fake providers."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest
from llama_index.core.schema import Document

from citeflow.api.engine import Engine
from citeflow.errors import ModelError
from citeflow.knowledge_base import KnowledgeBase
from citeflow.providers.local_llm import LocalLlamaCppLLM
from citeflow.providers.models import smollm2_path
from citeflow.settings import Settings
from citeflow.store import Store
from citeflow.store.engine import Record
from citeflow.testing.embedding import HashEmbedding
from citeflow.testing.openai_server import FakeOpenAIServer
from tests.server_helpers import asgi_client, make_engine
from tests.store_helpers import ENGINES, open_store

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
#: a small BEIR-format dataset (12 documents, 4 test queries) for the evaluation tests
MINI = REPO / "tests" / "data" / "beir_mini"
#: three sources for a yes/no question, two of which state its claim (citation tests)
STATIN_SOURCES = [
    "Statins improve clinical outcome after stroke in treated patients.",
    "Statins improve outcome after stroke. Treated patients recovered sooner.",
    "Ducks swim.",
]
STATIN_QUESTION = "Does pretreatment with statins improve clinical outcome after stroke?"

FACTS = {
    "viaweb": (
        "Viaweb was a company that made software for building online stores. It was started in "
        "1995 by the author and Robert Morris. Yahoo bought Viaweb in 1998 and it became Yahoo "
        "Store."
    ),
    "stories": (
        "Before college the author wrote short stories. The stories were awful, with hardly any "
        "plot. [15] The author also programmed an IBM 1401 in 9th grade using punch cards."
    ),
    "ducks": (
        "Ducks are waterfowl birds. They live near ponds, rivers and lakes. Ducks eat plants and "
        "small insects."
    ),
}


@pytest.fixture(autouse=True)
def _no_user_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(__import__("os").environ):
        if key.startswith("CITEFLOW_"):
            monkeypatch.delenv(key)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        _env_file=None,
        store={"data_dir": tmp_path / "data", "collection": "kb"},
        local={"model_dir": tmp_path / "models"},
        retrieval={"relevance_threshold": 0.2},
        chunking={"size": 128, "overlap": 16},
    )


@pytest.fixture
def store() -> Iterator[Store]:
    s = Store.open_path(":memory:")
    yield s
    s.close()


@pytest.fixture(params=ENGINES)
def either_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """An empty store on each engine in turn (`tests.store_helpers.open_store`), closed after."""
    with closing(open_store(request.param, tmp_path)) as opened:
        yield opened


@pytest.fixture
def kb(settings: Settings, store: Store) -> KnowledgeBase:
    base = KnowledgeBase(settings, store=store, embed_model=HashEmbedding(), collection="kb")
    base.add_documents(
        [
            Document(id_=name, text=text, metadata={"file_name": f"{name}.txt", "title": name})
            for name, text in FACTS.items()
        ]
    )
    return base


@pytest.fixture
def engine(kb: KnowledgeBase) -> Engine:
    """An engine over `kb` with a fake LLM that answers "OK" (`make_engine`); a test module
    overrides this fixture for another engine."""
    return make_engine(kb)


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client calling the app over `engine` in-process (`asgi_client`)."""
    async with asgi_client(engine) as c:
        yield c


@pytest.fixture
def mini_copy(tmp_path: Path) -> Path:
    """A writable copy of the mini dataset, to break or edit."""
    target = tmp_path / "beir_mini"
    shutil.copytree(MINI, target)
    return target


@pytest.fixture
def upstream() -> Iterator[FakeOpenAIServer]:
    """A fake OpenAI-compatible server on 127.0.0.1, for tests of the provider path."""
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    """`citeflow` run in ``tmp_path`` (no developer .env) against a fake OpenAI server (LLM and
    embeddings, 64 dimensions), without grading, chunks of 128/16 tokens, its store in
    ``tmp_path / "data"``."""
    monkeypatch.chdir(tmp_path)
    with FakeOpenAIServer(embedding_dim=64) as server:
        for key, value in {
            "CITEFLOW_DATA_DIR": str(tmp_path / "data"),
            "CITEFLOW_LLM_PROVIDER": "openai",
            "CITEFLOW_EMBED_PROVIDER": "openai",
            "CITEFLOW_OPENAI_BASE_URL": server.openai_base_url,
            "CITEFLOW_GRADER": "none",
            "CITEFLOW_CHUNK_SIZE": "128",
            "CITEFLOW_CHUNK_OVERLAP": "16",
        }.items():
            monkeypatch.setenv(key, value)
        yield server


def open_kb(settings: Settings) -> KnowledgeBase:
    """A knowledge base on the embedded store in ``settings``' data folder (on disk)."""
    return KnowledgeBase(
        settings, store=Store.open(settings.store), embed_model=HashEmbedding(dim=64)
    )


def stored_points(store: Store, collection: str) -> list[Record]:
    """Every point of a collection, payloads and vectors included (either engine)."""
    return [record for page in store.points(collection) for record in page]


def smollm2_llm(**options: Any) -> Iterator[LocalLlamaCppLLM]:
    """For a fixture: the real SmolLM2-135M through llama.cpp on one thread, closed after; skips
    without xllamacpp or the model.

    One thread: with llama.cpp's spinning thread pool, two threads on two busy cores (other test
    runs) can be ten times slower; one thread stays fast and predictable.
    """
    pytest.importorskip("xllamacpp")
    try:
        path = smollm2_path()
    except ModelError as exc:
        pytest.skip(str(exc))
    model = LocalLlamaCppLLM(path, context_window=2048, threads=1, **options)
    yield model
    model.close()
