"""PDF reader: one `Document` per page that has text (pypdf)."""

from __future__ import annotations

import logging
import re
from io import BytesIO
from pathlib import Path

import pypdf
from llama_index.core.schema import Document

from citeflow.errors import IngestError
from citeflow.ingestion.readers.documents import make_document
from citeflow.ingestion.readers.text_cleanup import (
    collapse_spaces,
    normalise,
    short_reason,
    title_from_stem,
)

__all__ = ["read_pdf"]

logger = logging.getLogger(__name__)


def read_pdf(path: Path, data: bytes) -> list[Document]:
    """One Document per PDF page that has text (pypdf)."""
    name = path.name
    if b"%PDF-" not in data[:1024]:
        raise IngestError(f"{name}: not a PDF file (no %PDF header)")
    try:
        reader = pypdf.PdfReader(BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise IngestError(f"{name}: encrypted PDF (needs a password)")
        pages = list(reader.pages)
    except IngestError:
        raise
    except Exception as exc:
        raise IngestError(f"{name}: corrupt or unreadable PDF ({short_reason(exc)})") from exc
    if not pages:
        raise IngestError(f"{name}: PDF has no pages")

    title = _pdf_title(reader) or title_from_stem(path)
    labels = _pdf_page_labels(reader, len(pages))

    documents: list[Document] = []
    failures: list[str] = []
    for index, page in enumerate(pages):
        try:
            raw = page.extract_text()
        except Exception as exc:  # one bad page should not cost the whole file
            failures.append(short_reason(exc))
            logger.warning("%s: cannot extract text of page %d (%s)", name, index + 1, failures[-1])
            continue
        text = normalise(raw or "")
        if not text:
            continue  # blank or image-only page
        extra = {"page_label": labels[index], "page": index + 1}
        documents.append(make_document(path, text, title, extra))

    if not documents:
        if failures:
            raise IngestError(f"{name}: cannot extract text ({failures[0]})")
        raise IngestError(f"{name}: no extractable text (scanned PDF?)")
    return documents


def _pdf_title(reader: pypdf.PdfReader) -> str | None:
    """The title from the PDF's metadata, ignoring blank and placeholder titles."""
    try:
        metadata = reader.metadata
        raw = metadata.title if metadata is not None else None
    except Exception:
        return None
    if not raw:
        return None
    title = collapse_spaces(str(raw))
    title = re.sub(r"^Microsoft (?:Word|PowerPoint) - ", "", title)
    if title.lower() in {"", "untitled", "title", "no title"}:
        return None
    return title


def _pdf_page_labels(reader: pypdf.PdfReader, count: int) -> list[str]:
    """The PDF's page labels (e.g. "iv", "12"), falling back to "1", "2", ..."""
    default = [str(number) for number in range(1, count + 1)]
    try:
        labels = list(reader.page_labels)
    except Exception:
        return default
    if len(labels) != count:
        return default
    return [label or fallback for label, fallback in zip(labels, default, strict=True)]
