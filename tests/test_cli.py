"""The `citeflow` command, end to end against a fake OpenAI server (LLM and embeddings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from citeflow.cli import main
from citeflow.testing.openai_server import FakeOpenAIServer


@pytest.fixture
def env(tmp_path: Path, cli_env: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`cli_env` with model names of its own, and a folder of documents (one corrupt)."""
    monkeypatch.setenv("CITEFLOW_LLM_MODEL", "fake-llm")
    monkeypatch.setenv("CITEFLOW_EMBED_MODEL", "fake-embed")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "viaweb.md").write_text(
        "# Viaweb\n\nViaweb made software for building online stores. Yahoo bought Viaweb in 1998."
    )
    (docs / "ducks.txt").write_text("Ducks are waterfowl. Ducks live near ponds and rivers.")
    (docs / "bad.docx").write_bytes(b"not a zip file at all")
    return docs


def test_ingest_then_ask(
    env: Path, cli_env: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ingest", str(env), "-q", "-c", "handbook"]) == 0
    out, err = capsys.readouterr()
    assert "handbook: 3 files: 2 added" in out
    assert "bad.docx" in out and "1 failed" in out
    assert "LLM:" in err  # providers announced at start-up

    assert main(["ingest", str(env), "-q", "-c", "handbook"]) == 0
    assert "2 unchanged" in capsys.readouterr().out

    cli_env.script("Yahoo bought Viaweb in 1998 [1]. Ducks live near ponds [7].")
    assert main(["ask", "-c", "handbook", "Who", "bought", "Viaweb?"]) == 0
    out, err = capsys.readouterr()
    answer, _, sources = out.partition("Sources:")
    assert "Yahoo bought Viaweb in 1998 [" in answer
    assert "[7]" not in answer
    assert "viaweb.md" in sources
    assert "Searching the documents" in err

    assert main(["documents", "-c", "handbook"]) == 0
    listing = capsys.readouterr().out
    assert "viaweb.md" in listing and "ducks.txt" in listing
    assert main(["collections"]) == 0
    assert "handbook" in capsys.readouterr().out

    assert main(["delete", str(env / "ducks.txt"), "-c", "handbook"]) == 0
    assert "1 documents removed" in capsys.readouterr().out

    assert main(["reindex", "-c", "handbook"]) == 0  # already hybrid: nothing to do
    assert "handbook: 1 chunks with dense and keyword (BM25) vectors" in capsys.readouterr().out
    assert main(["reindex", "-c", "nowhere"]) == 1
    assert capsys.readouterr().err.strip() == "citeflow: error: no knowledge base named 'nowhere'"


def test_errors_are_one_line(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ask", "-c", "nowhere", "anything?"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("citeflow: error: no knowledge base named 'nowhere'")
    assert main(["ask", "-c", "nowhere", "   "]) == 1
    assert "question is empty" in capsys.readouterr().err
    assert main(["ask", "-c", "bad name!", "q"]) == 1
    assert "collection name 'bad name!' is not valid" in capsys.readouterr().err


def test_upstream_failure_is_one_line(
    env: Path, cli_env: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ingest", str(env), "-q"]) == 0
    capsys.readouterr()
    cli_env.fail_next(500, times=None, kind="chat")
    assert main(["ask", "Who bought Viaweb?"]) == 1
    err = capsys.readouterr().err
    assert "citeflow: error: the LLM provider answered HTTP 500" in err
    assert "Traceback" not in err


@pytest.fixture
def bad_gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local LLM's GGUF is not a GGUF file (embeddings from an unreachable server)."""
    monkeypatch.chdir(tmp_path)
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"definitely not a gguf file")
    monkeypatch.setenv("CITEFLOW_DATA_DIR", str(tmp_path / "store"))
    monkeypatch.setenv("CITEFLOW_LOCAL_MODEL_PATH", str(fake))
    monkeypatch.setenv("CITEFLOW_EMBED_PROVIDER", "openai")
    monkeypatch.setenv("CITEFLOW_OPENAI_BASE_URL", "http://127.0.0.1:9/v1")


@pytest.mark.usefixtures("bad_gguf")
def test_bad_gguf_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ask", "anything?"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("citeflow: error:") and "model.gguf" in err


@pytest.mark.parametrize("keys", ["k1", "k1,k2", '["k1", "k2"]'])
def test_one_api_key_or_several_work_with_every_command(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], keys: str
) -> None:
    monkeypatch.setenv("CITEFLOW_API_KEYS", keys)
    assert main(["collections"]) == 0
    assert capsys.readouterr().err == ""


def test_an_empty_api_key_is_one_line(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CITEFLOW_API_KEYS", "")
    assert main(["collections"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("citeflow: error: CITEFLOW_API_KEYS: is set but empty")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_serve_without_keys_on_a_network_address_is_refused(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--host", "0.0.0.0", "--port", "8765"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("citeflow: error: refusing to serve on 0.0.0.0:8765 without API keys")
    assert "--insecure-no-auth" in err


@pytest.mark.usefixtures("bad_gguf")  # start-up fails after the check
def test_serve_with_insecure_no_auth_warns_at_start(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--host", "0.0.0.0", "--insecure-no-auth"]) == 1
    err = capsys.readouterr().err
    assert "AUTH IS OFF on 0.0.0.0:8000 (--insecure-no-auth)" in err
    assert err.strip().splitlines()[-1].startswith("citeflow: error:") and "model.gguf" in err


@pytest.mark.parametrize("name", ["...", "-x", "a" * 65, "no spaces", "ünï"])
def test_a_bad_collection_name_is_one_clear_error(
    env: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ingest", str(env), "-q", f"--collection={name}"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("citeflow: error: collection name ")
    assert "is not valid: use 1-64 letters, digits, '-' or '_', starting with" in err
    assert "\n" not in err
    assert not (env.parent / "data").exists()  # refused before the store was opened
