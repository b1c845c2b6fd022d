"""One line naming every configured provider (LLM, embeddings, store), for logs and the CLI;
each provider module describes its own (`describe_llm`, `describe_embeddings`)."""

from __future__ import annotations

from citeflow.providers.connections import safe_url
from citeflow.providers.embeddings import describe_embeddings
from citeflow.providers.llm import describe_llm
from citeflow.settings import Settings

__all__ = ["describe_providers"]


def describe_providers(settings: Settings) -> str:
    """One line naming the LLM, embedding and vector-store providers and models; no secrets.

    Example: ``LLM: local llama.cpp qwen2.5-coder-1.5b-instruct-q4_k_m.gguf · embeddings: local
    all-MiniLM-L6-v2 · store: embedded Qdrant at /home/me/.local/share/citeflow/qdrant``.
    """
    if settings.store.qdrant_url and settings.store.qdrant_url.strip():
        store = f"Qdrant server at {safe_url(settings.store.qdrant_url.strip())}"
    else:
        store = f"embedded Qdrant at {settings.store.qdrant_path}"
    return (
        f"LLM: {describe_llm(settings)} · embeddings: {describe_embeddings(settings)}"
        f" · store: {store}"
    )
