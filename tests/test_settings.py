"""Settings: environment, .env file, one-line errors, and .env.example kept in step."""

from __future__ import annotations

from pathlib import Path

import pytest

from citeflow.errors import ConfigError
from citeflow.settings import Settings, env_example, load_settings

REPO = Path(__file__).resolve().parents[1]


def test_defaults_are_fully_local() -> None:
    s = Settings(_env_file=None)  # type: ignore[call-arg]
    assert (s.llm_provider, s.embed_provider, s.qdrant_url) == ("local", "local", None)
    assert s.qdrant_path == s.data_dir / "qdrant"
    assert s.gguf_path == s.model_dir / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"


def test_environment_prefix_and_json_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CITEFLOW_LLM_PROVIDER", "azure")
    monkeypatch.setenv("CITEFLOW_AZURE_HEADERS", '{"Ocp-Apim-Subscription-Key": "k"}')
    monkeypatch.setenv("CITEFLOW_API_KEYS", '["a", "b"]')
    monkeypatch.setenv("CITEFLOW_TOP_K", "9")
    s = Settings(_env_file=None)  # type: ignore[call-arg]
    assert s.llm_provider == "azure"
    assert s.azure_headers == {"Ocp-Apim-Subscription-Key": "k"}
    assert [k.get_secret_value() for k in s.api_keys] == ["a", "b"]
    assert s.top_k == 9


def test_dotenv_file_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("CITEFLOW_COLLECTION=handbook\nCITEFLOW_DATA_DIR=~/cf\n")
    monkeypatch.chdir(tmp_path)
    s = load_settings()
    assert s.collection == "handbook"
    assert s.data_dir == Path.home() / "cf"


def test_bad_values_are_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CITEFLOW_TOP_K", "lots")
    with pytest.raises(ConfigError) as info:
        load_settings(_env_file=None)
    assert "CITEFLOW_TOP_K" in str(info.value) and "\n" not in str(info.value)
    monkeypatch.delenv("CITEFLOW_TOP_K")
    with pytest.raises(ConfigError, match="CITEFLOW_COLLECTION") as info:
        load_settings(_env_file=None, collection="no spaces/allowed")
    assert str(info.value) == (
        "CITEFLOW_COLLECTION: collection name 'no spaces/allowed' is not valid: use 1-64 "
        "letters, digits, '-' or '_', starting with a letter or digit"
    )
    for bad in ("...", "_x", "a" * 65, "naïve", "a.b"):
        with pytest.raises(ConfigError, match="is not valid"):
            load_settings(_env_file=None, collection=bad)
    for good in ("a", "Kb_2", "0-docs", "a" * 64):
        assert load_settings(_env_file=None, collection=good).collection == good
    with pytest.raises(ConfigError, match="CHUNK_OVERLAP"):
        load_settings(_env_file=None, chunk_size=64, chunk_overlap=64)


def test_env_example_documents_every_setting() -> None:
    text = (REPO / ".env.example").read_text()
    assert text == env_example(), "run `make env-example`"
    for name in Settings.model_fields:
        assert f"CITEFLOW_{name.upper()}=" in text


def test_retired_settings_are_named_with_what_to_do(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from citeflow.settings import load_settings, retired_settings

    assert retired_settings({}) == []
    monkeypatch.setenv("CITEFLOW_CITATION_RELEVANCE", "0.6")
    [line] = retired_settings()
    assert line.startswith("CITEFLOW_CITATION_RELEVANCE is no longer used:") and "remove" in line
    load_settings(_env_file=None)
    assert "CITEFLOW_CITATION_RELEVANCE is no longer used" in caplog.text


def _keys(settings: Settings) -> list[str]:
    return [key.get_secret_value() for key in settings.api_keys]


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


def test_api_keys_from_a_dotenv_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("CITEFLOW_API_KEYS=k1,k2\n")
    monkeypatch.chdir(tmp_path)
    assert _keys(load_settings()) == ["k1", "k2"]


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
    with pytest.raises(ConfigError) as info:
        load_settings(_env_file=None)
    message = str(info.value)
    assert message.startswith("CITEFLOW_API_KEYS: ") and words in message, message
    assert "\n" not in message and "Value error" not in message


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
        ("", "holds no key"),
        ("# only a comment\n\n", "holds no key"),
        (b"\xff\xfe\x00k", "not UTF-8"),
    ],
)
def test_bad_api_keys_file_is_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str | bytes | None, words: str
) -> None:
    secret = tmp_path / "keys"
    if isinstance(content, bytes):
        secret.write_bytes(content)
    elif content is not None:
        secret.write_text(content)
    monkeypatch.setenv("CITEFLOW_API_KEYS_FILE", str(secret))
    with pytest.raises(ConfigError) as info:
        load_settings(_env_file=None)
    message = str(info.value)
    assert message.startswith("CITEFLOW_API_KEYS_FILE: ") and words in message, message
    assert str(secret) in message and "\n" not in message


def test_a_dict_setting_that_is_not_json_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CITEFLOW_AZURE_HEADERS", "{not json")
    with pytest.raises(ConfigError) as info:
        load_settings(_env_file=None)
    assert str(info.value).startswith("CITEFLOW_AZURE_HEADERS: not valid JSON")
