"""Configuration: one `Settings` object, built once by the entry point and passed in.

Every field can be set from the environment with the ``CITEFLOW_`` prefix or from a ``.env``
file; ``.env.example`` documents each one. Nothing in citeflow builds a `Settings` at import time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

Provider = Literal["local", "openai", "azure"]
GraderKind = Literal["auto", "llm", "score", "none"]
JudgeKind = Literal["auto", "on", "off"]
CitationModeKind = Literal["auto", "markers", "structured", "evidence"]
RetrievalMode = Literal["hybrid", "dense", "keyword"]
FusionKind = Literal["rrf", "relative"]
DocsKind = Literal["auto", "on", "off"]

DEFAULT_LOCAL_MODEL_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"


def _xdg(var: str, fallback: str) -> Path:
    base = os.environ.get(var)
    return Path(base) if base else Path.home() / fallback


class Settings(BaseSettings):
    """All of citeflow's settings. See ``.env.example`` for a commented list."""

    model_config = SettingsConfigDict(
        env_prefix="CITEFLOW_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        validate_default=True,
    )

    # --- where things live -------------------------------------------------------------------
    data_dir: Path = Field(
        default_factory=lambda: _xdg("XDG_DATA_HOME", ".local/share") / "citeflow",
        description="Embedded Qdrant store and citeflow's own files.",
    )
    model_dir: Path = Field(
        default_factory=lambda: _xdg("XDG_CACHE_HOME", ".cache") / "citeflow" / "models",
        description="Where `citeflow models install` assembles the default GGUF.",
    )
    collection: str = Field(default="default", description="Knowledge base (Qdrant collection).")

    # --- LLM ---------------------------------------------------------------------------------
    llm_provider: Provider = Field(default="local", description="LLM: local | openai | azure.")
    llm_model: str = Field(
        default="",
        description="Model name (openai) or deployment (azure); empty: the provider's default.",
    )
    llm_temperature: float = Field(default=0.0, ge=0.0, le=2.0, description="Sampling temperature.")
    llm_max_tokens: int = Field(default=320, ge=16, le=8192, description="Most tokens per answer.")
    llm_timeout: float = Field(default=120.0, gt=0, description="Seconds per LLM request.")
    local_model_path: Path | None = Field(
        default=None, description="GGUF file for the local LLM; empty: the installed default."
    )
    local_context_window: int = Field(
        default=4096, ge=512, description="Context size (tokens) of the local model."
    )
    local_threads: int = Field(default=0, ge=0, description="Local model threads; 0: one per core.")

    # --- embeddings ----------------------------------------------------------------------------
    embed_provider: Provider = Field(
        default="local", description="Embeddings: local (all-MiniLM-L6-v2) | openai | azure."
    )
    embed_model: str = Field(default="", description="Embedding model or deployment name.")
    # The local embedder encoded SciFact's chunks faster in batches of 16 than of 64 on the 2-core
    # development machine (1.2x on the first 600 abstracts; less padding, smaller activations);
    # an API wants fewer calls.
    embed_batch_size: int | None = Field(
        default=None,
        ge=1,
        le=2048,
        description="Texts per embed call (default: 16 for the local embedder, 64 for an API).",
    )

    embed_backend: Literal["onnx", "torch"] = Field(
        default="onnx",
        description="Runtime of the local embedder: onnx (ONNX Runtime; exported from the model "
        "once, ~3x faster per question) | torch (sentence-transformers).",
    )

    # --- OpenAI and any OpenAI-compatible server --------------------------------------------------
    openai_api_key: SecretStr | None = Field(default=None, description="OpenAI API key.")
    openai_base_url: str | None = Field(
        default=None, description="e.g. http://localhost:8000/v1 for vLLM, Ollama, llama.cpp."
    )

    # --- Azure OpenAI (optionally behind Azure API Management) -------------------------------
    azure_endpoint: str | None = Field(
        default=None, description="https://NAME.openai.azure.com, or your APIM gateway URL."
    )
    azure_api_key: SecretStr | None = Field(default=None, description="Azure OpenAI API key.")
    azure_ad_token: SecretStr | None = Field(
        default=None, description="Entra ID bearer token instead of an API key."
    )
    azure_use_entra_id: bool = Field(
        default=False,
        description="Get Entra ID tokens from azure-identity's DefaultAzureCredential.",
    )
    azure_api_version: str = Field(default="2024-10-21", description="Azure OpenAI API version.")
    azure_embed_deployment: str = Field(default="", description="Azure embedding deployment.")
    azure_headers: dict[str, str] = Field(
        default_factory=dict,
        description='Extra headers, JSON: {"Ocp-Apim-Subscription-Key": "..."} for APIM.',
    )

    # --- Qdrant --------------------------------------------------------------------------------
    qdrant_url: str | None = Field(default=None, description="Server or cluster; empty: embedded.")
    qdrant_api_key: SecretStr | None = Field(default=None, description="Qdrant API key.")

    # --- ingestion -----------------------------------------------------------------------------
    chunk_size: int = Field(default=512, ge=32, description="Tokens per stored chunk.")
    chunk_overlap: int = Field(default=64, ge=0, description="Tokens shared by adjacent chunks.")

    # --- query workflow ------------------------------------------------------------------------
    top_k: int = Field(default=6, ge=1, le=100, description="Chunks retrieved per search.")
    retrieval: RetrievalMode = Field(
        default="hybrid",
        description="Search: hybrid (dense + BM25 fused) | dense | keyword (BM25 only).",
    )
    fusion: FusionKind = Field(
        default="relative",
        description="Hybrid fusion: relative (normalised scores) | rrf (reciprocal rank).",
    )
    dense_weight: float = Field(
        default=0.5, ge=0.0, le=1.0, description="Hybrid: weight of the dense side (BM25: 1-w)."
    )
    rrf_k: int = Field(default=60, ge=0, description="Reciprocal rank fusion constant.")
    hybrid_candidates: int = Field(
        default=100, ge=1, le=1000, description="Hybrid: chunks fetched per side before fusion."
    )
    feedback_chunks: int = Field(
        default=3,
        ge=0,
        le=50,
        description="Hybrid: pseudo-relevance feedback: the mean embedding of the fused top N "
        "chunks is added to the query's and the dense side searched again (one more search). "
        "0: off.",
    )
    feedback_weight: float = Field(
        default=0.5,
        ge=0.0,
        le=10.0,
        description="Hybrid feedback: weight of the top chunks' mean embedding (the query's: 1).",
    )
    grader: GraderKind = Field(
        default="auto",
        description="Grading: auto (score for local, llm otherwise) | llm | score | none.",
    )
    relevance_threshold: float = Field(
        default=0.25, description="Score grader: minimum similarity for a relevant chunk."
    )
    relevance_coverage: float = Field(
        default=0.6,
        ge=0.0,
        le=1.0,
        description="Score grader: a chunk holding this share of the question's words "
        "(IDF-weighted) is relevant at any similarity, e.g. a name the embedder misses. 0: off.",
    )
    max_rounds: int = Field(
        default=1,
        ge=1,
        le=5,
        description="Retrieval rounds, first included; 2+: reword and search again when "
        "grading keeps nothing (bench/grading_value.py: rarely pays).",
    )
    on_no_relevant: Literal["best", "refuse"] = Field(
        default="best",
        description="When no round finds a relevant chunk: answer from the best hits, or refuse.",
    )
    citation_chunk_size: int = Field(default=160, ge=32, description="Tokens per Source N.")
    citation_chunk_overlap: int = Field(
        default=16, ge=0, description="Tokens shared by adjacent citation chunks."
    )
    max_sources: int = Field(default=4, ge=1, le=50, description="Sources given to the LLM.")
    context_budget: int = Field(
        default=900, ge=128, description="Tokens of sources per synthesis call (compact mode)."
    )
    repair_citations: bool = Field(
        default=True, description="Check [N] against sources; move, drop or add markers."
    )
    # Chosen on HotpotQA alone by bench/citation_settings.py's fixed rule (among the settings
    # meeting the perfect-model targets, the highest min(answers cited, document precision) of
    # the local model's first 40 answers), reported on PubMedQA, SciFact and the essay in the
    # same run: README "Citations: measured", docs/citations.md.
    support_keep: float = Field(
        default=0.2,
        ge=0.0,
        le=1.0,
        description="Word support (IDF-weighted share of a sentence's words in the source) at "
        "which the model's own [N] stays.",
    )
    support_threshold: float = Field(
        default=0.55,
        ge=0.0,
        le=1.0,
        description="Word support at which citeflow moves a wrong [N] to the source that "
        "supports the sentence, or adds one to an uncited sentence.",
    )
    citation_mode: CitationModeKind = Field(
        default="auto",
        description="How the model cites: markers (prose with [N]) | structured (JSON whose "
        "every sentence names its sources, by a grammar or structured outputs) | evidence "
        "(markers, shown only the source sentences that bear on the question) | auto (the "
        "measured best for the provider: see README).",
    )
    citation_judge: JudgeKind = Field(
        default="auto",
        description="Verify citations with the LLM (P(Yes) to 'does the passage support the "
        "statement?') instead of word support: auto (on for openai and azure, off for the "
        "local model) | on (an error if the LLM gives no log-probabilities) | off.",
    )
    citation_judge_cut: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="Citation judge: the P(Yes) at which a source supports a sentence.",
    )
    workflow_timeout: float = Field(default=600.0, gt=0, description="Seconds per query, at most.")

    # --- server --------------------------------------------------------------------------------
    host: str = Field(default="127.0.0.1", description="`citeflow serve` address.")
    port: int = Field(default=8000, ge=1, le=65535, description="`citeflow serve` port.")
    # NoDecode: a plain key or a comma-separated list is not JSON (`parse_api_keys`)
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        description='Bearer keys: one key, several separated by commas, or a JSON list ["k1", '
        '"k2"]; unset or []: no auth (`citeflow serve` then refuses a non-loopback host).',
    )
    api_keys_file: Path | None = Field(
        default=None,
        description="File of bearer keys, one per line (blank lines and # comments ignored), "
        "e.g. a Docker or Kubernetes secret; its keys are added to CITEFLOW_API_KEYS.",
    )
    auth_max_failures: int = Field(
        default=10,
        ge=0,
        description="Wrong API keys one client address may send per CITEFLOW_AUTH_FAILURE_WINDOW;"
        " more get 429 (a right key always passes). 0: off.",
    )
    auth_failure_window: int = Field(
        default=60, ge=1, description="Seconds over which wrong API keys are counted."
    )
    api_docs: DocsKind = Field(
        default="auto",
        description="/docs, /redoc and /openapi.json: auto (on only when bound to loopback) | on "
        "| off; with API keys they need the key too.",
    )
    openwebui_jwt_secret: SecretStr | None = Field(
        default=None,
        description="Open WebUI's FORWARD_USER_INFO_HEADER_JWT_SECRET: forwarded users are then "
        "believed only from its signed X-OpenWebUI-User-Jwt (empty: from the plain "
        "X-OpenWebUI-User-* headers).",
    )
    trace_content: bool = Field(
        default=False,
        description="Debugging: OpenTelemetry spans also carry the sources' text and the answer "
        "(off: counts and the question only).",
    )
    annotations: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="Cited sources as OpenAI url_citation annotations too: auto (requests from "
        "a browser, e.g. an Open WebUI Direct Connection) | on | off.",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Web origins allowed to call the API from a browser (CORS), comma-separated "
        "(https://chat.example.com): Open WebUI Direct Connections need theirs.",
    )
    metrics: bool = Field(
        default=True,
        description="Serve Prometheus metrics at GET /metrics (with API keys, behind the key).",
    )
    public_url: str = Field(
        default="",
        description="Server URL as browsers see it, for source links "
        "(https://citeflow.example.com); empty: the URL a request came in on.",
    )
    link_secret: SecretStr | None = Field(
        default=None,
        description="Key that signs source links (HMAC-SHA256); empty: derived from the API keys.",
    )
    link_ttl: int = Field(
        default=604_800, ge=0, description="Seconds a signed source link stays valid; 0: forever."
    )
    max_concurrent_chats: int = Field(
        default=128, ge=0, description="Chat completions in progress at once; more get 429. 0: off."
    )
    chats_per_minute: int = Field(
        default=0,
        ge=0,
        description="Chat completions per minute per API key (or per client address without "
        "keys); more get 429. 0: off.",
    )
    search_timeout: float = Field(
        default=10.0,
        gt=0,
        le=600,
        description="POST /search: seconds one search may take; past them it answers with what "
        "it has (the first search always runs; the rewrite, LLM grading and retry rounds are "
        "cut short).",
    )
    serve_embed_threads: int = Field(
        default=1,
        ge=0,
        description="`citeflow serve`: threads of the local embedder; the other cores serve "
        "requests. 0: the runtime's default (one per core).",
    )

    @field_validator("data_dir", "model_dir", "local_model_path", "api_keys_file")
    @classmethod
    def _expand_user(cls, value: Path | None) -> Path | None:
        return value.expanduser() if value is not None else None

    @field_validator("api_keys", mode="before")
    @classmethod
    def _parse_api_keys(cls, value: object) -> object:
        return parse_api_keys(value) if isinstance(value, str) else value

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _parse_origins(cls, value: object) -> object:
        if isinstance(value, str):
            return [o.strip().rstrip("/") for o in value.split(",") if o.strip()]
        return value

    @field_validator("api_keys")
    @classmethod
    def _no_empty_key(cls, value: list[SecretStr]) -> list[SecretStr]:
        if any(not key.get_secret_value().strip() for key in value):
            raise ValueError("holds an empty key; every key needs at least one character")
        return value

    @field_validator("collection")
    @classmethod
    def _collection_name(cls, value: str) -> str:
        from citeflow.names import collection_name_problem

        value = value.strip()
        problem = collection_name_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _overlaps(self) -> Settings:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError("CITEFLOW_CHUNK_OVERLAP must be smaller than CITEFLOW_CHUNK_SIZE")
        if self.citation_chunk_overlap >= self.citation_chunk_size:
            raise ValueError(
                "CITEFLOW_CITATION_CHUNK_OVERLAP must be smaller than CITEFLOW_CITATION_CHUNK_SIZE"
            )
        return self

    @model_validator(mode="after")
    def _key_file(self) -> Settings:
        if self.api_keys_file is not None:
            known = {key.get_secret_value() for key in self.api_keys}
            extra = [k for k in read_api_keys_file(self.api_keys_file) if k not in known]
            self.api_keys = [*self.api_keys, *(SecretStr(k) for k in extra)]
        return self

    @property
    def qdrant_path(self) -> Path:
        """Embedded Qdrant's directory (used only when no `qdrant_url` is set)."""
        return self.data_dir / "qdrant"

    @property
    def default_model_path(self) -> Path:
        return self.model_dir / DEFAULT_LOCAL_MODEL_FILE

    @property
    def gguf_path(self) -> Path:
        return self.local_model_path or self.default_model_path


