"""Settings: environment, .env file, one-line errors, and .env.example kept in step."""

from __future__ import annotations

import logging
import re
import subprocess
from pathlib import Path

import pytest
from pydantic import SecretStr

from citeflow.errors import ConfigError
from citeflow.settings import (
    ChunkingSettings,
    LLMSettings,
    RetrievalSettings,
    Settings,
    env_example,
    known_variables,
    load_settings,
    retired_settings,
    settings_groups,
    unknown_settings,
)

REPO = Path(__file__).resolve().parents[1]
#: the last commit whose settings were flat: its .env.example lists every old variable
OLD_EXAMPLE = "8ecf730"


@pytest.fixture
def dotenv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The ``.env`` file `load_settings` reads: in a fresh working directory, not written yet."""
    monkeypatch.chdir(tmp_path)
    return tmp_path / ".env"


def test_a_groups_defaults_read_neither_the_environment_nor_dotenv(
    dotenv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CITEFLOW_TOP_K", "9")
    dotenv.write_text("CITEFLOW_CHUNK_SIZE=256\n")
    assert (RetrievalSettings().top_k, ChunkingSettings().size) == (9, 256)
    assert (RetrievalSettings.defaults().top_k, ChunkingSettings.defaults().size) == (6, 512)
    assert RetrievalSettings.defaults(top_k=3).top_k == 3
    assert RetrievalSettings().top_k == 9  # building defaults leaves the sources in place


def config_error(**values: object) -> str:
    """The message `load_settings` refuses these values (and the environment) with: one line."""
    with pytest.raises(ConfigError) as info:
        load_settings(_env_file=None, **values)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_defaults_are_fully_local() -> None:
    s = Settings(_env_file=None)
    assert (s.llm.provider, s.embeddings.provider, s.store.qdrant_url) == ("local", "local", None)
    assert s.store.qdrant_path == s.store.data_dir / "qdrant"
    assert s.local.gguf_path == s.local.model_dir / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"


def test_groups_are_given_as_instances_or_dicts_over_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CITEFLOW_LLM_MODEL", "from-env")
    s = Settings(_env_file=None, llm={"provider": "openai"}, retrieval=RetrievalSettings(top_k=3))
    assert (s.llm.provider, s.llm.model, s.retrieval.top_k) == ("openai", "from-env", 3)
    assert Settings(_env_file=None, llm=LLMSettings(provider="azure")).llm.provider == "azure"
    changed = s.updated(llm={"model": "other"})
    assert (changed.llm.model, changed.llm.provider, s.llm.model) == ("other", "openai", "from-env")
    with pytest.raises(TypeError, match="llm_provider"):
        Settings(_env_file=None, llm_provider="openai")


def test_dotenv_file_is_read(dotenv: Path) -> None:
    dotenv.write_text("CITEFLOW_COLLECTION=handbook\nCITEFLOW_DATA_DIR=~/cf\n")
    s = load_settings()
    assert s.store.collection == "handbook"
    assert s.store.data_dir == Path.home() / "cf"


def test_bad_values_are_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CITEFLOW_TOP_K", "lots")
    assert "CITEFLOW_TOP_K" in config_error()
    monkeypatch.delenv("CITEFLOW_TOP_K")
    assert config_error(store={"collection": "no spaces/allowed"}) == (
        "CITEFLOW_COLLECTION: collection name 'no spaces/allowed' is not valid: use 1-64 "
        "letters, digits, '-' or '_', starting with a letter or digit"
    )
    for bad in ("...", "_x", "a" * 65, "naïve", "a.b"):
        assert "is not valid" in config_error(store={"collection": bad})
    for good in ("a", "Kb_2", "0-docs", "a" * 64):
        assert load_settings(_env_file=None, store={"collection": good}).store.collection == good
    assert "CHUNK_OVERLAP" in config_error(chunking={"size": 64, "overlap": 64})
    monkeypatch.setenv("CITEFLOW_RETRIEVAL", "semantic")  # a field whose variable is its alias
    assert config_error().startswith("CITEFLOW_RETRIEVAL: Input should be")


def test_env_example_documents_every_setting() -> None:
    text = (REPO / ".env.example").read_text()
    assert text == env_example(), ".env.example is stale: run `make env-example`"
    for group in settings_groups().values():
        for name in group.model_fields:
            assert f"# {group.env_name(name)}=" in text


#: every variable of the flat settings before the groups, a value for it, and where it lands
OLD_VARIABLES: dict[str, tuple[str, str, str, object]] = {
    "CITEFLOW_DATA_DIR": ("/srv/cf", "store", "data_dir", Path("/srv/cf")),
    "CITEFLOW_MODEL_DIR": ("/srv/models", "local", "model_dir", Path("/srv/models")),
    "CITEFLOW_COLLECTION": ("handbook", "store", "collection", "handbook"),
    "CITEFLOW_LLM_PROVIDER": ("azure", "llm", "provider", "azure"),
    "CITEFLOW_LLM_MODEL": ("gpt-x", "llm", "model", "gpt-x"),
    "CITEFLOW_LLM_TEMPERATURE": ("0.3", "llm", "temperature", 0.3),
    "CITEFLOW_LLM_MAX_TOKENS": ("400", "llm", "max_tokens", 400),
    "CITEFLOW_LLM_TIMEOUT": ("33", "llm", "timeout", 33.0),
    "CITEFLOW_LOCAL_MODEL_PATH": ("/m.gguf", "local", "model_path", Path("/m.gguf")),
    "CITEFLOW_LOCAL_CONTEXT_WINDOW": ("2048", "local", "context_window", 2048),
    "CITEFLOW_LOCAL_THREADS": ("3", "local", "threads", 3),
    "CITEFLOW_EMBED_PROVIDER": ("openai", "embeddings", "provider", "openai"),
    "CITEFLOW_EMBED_MODEL": ("e-model", "embeddings", "model", "e-model"),
    "CITEFLOW_EMBED_BATCH_SIZE": ("12", "embeddings", "batch_size", 12),
    "CITEFLOW_EMBED_BACKEND": ("torch", "embeddings", "backend", "torch"),
    "CITEFLOW_OPENAI_API_KEY": ("sk-1", "openai", "api_key", "sk-1"),
    "CITEFLOW_OPENAI_BASE_URL": ("http://h/v1", "openai", "base_url", "http://h/v1"),
    "CITEFLOW_AZURE_ENDPOINT": ("https://a", "azure", "endpoint", "https://a"),
    "CITEFLOW_AZURE_API_KEY": ("ak", "azure", "api_key", "ak"),
    "CITEFLOW_AZURE_AD_TOKEN": ("tok", "azure", "ad_token", "tok"),
    "CITEFLOW_AZURE_USE_ENTRA_ID": ("true", "azure", "use_entra_id", True),
    "CITEFLOW_AZURE_API_VERSION": ("2025-01-01", "azure", "api_version", "2025-01-01"),
    "CITEFLOW_AZURE_EMBED_DEPLOYMENT": ("emb", "azure", "embed_deployment", "emb"),
    "CITEFLOW_AZURE_HEADERS": ('{"h": "v"}', "azure", "headers", {"h": "v"}),
    "CITEFLOW_QDRANT_URL": ("http://q:6333", "store", "qdrant_url", "http://q:6333"),
    "CITEFLOW_QDRANT_API_KEY": ("qk", "store", "qdrant_api_key", "qk"),
    "CITEFLOW_CHUNK_SIZE": ("256", "chunking", "size", 256),
    "CITEFLOW_CHUNK_OVERLAP": ("32", "chunking", "overlap", 32),
    "CITEFLOW_TOP_K": ("9", "retrieval", "top_k", 9),
    "CITEFLOW_RETRIEVAL": ("keyword", "retrieval", "mode", "keyword"),
    "CITEFLOW_FUSION": ("rrf", "retrieval", "fusion", "rrf"),
    "CITEFLOW_DENSE_WEIGHT": ("0.7", "retrieval", "dense_weight", 0.7),
    "CITEFLOW_RRF_K": ("30", "retrieval", "rrf_k", 30),
    "CITEFLOW_HYBRID_CANDIDATES": ("50", "retrieval", "candidates", 50),
    "CITEFLOW_FEEDBACK_CHUNKS": ("2", "retrieval", "feedback_chunks", 2),
    "CITEFLOW_FEEDBACK_WEIGHT": ("0.4", "retrieval", "feedback_weight", 0.4),
    "CITEFLOW_GRADER": ("llm", "retrieval", "grader", "llm"),
    "CITEFLOW_RELEVANCE_THRESHOLD": ("0.3", "retrieval", "relevance_threshold", 0.3),
    "CITEFLOW_RELEVANCE_COVERAGE": ("0.5", "retrieval", "relevance_coverage", 0.5),
    "CITEFLOW_MAX_ROUNDS": ("2", "retrieval", "max_rounds", 2),
    "CITEFLOW_ON_NO_RELEVANT": ("refuse", "retrieval", "on_no_relevant", "refuse"),
    "CITEFLOW_CITATION_CHUNK_SIZE": ("200", "citations", "chunk_size", 200),
    "CITEFLOW_CITATION_CHUNK_OVERLAP": ("20", "citations", "chunk_overlap", 20),
    "CITEFLOW_MAX_SOURCES": ("5", "citations", "max_sources", 5),
    "CITEFLOW_CONTEXT_BUDGET": ("1000", "citations", "context_budget", 1000),
    "CITEFLOW_REPAIR_CITATIONS": ("false", "citations", "repair", False),
    "CITEFLOW_SUPPORT_KEEP": ("0.25", "citations", "support_keep", 0.25),
    "CITEFLOW_SUPPORT_THRESHOLD": ("0.6", "citations", "support_threshold", 0.6),
    "CITEFLOW_CITATION_MODE": ("evidence", "citations", "mode", "evidence"),
    "CITEFLOW_CITATION_JUDGE": ("off", "citations", "judge", "off"),
    "CITEFLOW_CITATION_JUDGE_CUT": ("0.4", "citations", "judge_cut", 0.4),
    "CITEFLOW_WORKFLOW_TIMEOUT": ("60", "retrieval", "workflow_timeout", 60.0),
    "CITEFLOW_HOST": ("0.0.0.0", "server", "host", "0.0.0.0"),
    "CITEFLOW_PORT": ("9000", "server", "port", 9000),
    "CITEFLOW_API_KEYS": ("k1,k2", "server", "api_keys", ["k1", "k2"]),
    "CITEFLOW_API_KEYS_FILE": ("", "server", "api_keys_file", None),
    "CITEFLOW_AUTH_MAX_FAILURES": ("5", "server", "auth_max_failures", 5),
    "CITEFLOW_AUTH_FAILURE_WINDOW": ("30", "server", "auth_failure_window", 30),
    "CITEFLOW_API_DOCS": ("off", "server", "api_docs", "off"),
    "CITEFLOW_OPENWEBUI_JWT_SECRET": ("jwt", "server", "openwebui_jwt_secret", "jwt"),
    "CITEFLOW_TRACE_CONTENT": ("true", "tracing", "content", True),
    "CITEFLOW_ANNOTATIONS": ("on", "server", "annotations", "on"),
    "CITEFLOW_CORS_ORIGINS": ("https://a.io/", "server", "cors_origins", ["https://a.io"]),
    "CITEFLOW_METRICS": ("false", "server", "metrics", False),
    "CITEFLOW_PUBLIC_URL": ("https://cf.example", "server", "public_url", "https://cf.example"),
    "CITEFLOW_LINK_SECRET": ("ls", "server", "link_secret", "ls"),
    "CITEFLOW_LINK_TTL": ("60", "server", "link_ttl", 60),
    "CITEFLOW_MAX_CONCURRENT_CHATS": ("8", "server", "max_concurrent_chats", 8),
    "CITEFLOW_CHATS_PER_MINUTE": ("6", "server", "chats_per_minute", 6),
    "CITEFLOW_SEARCH_TIMEOUT": ("5", "server", "search_timeout", 5.0),
    "CITEFLOW_SERVE_EMBED_THREADS": ("2", "embeddings", "serve_threads", 2),
}


def _plain(value: object) -> object:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _old_names_land_in_their_fields(settings: Settings) -> None:
    for name, (_, group, field, expected) in OLD_VARIABLES.items():
        assert _plain(getattr(getattr(settings, group), field)) == expected, name


def test_every_old_variable_lands_in_its_group(monkeypatch: pytest.MonkeyPatch) -> None:
    old = subprocess.run(
        ["git", "show", f"{OLD_EXAMPLE}:.env.example"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if old.returncode == 0:  # the list above is the old .env.example's, no more, no less
        assert set(OLD_VARIABLES) == set(re.findall(r"^# (CITEFLOW_\w+)=", old.stdout, re.M))
    for name, (value, *_) in OLD_VARIABLES.items():
        if value:
            monkeypatch.setenv(name, value)
    _old_names_land_in_their_fields(load_settings(_env_file=None))
    assert unknown_settings() == []  # an old name is read, so it is not called unknown


def test_every_old_variable_lands_in_its_group_from_a_dotenv_file(dotenv: Path) -> None:
    lines = [f"{name}={value}" for name, (value, *_) in OLD_VARIABLES.items() if value]
    dotenv.write_text("\n".join(lines) + "\n")
    _old_names_land_in_their_fields(load_settings())


def test_a_renamed_variable_is_one_deprecation_line(
    dotenv: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CITEFLOW_MODEL_DIR", "/from/env")
    dotenv.write_text("CITEFLOW_MODEL_DIR=/from/file\n")
    with caplog.at_level(logging.WARNING, logger="citeflow.settings"):
        settings = load_settings()
    assert settings.local.model_dir == Path("/from/env")  # the environment before .env
    lines = [r.getMessage() for r in caplog.records if "CITEFLOW_MODEL_DIR" in r.getMessage()]
    assert lines == ["CITEFLOW_MODEL_DIR is deprecated; use CITEFLOW_LOCAL_MODEL_DIR"]
    caplog.clear()
    monkeypatch.setenv("CITEFLOW_LOCAL_MODEL_DIR", "/new")
    assert load_settings().local.model_dir == Path("/new")  # the new name wins


def test_retired_settings_are_named_with_what_to_do(
    dotenv: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert retired_settings({}) == []
    monkeypatch.setenv("CITEFLOW_CITATION_RELEVANCE", "0.6")
    [line] = retired_settings()
    assert line.startswith("CITEFLOW_CITATION_RELEVANCE is no longer used:") and "remove" in line
    load_settings(_env_file=None)
    assert "CITEFLOW_CITATION_RELEVANCE is no longer used" in caplog.text
    # one set in .env is named too (it is a name citeflow knows, so not called unknown)
    caplog.clear()
    dotenv.write_text("CITEFLOW_CITATION_SCORE_GAP=0.05\n")
    load_settings()
    assert "CITEFLOW_CITATION_SCORE_GAP is no longer used" in caplog.text


def test_a_variable_citeflow_does_not_read_is_one_line_naming_the_closest(
    dotenv: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CITEFLOW_TOPK", "9")
    dotenv.write_text("CITEFLOW_CHUNKSIZE=256\nCITEFLOW_FOO=1\nCITEFLOW_TOP_K=7\n")
    with caplog.at_level(logging.WARNING, logger="citeflow.settings"):
        settings = load_settings()
    assert (settings.retrieval.top_k, settings.chunking.size) == (7, 512)
    assert [r.getMessage() for r in caplog.records] == [
        "CITEFLOW_CHUNKSIZE is not a citeflow setting and is ignored; did you mean "
        "CITEFLOW_CHUNK_SIZE?",
        "CITEFLOW_FOO is not a citeflow setting and is ignored; see .env.example for them",
        "CITEFLOW_TOPK is not a citeflow setting and is ignored; did you mean CITEFLOW_TOP_K?",
    ]
    assert unknown_settings({"CITEFLOW_TOP_K": "1", "OTHER_TOPK": "1"}) == []


def test_every_variable_the_docs_name_is_one_citeflow_reads() -> None:
    named = set()
    for doc in ("README.md", ".env.example", "ARCHITECTURE.md"):
        text = (REPO / doc).read_text(encoding="utf-8")
        named |= set(re.findall(r"CITEFLOW_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_*])", text))
    assert named and named <= known_variables(), sorted(named - known_variables())


def _keys(settings: Settings) -> list[str]:
    return [key.get_secret_value() for key in settings.server.api_keys]


@pytest.mark.parametrize(
    ("value", "keys"),
    [
        ("k1", ["k1"]),
        ("k1,k2", ["k1", "k2"]),
        (" k1 , k2 ", ["k1", "k2"]),
        ('["k1", "k2"]', ["k1", "k2"]),
        ("[]", []),
    ],
)
def test_api_keys_plain_comma_separated_or_json(
    monkeypatch: pytest.MonkeyPatch, value: str, keys: list[str]
) -> None:
    monkeypatch.setenv("CITEFLOW_API_KEYS", value)
    assert _keys(load_settings(_env_file=None)) == keys


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("", "set but empty"),
        ("   ", "set but empty"),
        ("k1,", "empty key"),
        ("k1,,k2", "empty key"),
        ('["k1", ""]', "empty key"),
        ('["k1"', "not a JSON list"),
        ("[1, 2]", "list of strings"),
    ],
)
def test_bad_api_keys_are_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, value: str, words: str
) -> None:
    monkeypatch.setenv("CITEFLOW_API_KEYS", value)
    message = config_error()
    assert message.startswith("CITEFLOW_API_KEYS: ") and words in message, message
    assert "Value error" not in message


def test_api_keys_file_adds_its_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "keys"
    secret.write_text("# rotated 2025-01\nfile-key-1\n\n  file-key-2  \nk1\n")
    monkeypatch.setenv("CITEFLOW_API_KEYS", "k1")
    monkeypatch.setenv("CITEFLOW_API_KEYS_FILE", str(secret))
    assert _keys(load_settings(_env_file=None)) == ["k1", "file-key-1", "file-key-2"]
    monkeypatch.delenv("CITEFLOW_API_KEYS")
    assert _keys(load_settings(_env_file=None)) == ["file-key-1", "file-key-2", "k1"]


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, "cannot read"),
        (b"", "holds no key"),
        (b"# only a comment\n\n", "holds no key"),
        (b"\xff\xfe\x00k", "not UTF-8"),
    ],
)
def test_bad_api_keys_file_is_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes | None, words: str
) -> None:
    secret = tmp_path / "keys"
    if content is not None:
        secret.write_bytes(content)
    monkeypatch.setenv("CITEFLOW_API_KEYS_FILE", str(secret))
    message = config_error()
    assert message.startswith("CITEFLOW_API_KEYS_FILE: ") and words in message, message
    assert str(secret) in message


def test_a_dict_setting_that_is_not_json_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CITEFLOW_AZURE_HEADERS", "{not json")
    assert config_error().startswith("CITEFLOW_AZURE_HEADERS: not valid JSON")
