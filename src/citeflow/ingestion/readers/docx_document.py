"""Word (.docx) reader: paragraphs, headings, list items and tables in reading order."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

import docx
from docx.table import Table
from docx.text.paragraph import Paragraph

from citeflow.errors import IngestError
from citeflow.ingestion.readers.text_cleanup import collapse_spaces, normalise, short_reason

__all__ = ["read_docx"]


def read_docx(path: Path, data: bytes) -> tuple[str, str | None]:
    """Text (paragraphs, headings, list items and tables in reading order) and title."""
    name = path.name
    stream = BytesIO(data)
    if not zipfile.is_zipfile(stream):
        raise IngestError(f"{name}: not a valid .docx file (not a ZIP archive)")
    try:
        document = docx.Document(stream)
        blocks, first_title, first_heading = _docx_blocks(document.iter_inner_content())
        core_title = document.core_properties.title
    except Exception as exc:
        raise IngestError(f"{name}: not a valid .docx file ({short_reason(exc)})") from exc
    title = collapse_spaces(core_title or "") or first_title or first_heading or None
    return normalise("\n\n".join(blocks)), title


def _docx_blocks(items: Iterator[Paragraph | Table]) -> tuple[list[str], str | None, str | None]:
    """Render body items as text blocks; also return the first Title and first Heading 1 text.

    Headings become their own paragraph; consecutive list items form one block, one "- " item
    per line; a table becomes one block, one row per line with cells joined by " | ".
    """
    blocks: list[str] = []
    list_items: list[str] = []
    first_title: str | None = None
    first_heading: str | None = None

    def flush_list() -> None:
        if list_items:
            blocks.append("\n".join(list_items))
            list_items.clear()

    for item in items:
        if isinstance(item, Table):
            flush_list()
            table_text = _docx_table(item)
            if table_text:
                blocks.append(table_text)
            continue
        text = item.text.strip()
        if not text:
            continue
        style = (item.style.name or "").lower() if item.style is not None else ""
        if style.startswith("list"):
            list_items.append(f"- {text}")
            continue
        flush_list()
        blocks.append(text)
        if style == "title" and first_title is None:
            first_title = collapse_spaces(text)
        elif style == "heading 1" and first_heading is None:
            first_heading = collapse_spaces(text)
    flush_list()
    return blocks, first_title, first_heading


def _docx_table(table: Table) -> str:
    """A table as text: one line per row, cells joined by " | ", merged cells written once."""
    lines: list[str] = []
    # python-docx repeats a merged cell at every grid position it spans (horizontally and
    # vertically), each time as a new `_Cell` proxy. Its first paragraph's XML element (public
    # through `ParagraphFormat.element`) identifies it; the set keeps the lxml proxies alive, so
    # identity comparison is reliable. (Word requires a paragraph in every cell; a cell without
    # one is never taken for another.)
    seen: set[Any] = set()
    for row in table.rows:
        cells: list[str] = []
        for cell in row.cells:
            paragraphs = cell.paragraphs
            element = paragraphs[0].paragraph_format.element if paragraphs else cell
            if element in seen:
                continue
            seen.add(element)
            text = _docx_cell_text(cell.iter_inner_content())
            if text:
                cells.append(text)
        if cells:
            lines.append(" | ".join(cells))
    return "\n".join(lines)


def _docx_cell_text(items: Iterator[Paragraph | Table]) -> str:
    """A cell's paragraphs (and nested tables, rows separated by " / ") on one line."""
    parts: list[str] = []
    for item in items:
        if isinstance(item, Table):
            nested = _docx_table(item).replace("\n", " / ")
            if nested:
                parts.append(nested)
        else:
            text = item.text.strip()
            if text:
                parts.append(text)
    return collapse_spaces(" ".join(parts))
