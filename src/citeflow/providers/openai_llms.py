"""llama-index's OpenAI and Azure OpenAI LLMs, made to work with any OpenAI-compatible server,
any model or deployment name, the OpenAI SDK's retries, and citeflow's lean streaming.

Model names OpenAI does not know (e.g. ``qwen2.5:1.5b`` on Ollama) get a conservative context
window instead of an error. The OpenAI SDK retries connection errors, 408/409/429 and 5xx
(honouring ``Retry-After``); llama-index's own retry layer is meant to be off (``max_retries=0``)
so a failing upstream costs ``1 + client_max_retries`` requests, not their square.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
from llama_index.core.base.llms.types import LLMMetadata
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.llms.azure_openai import AzureOpenAI
from llama_index.llms.openai import OpenAI
from llama_index.llms.openai.utils import (
    ALL_AVAILABLE_MODELS,
    is_chat_model,
    is_function_calling_model,
    openai_modelname_to_contextsize,
    resolve_openai_credentials,
)

from citeflow.providers.connections import DEFAULT_MAX_RETRIES
from citeflow.providers.openai_stream import LeanStreamingMixin

__all__ = ["DEFAULT_COMPAT_CONTEXT_WINDOW", "CompatAzureOpenAI", "CompatOpenAI"]

#: Context window assumed for model names OpenAI's tables do not know (Ollama's default is 4096).
DEFAULT_COMPAT_CONTEXT_WINDOW = 4096


def _compat_metadata(llm: CompatOpenAI | CompatAzureOpenAI) -> LLMMetadata:
    """`llm`'s metadata; never raises for model names OpenAI's tables do not know."""
    model = _base_model_name(llm.model)
    known = model in ALL_AVAILABLE_MODELS
    window = llm.context_window
    if window is None:
        try:
            window = openai_modelname_to_contextsize(model)
        except ValueError:  # unknown or discontinued name
            window = DEFAULT_COMPAT_CONTEXT_WINDOW
    function_calling = llm.function_calling
    if function_calling is None:
        function_calling = known and is_function_calling_model(model)
    return LLMMetadata(
        context_window=window,
        num_output=llm.max_tokens or -1,
        # Every server worth talking to has /chat/completions; the legacy endpoint is a trap.
        is_chat_model=is_chat_model(model) if known else True,
        is_function_calling_model=function_calling,
        model_name=model,
    )


def _base_model_name(model: str) -> str:
    """The OpenAI model a fine-tuned model is named after (``ft:gpt-4o-mini:org::id``), as
    llama-index reads it."""
    if model.startswith("ft:"):
        return model.split(":")[1]
    if "ft-" in model:  # legacy fine-tuning
        return model.split(":")[0]
    return model


class CompatOpenAI(LeanStreamingMixin, OpenAI):
    """`OpenAI` that works with any OpenAI-compatible server and any model name.

    Unknown model names get `context_window` (default `DEFAULT_COMPAT_CONTEXT_WINDOW`), are
    treated as chat models and, unless `function_calling` says otherwise, as models without tool
    calling (structured output then goes through the prompt, which every server supports).
    Streamed chats are parsed by `LeanStreamingMixin` (a fraction of the SDK's CPU per token).
    The OpenAI SDK clients are built here (with ``client_max_retries`` and ``async_http_client``)
    and handed to llama-index, so the SDK retries and llama-index and the lean path share them.
    """

    context_window: int | None = Field(
        default=None, description="Context window; None: OpenAI's table, else the default."
    )
    function_calling: bool | None = Field(
        default=None, description="Tool calling support; None: known OpenAI models only."
    )
    client_max_retries: int = Field(
        default=DEFAULT_MAX_RETRIES, ge=0, description="Retries done by the OpenAI SDK."
    )
    _sdk_client: openai.AsyncOpenAI = PrivateAttr()

    def __init__(
        self,
        *,
        api_key: str | None = None,
        api_base: str | None = None,
        timeout: float = 60.0,
        default_headers: dict[str, str] | None = None,
        client_max_retries: int = DEFAULT_MAX_RETRIES,
        async_http_client: httpx.AsyncClient | None = None,
        **kwargs: Any,
    ) -> None:
        key, base, _ = resolve_openai_credentials(api_key=api_key, api_base=api_base)
        sdk: dict[str, Any] = {
            "api_key": key,
            "base_url": base,
            "timeout": timeout,
            "max_retries": client_max_retries,
            "default_headers": default_headers,
        }
        client = openai.AsyncOpenAI(**sdk, http_client=async_http_client)
        super().__init__(
            api_key=key,
            api_base=base,
            timeout=timeout,
            default_headers=default_headers,
            client_max_retries=client_max_retries,
            openai_client=openai.OpenAI(**sdk),
            async_openai_client=client,
            **kwargs,
        )
        self._sdk_client = client

    @classmethod
    def class_name(cls) -> str:
        """Name used when serialising the LLM."""
        return "citeflow_compat_openai_llm"

    @property
    def sdk_client(self) -> openai.AsyncOpenAI:
        """The async OpenAI SDK client (shared with llama-index)."""
        return self._sdk_client

    @property
    def metadata(self) -> LLMMetadata:
        """Metadata; never raises for unknown model names."""
        return _compat_metadata(self)


class CompatAzureOpenAI(LeanStreamingMixin, AzureOpenAI):
    """`AzureOpenAI` whose deployment names need not be OpenAI model names.

    Same metadata fallback, retry policy, SDK clients and streaming as `CompatOpenAI`. With an
    Entra ID token provider, the SDK sends its token as ``Authorization: Bearer`` and no
    ``api-key`` header.
    """

    context_window: int | None = Field(default=None)
    function_calling: bool | None = Field(default=None)
    client_max_retries: int = Field(default=DEFAULT_MAX_RETRIES, ge=0)
    _sdk_client: openai.AsyncAzureOpenAI = PrivateAttr()

    def __init__(
        self,
        *,
        azure_endpoint: str | None = None,
        api_version: str | None = None,
        api_key: str | None = None,
        use_azure_ad: bool = False,
        azure_ad_token_provider: Callable[[], str] | None = None,
        timeout: float = 60.0,
        default_headers: dict[str, str] | None = None,
        client_max_retries: int = DEFAULT_MAX_RETRIES,
        async_http_client: httpx.AsyncClient | None = None,
        **kwargs: Any,
    ) -> None:
        sdk: dict[str, Any] = {
            "azure_endpoint": azure_endpoint,
            "api_version": api_version,
            "api_key": None if use_azure_ad else api_key,
            "azure_ad_token_provider": azure_ad_token_provider,
            "timeout": timeout,
            "max_retries": client_max_retries,
            "default_headers": default_headers,
        }
        client = openai.AsyncAzureOpenAI(**sdk, http_client=async_http_client)
        super().__init__(
            azure_endpoint=azure_endpoint,
            api_version=api_version,
            api_key=api_key,
            use_azure_ad=use_azure_ad,
            azure_ad_token_provider=azure_ad_token_provider,
            timeout=timeout,
            default_headers=default_headers,
            client_max_retries=client_max_retries,
            openai_client=openai.AzureOpenAI(**sdk),
            async_openai_client=client,
            **kwargs,
        )
        self._sdk_client = client

    @classmethod
    def class_name(cls) -> str:
        """Name used when serialising the LLM."""
        return "citeflow_compat_azure_openai_llm"

    @property
    def sdk_client(self) -> openai.AsyncAzureOpenAI:
        """The async Azure OpenAI SDK client (shared with llama-index)."""
        return self._sdk_client

    @property
    def metadata(self) -> LLMMetadata:
        """Metadata; never raises for unknown deployment names."""
        return _compat_metadata(self)
