"""The settings of the models and their providers: the LLM, the local model files, the
embedder, OpenAI (or any OpenAI-compatible server) and Azure OpenAI."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import SettingsConfigDict

from citeflow.settings.group import SettingsGroup, UserPath

Provider = Literal["local", "openai", "azure"]

DEFAULT_LOCAL_MODEL_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"


def xdg_dir(var: str, fallback: str) -> Path:
    """The XDG base directory ``var`` names, else ``~/<fallback>``."""
    base = os.environ.get(var)
    return Path(base) if base else Path.home() / fallback


class LLMSettings(SettingsGroup):
    """The LLM that answers (``CITEFLOW_LLM_*``)."""

    model_config = SettingsConfigDict(env_prefix="CITEFLOW_LLM_")

    provider: Provider = Field(default="local", description="LLM: local | openai | azure.")
    model: str = Field(
        default="",
        description="Model name (openai) or deployment (azure); empty: the provider's default.",
    )
    temperature: float = Field(default=0.0, ge=0.0, le=2.0, description="Sampling temperature.")
    max_tokens: int = Field(default=320, ge=16, le=8192, description="Most tokens per answer.")
    timeout: float = Field(default=120.0, gt=0, description="Seconds per LLM request.")


class LocalModelSettings(SettingsGroup):
    """The local models' files and the llama.cpp runtime (``CITEFLOW_LOCAL_*``)."""

    model_config = SettingsConfigDict(env_prefix="CITEFLOW_LOCAL_")

    model_dir: UserPath = Field(
        default_factory=lambda: xdg_dir("XDG_CACHE_HOME", ".cache") / "citeflow" / "models",
        validation_alias=AliasChoices("CITEFLOW_LOCAL_MODEL_DIR", "CITEFLOW_MODEL_DIR"),
        description="Where `citeflow models install` assembles the default GGUF (and the local "
        "embedder's ONNX export is kept).",
    )
    model_path: UserPath | None = Field(
        default=None, description="GGUF file for the local LLM; empty: the installed default."
    )
    context_window: int = Field(
        default=4096, ge=512, description="Context size (tokens) of the local model."
    )
    threads: int = Field(default=0, ge=0, description="Local model threads; 0: one per core.")

    @property
    def default_model_path(self) -> Path:
        return self.model_dir / DEFAULT_LOCAL_MODEL_FILE

    @property
    def gguf_path(self) -> Path:
        return self.model_path or self.default_model_path


class EmbeddingSettings(SettingsGroup):
    """The embedder that indexes and searches (``CITEFLOW_EMBED_*``)."""

    model_config = SettingsConfigDict(env_prefix="CITEFLOW_EMBED_")

    provider: Provider = Field(
        default="local", description="Embeddings: local (all-MiniLM-L6-v2) | openai | azure."
    )
    model: str = Field(default="", description="Embedding model or deployment name.")
    # The local embedder is faster in batches of 16 than of 64 (less padding, smaller
    # activations); an API wants fewer calls.
    batch_size: int | None = Field(
        default=None,
        ge=1,
        le=2048,
        description="Texts per embed call (default: 16 for the local embedder, 64 for an API).",
    )
    backend: Literal["onnx", "torch"] = Field(
        default="onnx",
        description="Runtime of the local embedder: onnx (ONNX Runtime; exported from the model "
        "once, ~3x faster per question) | torch (sentence-transformers).",
    )
    serve_threads: int = Field(
        default=1,
        ge=0,
        validation_alias=AliasChoices(
            "CITEFLOW_EMBED_SERVE_THREADS", "CITEFLOW_SERVE_EMBED_THREADS"
        ),
        description="`citeflow serve`: threads of the local embedder; the other cores serve "
        "requests. 0: the runtime's default (one per core).",
    )


class OpenAISettings(SettingsGroup):
    """OpenAI, or any OpenAI-compatible server (``CITEFLOW_OPENAI_*``)."""

    model_config = SettingsConfigDict(env_prefix="CITEFLOW_OPENAI_")

    api_key: SecretStr | None = Field(default=None, description="OpenAI API key.")
    base_url: str | None = Field(
        default=None, description="e.g. http://localhost:8000/v1 for vLLM, Ollama, llama.cpp."
    )


class AzureSettings(SettingsGroup):
    """Azure OpenAI, optionally behind Azure API Management (``CITEFLOW_AZURE_*``)."""

    model_config = SettingsConfigDict(env_prefix="CITEFLOW_AZURE_")

    endpoint: str | None = Field(
        default=None, description="https://NAME.openai.azure.com, or your APIM gateway URL."
    )
    api_key: SecretStr | None = Field(default=None, description="Azure OpenAI API key.")
    ad_token: SecretStr | None = Field(
        default=None, description="Entra ID bearer token instead of an API key."
    )
    use_entra_id: bool = Field(
        default=False,
        description="Get Entra ID tokens from azure-identity's DefaultAzureCredential.",
    )
    api_version: str = Field(default="2024-10-21", description="Azure OpenAI API version.")
    embed_deployment: str = Field(default="", description="Azure embedding deployment.")
    headers: dict[str, str] = Field(
        default_factory=dict,
        description='Extra headers, JSON: {"Ocp-Apim-Subscription-Key": "..."} for APIM.',
    )