def parse_api_keys(text: str) -> list[str]:
    """``CITEFLOW_API_KEYS``: one key, keys separated by commas, or a JSON list of strings.

    Raises:
        ValueError: the value is empty, holds an empty key, or is a malformed JSON list.
    """
    text = text.strip()
    if not text:
        raise ValueError(
            "is set but empty: give a key, several separated by commas, or a JSON list; "
            "unset it to serve without keys"
        )
    if text.startswith("["):
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ValueError(
                f"starts with '[' but is not a JSON list ({exc.args[0]}); write "
                '["k1", "k2"] or k1,k2'
            ) from None
        if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
            raise ValueError('a JSON value must be a list of strings: ["k1", "k2"]')
        keys = [k.strip() for k in value]
    else:
        keys = [k.strip() for k in text.split(",")]
    if not all(keys):
        raise ValueError("holds an empty key (a stray comma?); every key needs a character")
    return keys


def read_api_keys_file(path: Path) -> list[str]:
    """The keys of a key file: one per line; blank lines and lines starting with # ignored.

    Raises:
        ValueError: the file cannot be read, is not UTF-8 text, or holds no key.
    """
    where = "CITEFLOW_API_KEYS_FILE"
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError(f"{where}: {path} is not UTF-8 text; put one key per line") from None
    except OSError as exc:
        raise ValueError(f"{where}: cannot read {path} ({exc.strerror or exc})") from None
    keys = [line.strip() for line in text.splitlines()]
    keys = [k for k in keys if k and not k.startswith("#")]
    if not keys:
        raise ValueError(
            f"{where}: {path} holds no key; put one key per line (blank lines and # comments "
            "are ignored)"
        )
    return keys


