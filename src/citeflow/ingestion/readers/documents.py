"""The `Document` every reader returns: citeflow's standard metadata and its visibility."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llama_index.core.schema import Document

__all__ = ["EXCLUDED_EMBED_METADATA_KEYS", "EXCLUDED_LLM_METADATA_KEYS", "make_document"]

# Metadata visibility. LlamaIndex prepends the visible metadata ("key: value" lines) to a chunk's
# text, both for the embedder and for the LLM prompt.
# * Embedder: only `title`. A title is a short, topical phrase that helps a chunk match questions
#   about its document ("what does the duck article say about ..."). `file_name` is not shown: it
#   is either redundant with a title derived from the file stem or noise ("2305.03393v1-pg9.pdf"),
#   and small embedders (MiniLM: 256 word pieces) cannot spare tokens for it.
# * LLM: `title` and `file_name`, so the model knows which document a passage comes from.
# Paths, types and page numbers are bookkeeping for citations and never shown to either.
EXCLUDED_EMBED_METADATA_KEYS: tuple[str, ...] = (
    "file_name",
    "file_path",
    "file_type",
    "page_label",
    "page",
)
EXCLUDED_LLM_METADATA_KEYS: tuple[str, ...] = ("file_path", "file_type", "page_label", "page")


def make_document(
    path: Path, text: str, title: str, extra: dict[str, Any] | None = None
) -> Document:
    """A Document with citeflow's standard metadata and metadata visibility."""
    metadata: dict[str, Any] = {
        "file_name": path.name,
        "file_path": str(path.resolve()),
        "title": title,
        "file_type": path.suffix.lower().lstrip("."),
    }
    if extra:
        metadata.update(extra)
    return Document(
        text=text,
        metadata=metadata,
        excluded_embed_metadata_keys=list(EXCLUDED_EMBED_METADATA_KEYS),
        excluded_llm_metadata_keys=list(EXCLUDED_LLM_METADATA_KEYS),
    )
