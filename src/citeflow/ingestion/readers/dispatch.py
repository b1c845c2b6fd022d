"""`read_file`: read one file with the reader for its format."""

from __future__ import annotations

from pathlib import Path

from llama_index.core.schema import Document

from citeflow.errors import IngestError
from citeflow.ingestion.readers.documents import make_document
from citeflow.ingestion.readers.docx_document import read_docx
from citeflow.ingestion.readers.html_page import read_html
from citeflow.ingestion.readers.pdf import read_pdf
from citeflow.ingestion.readers.plain_text import decode_text, markdown_title
from citeflow.ingestion.readers.text_cleanup import normalise, title_from_stem

__all__ = ["SUPPORTED_SUFFIXES", "read_file"]

#: File suffixes (lower case, with the dot) that `read_file` understands.
SUPPORTED_SUFFIXES: frozenset[str] = frozenset(
    {".txt", ".md", ".markdown", ".pdf", ".docx", ".html", ".htm"}
)

_MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
_HTML_SUFFIXES = frozenset({".html", ".htm"})


def read_file(path: Path) -> list[Document]:
    """Read one file into Documents: one per page for PDFs, one for every other format.

    Metadata on every Document: ``file_name``, ``file_path`` (absolute), ``title``, ``file_type``
    (suffix without the dot, lower case); PDFs also get ``page_label`` (str, the PDF's own page
    label when it defines one, else the 1-based page number, like LlamaIndex's PDF reader) and
    ``page`` (int, 1-based physical page).

    Args:
        path: A file with a suffix in `SUPPORTED_SUFFIXES`.

    Returns:
        At least one Document with non-empty text.

    Raises:
        IngestError: ``"<file name>: <reason>"`` if the file is missing, unsupported, empty,
            corrupt or has no text.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise IngestError(f"{path.name}: unsupported file type ({path.suffix or 'no extension'})")
    data = _read_bytes(path)

    if suffix == ".pdf":
        return read_pdf(path, data)
    if suffix == ".docx":
        text, title = read_docx(path, data)
    elif suffix in _HTML_SUFFIXES:
        text, title = read_html(path, data)
    else:
        text = normalise(decode_text(path, data))
        title = markdown_title(text) if suffix in _MARKDOWN_SUFFIXES else None
    if not text:
        raise IngestError(f"{path.name}: no text found")
    return [make_document(path, text, title or title_from_stem(path))]


def _read_bytes(path: Path) -> bytes:
    """The file's bytes; missing, unreadable and empty files are `IngestError`s."""
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise IngestError(f"{path.name}: file not found") from exc
    except IsADirectoryError as exc:
        raise IngestError(f"{path.name}: is a folder, not a file") from exc
    except OSError as exc:
        raise IngestError(f"{path.name}: cannot read file ({exc.strerror or exc})") from exc
    if not data.strip():
        raise IngestError(f"{path.name}: empty file")
    return data