#: settings that no longer exist, and what to do instead (said once, at load, in one line each)
RETIRED = {
    "CITEFLOW_CITATION_RELEVANCE": "citations are checked for support of their sentence, not "
    "for the question's words; remove it",
    "CITEFLOW_CITATION_SCORE_GAP": "a marker moves to the source that supports its sentence; "
    "remove it",
}


def retired_settings(environ: Mapping[str, str] | None = None) -> list[str]:
    """One line per retired ``CITEFLOW_*`` variable that is still set."""
    env = os.environ if environ is None else environ
    return [f"{name} is no longer used: {why}" for name, why in RETIRED.items() if name in env]


def load_settings(**overrides: object) -> Settings:
    """Build the settings from the environment and ``.env``; a bad value is one clear error; a
    retired variable still set is logged as a warning (one line each)."""
    import logging
    import re

    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from citeflow.errors import ConfigError

    for line in retired_settings():
        logging.getLogger(__name__).warning(line)
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        what = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
        where = ".".join(str(p) for p in first.get("loc", ()) if not isinstance(p, int))
        # a model-wide check names its settings in its message
        raise ConfigError(f"CITEFLOW_{where.upper()}: {what}" if where else what) from None
    except SettingsError as exc:  # a list or dict setting that is not JSON
        found = re.search(r'field "(\w+)"', str(exc))
        name = f"CITEFLOW_{found.group(1).upper()}" if found else "a setting"
        raise ConfigError(f"{name}: not valid JSON (lists and dicts are JSON values)") from None


def env_example() -> str:
    """The text of ``.env.example``: every setting, its meaning and its default."""
    lines = [
        "# citeflow settings. Every variable is optional: the defaults run fully offline",
        "# (local llama.cpp LLM, local all-MiniLM-L6-v2 embeddings, embedded Qdrant).",
        "# Copy to .env and uncomment what you change. Lists and dicts are JSON.",
        "# Generated by `make env-example` from citeflow.settings.Settings.",
        "",
    ]
    shown_defaults = {
        "data_dir": "~/.local/share/citeflow",
        "model_dir": "~/.cache/citeflow/models",
    }
    for name, field in Settings.model_fields.items():
        default = field.get_default(call_default_factory=True)
        if name in shown_defaults:
            value = shown_defaults[name]
        elif default is None or isinstance(default, SecretStr):
            value = ""
        elif isinstance(default, dict | list):
            value = json.dumps(default)
        else:
            value = str(default)
        lines.append(f"# {field.description or name}")
        lines.append(f"# CITEFLOW_{name.upper()}={value}")
    return "\n".join(lines) + "\n"
