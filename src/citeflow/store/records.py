"""Documents as the store sees them: records built from chunk payloads, and payloads as nodes."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from llama_index.core.schema import BaseNode, TextNode
from llama_index.core.vector_stores.utils import (
    legacy_metadata_dict_to_node,
    metadata_dict_to_node,
)

from citeflow.store.engine import INCOMPLETE

#: payload keys kept per document (one copy on each of its chunks); ``chunk_count`` is how many
#: chunks the document was written with, so that one cut short (a crash, Ctrl-C) is seen as such
#: also in collections written before `INCOMPLETE` existed
DOC_KEYS = ("doc_id", "content_hash", "chunk_count", "file_path", "file_name", "title", INCOMPLETE)


@dataclass(frozen=True, slots=True)
class DocumentRecord:
    """What the store knows of one ingested document."""

    doc_id: str
    content_hash: str
    file_path: str
    file_name: str
    title: str
    chunks: int
    expected_chunks: int | None = None
    """chunks the document was written with (None: written before this was recorded)"""
    unfinished: bool = False
    """a write of the document began and did not finish (its chunks still carry `INCOMPLETE`,
    or a replaced version is still stored beside the new one)"""

    @property
    def complete(self) -> bool:
        """Whether the document is stored whole and its write finished (an interrupted write
        leaves chunks missing, or marked `INCOMPLETE` and kept out of answers)."""
        if self.unfinished:
            return False
        return self.expected_chunks is None or self.chunks == self.expected_chunks

    @property
    def stored(self) -> str:
        """The chunks stored, for people: ``19 of 40`` (``19`` when the count is unknown)."""
        if self.expected_chunks is None:
            return str(self.chunks)
        return f"{self.chunks} of {self.expected_chunks}"


def records(payloads: Iterable[dict[str, Any]]) -> dict[str, DocumentRecord]:
    """The documents of these chunk payloads, each with its chunks counted.

    Chunks are counted per version of a document (its content hash). A document holds two
    versions only while (or after) a replacement is cut short: its record is then the version
    being written, and not complete.
    """
    firsts: dict[tuple[str, str], dict[str, Any]] = {}
    counts: dict[tuple[str, str], int] = {}
    marked: set[tuple[str, str]] = set()
    for payload in payloads:
        key = (str(payload.get("doc_id", "")), str(payload.get("content_hash", "")))
        firsts.setdefault(key, payload)
        counts[key] = counts.get(key, 0) + 1
        if payload.get(INCOMPLETE) is True:
            marked.add(key)
    versions: dict[str, list[DocumentRecord]] = {}
    for key, payload in firsts.items():
        expected = payload.get("chunk_count")
        versions.setdefault(key[0], []).append(
            DocumentRecord(
                doc_id=key[0],
                content_hash=key[1],
                file_path=str(payload.get("file_path", "")),
                file_name=str(payload.get("file_name", "")),
                title=str(payload.get("title", "")),
                chunks=counts[key],
                expected_chunks=expected if isinstance(expected, int) else None,
                unfinished=key in marked,
            )
        )
    found: dict[str, DocumentRecord] = {}
    for doc_id, kept in versions.items():
        shown = next((r for r in kept if not r.complete), kept[0])
        if len(kept) > 1:
            shown = dataclasses.replace(shown, unfinished=True)
        found[doc_id] = shown
    return found


def complete_hashes(found: dict[str, DocumentRecord]) -> dict[str, str]:
    """Each document's content hash, or "" for one with chunks missing (written only in part),
    so that it is written again rather than taken as unchanged."""
    return {k: r.content_hash if r.complete else "" for k, r in found.items()}


def to_node(point_id: str, payload: dict[str, Any]) -> BaseNode:
    """A stored point as a LlamaIndex node (payload written by citeflow or QdrantVectorStore)."""
    try:
        return metadata_dict_to_node(payload)
    except Exception:  # an older LlamaIndex payload without _node_content
        metadata, info, relationships = legacy_metadata_dict_to_node(payload)
        return TextNode(
            id_=point_id,
            text=str(payload.get("text", "")),
            metadata=metadata,
            start_char_idx=info.get("start"),
            end_char_idx=info.get("end"),
            relationships=relationships,
        )
