"""Turn files on disk into LlamaIndex `Document`s.

Two entry points:

* `discover` expands the paths a user gave (files and folders, recursively) into the files we can
  read, plus the ones we skip and why.
* `read_file` reads one file: one `Document` per page for a PDF, one `Document` otherwise.

The text of every `Document` is normalised the same way: Unix newlines, no trailing spaces, no
control characters, and paragraphs separated by exactly one blank line (the chunker splits on
blank lines, so paragraph breaks are kept and runs of blank lines are collapsed).

Any problem with a file becomes an `IngestError` whose message is one line naming the file and
what is wrong ("report.pdf: no extractable text (scanned PDF?)"); the caller skips that file and
reports the line. Library exceptions never escape (they are chained for debugging).
"""

from __future__ import annotations

import logging
import os
import re
import zipfile
from collections.abc import Iterable, Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

import docx
import pypdf
from bs4 import BeautifulSoup
from bs4.element import NavigableString, PreformattedString, Tag
from docx.table import Table
from docx.text.paragraph import Paragraph
from llama_index.core.schema import Document

from citeflow.errors import IngestError

__all__ = [
    "EXCLUDED_EMBED_METADATA_KEYS",
    "EXCLUDED_LLM_METADATA_KEYS",
    "SUPPORTED_SUFFIXES",
    "discover",
    "read_file",
]

logger = logging.getLogger(__name__)

#: File suffixes (lower case, with the dot) that `read_file` understands.
SUPPORTED_SUFFIXES: frozenset[str] = frozenset(
    {".txt", ".md", ".markdown", ".pdf", ".docx", ".html", ".htm"}
)

_MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
_HTML_SUFFIXES = frozenset({".html", ".htm"})

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

# ---------------------------------------------------------------------------------------------
# Discovery
# ---------------------------------------------------------------------------------------------


def discover(paths: Iterable[Path]) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Expand files and folders into readable files and skipped paths.

    Folders are walked recursively; hidden files and folders (names starting with ``.``, such as
    ``.git``) are skipped silently, symlinked folders are not followed. Each folder's files come
    back sorted, and the inputs keep their order, so the result is deterministic. A file reached
    twice (listed and inside a listed folder) is returned once. Paths that were given explicitly
    are taken even if hidden.

    Args:
        paths: Files and/or folders.

    Returns:
        ``(files, skipped)``: the supported files, and ``(path, reason)`` for every file or path
        that will not be read (unsupported type, path does not exist, ...). Nothing is raised for a
        bad path; it is reported in ``skipped``.
    """
    files: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    seen: set[Path] = set()

    for given in paths:
        path = Path(given)
        candidates: list[Path]
        if path.is_dir():
            candidates = _walk(path, skipped)
        elif path.is_file():
            candidates = [path]
        elif path.is_symlink():
            skipped.append((path, "broken symbolic link"))
            continue
        elif path.exists():
            skipped.append((path, "not a regular file or folder"))
            continue
        else:
            skipped.append((path, "path does not exist"))
            continue

        for candidate in candidates:
            key = candidate.resolve()
            if key in seen:
                continue
            seen.add(key)
            reason = _skip_reason(candidate)
            if reason is None:
                files.append(candidate)
            else:
                skipped.append((candidate, reason))
    return files, skipped


def _walk(folder: Path, skipped: list[tuple[Path, str]]) -> list[Path]:
    """All non-hidden files under `folder`, sorted; unreadable sub-folders go to `skipped`."""

    def on_error(exc: OSError) -> None:
        where = Path(exc.filename) if exc.filename else folder
        skipped.append((where, f"cannot read folder ({exc.strerror or exc})"))

    found: list[Path] = []
    for root, dirnames, filenames in os.walk(folder, onerror=on_error):
        # Prune in place so os.walk never descends into hidden folders (.git, .venv, ...).
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        root_path = Path(root)
        found.extend(root_path / name for name in filenames if not name.startswith("."))
    found.sort()
    return found


def _skip_reason(path: Path) -> str | None:
    """Why `path` (a file found by `discover`) will not be read, or None if it will."""
    if path.name.startswith("~$"):
        return "temporary Office lock file"
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        if not suffix:
            return "unsupported file type (no extension)"
        return f"unsupported file type ({path.suffix})"
    if not path.is_file():  # e.g. a broken symlink found while walking a folder
        return "not a regular file (broken link?)"
    return None


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


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
        return _read_pdf(path, data)
    if suffix == ".docx":
        text, title = _read_docx(path, data)
    elif suffix in _HTML_SUFFIXES:
        text, title = _read_html(path, data)
    else:
        text = _normalise(_decode_text(path, data))
        title = _markdown_title(text) if suffix in _MARKDOWN_SUFFIXES else None
    if not text:
        raise IngestError(f"{path.name}: no text found")
    return [_make_document(path, text, title or _title_from_stem(path))]


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


def _make_document(
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


def _short(exc: BaseException) -> str:
    """A library exception as a short, single-line reason."""
    text = str(exc).strip().strip("'\"").strip()  # KeyError quotes its message
    message = text.splitlines()[0] if text else type(exc).__name__
    return message if len(message) <= 120 else message[:117] + "..."


# --- PDF --------------------------------------------------------------------------------------


def _read_pdf(path: Path, data: bytes) -> list[Document]:
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
        raise IngestError(f"{name}: corrupt or unreadable PDF ({_short(exc)})") from exc
    if not pages:
        raise IngestError(f"{name}: PDF has no pages")

    title = _pdf_title(reader) or _title_from_stem(path)
    labels = _pdf_page_labels(reader, len(pages))

    documents: list[Document] = []
    failures: list[str] = []
    for index, page in enumerate(pages):
        try:
            raw = page.extract_text()
        except Exception as exc:  # one bad page should not cost the whole file
            failures.append(_short(exc))
            logger.warning("%s: cannot extract text of page %d (%s)", name, index + 1, failures[-1])
            continue
        text = _normalise(raw or "")
        if not text:
            continue  # blank or image-only page
        extra = {"page_label": labels[index], "page": index + 1}
        documents.append(_make_document(path, text, title, extra))

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
    title = _collapse_spaces(str(raw))
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


# --- DOCX -------------------------------------------------------------------------------------


def _read_docx(path: Path, data: bytes) -> tuple[str, str | None]:
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
        raise IngestError(f"{name}: not a valid .docx file ({_short(exc)})") from exc
    title = _collapse_spaces(core_title or "") or first_title or first_heading or None
    return _normalise("\n\n".join(blocks)), title


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
            first_title = _collapse_spaces(text)
        elif style == "heading 1" and first_heading is None:
            first_heading = _collapse_spaces(text)
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
    return _collapse_spaces(" ".join(parts))


# --- HTML -------------------------------------------------------------------------------------

# Elements whose content is never document text.
_HTML_DROP = frozenset(
    {
        "script", "style", "noscript", "template", "head", "svg", "canvas", "iframe", "object",
        "embed", "video", "audio", "map", "form", "input", "button", "select", "textarea",
        "label", "nav", "footer", "aside", "dialog", "menu",
    }
)  # fmt: skip
# ARIA landmark roles of page chrome.
_HTML_DROP_ROLES = frozenset(
    {"navigation", "banner", "contentinfo", "search", "complementary", "menu", "menubar",
     "toolbar", "dialog", "alertdialog", "tablist", "button"}
)  # fmt: skip
# Class names of common chrome (exact class tokens, so "nav" never matches "canvas-nav-x").
_HTML_DROP_CLASSES = frozenset(
    {"navbar", "navbox", "vertical-navbox", "breadcrumb", "breadcrumbs", "cookie-banner",
     "skip-link", "sr-only", "visually-hidden", "noprint", "mw-editsection", "mw-jump-link",
     "catlinks", "printfooter", "sidebar", "toc"}
)  # fmt: skip
# Elements that start and end a paragraph.
_HTML_BLOCK = frozenset(
    {
        "address", "article", "blockquote", "body", "caption", "center", "dd", "details", "div",
        "dl", "dt", "fieldset", "figcaption", "figure", "h1", "h2", "h3", "h4", "h5", "h6",
        "header", "hr", "html", "main", "ol", "p", "pre", "section", "summary", "table", "tbody",
        "tfoot", "thead", "ul",
    }
)  # fmt: skip
_HTML_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_WHITESPACE_RUN = re.compile(r"\s+")


def _read_html(path: Path, data: bytes) -> tuple[str, str | None]:
    """Readable text of an HTML page (without scripts, styles and page chrome) and its title."""
    try:
        markup: str | bytes = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        markup = data  # let BeautifulSoup honour <meta charset> or detect the encoding
    try:
        soup = _parse_html(markup)
        title = _html_title(soup)
        text = _html_text(soup)
    except Exception as exc:
        raise IngestError(f"{path.name}: cannot parse HTML ({_short(exc)})") from exc
    return _normalise(text), title


def _parse_html(markup: str | bytes) -> BeautifulSoup:
    """Parse with lxml (fast; a python-docx dependency), falling back to the stdlib parser."""
    try:
        return BeautifulSoup(markup, "lxml")
    except Exception:  # bs4.FeatureNotFound if lxml is missing
        return BeautifulSoup(markup, "html.parser")


def _html_title(soup: BeautifulSoup) -> str | None:
    """The <title>, else the first <h1>, else None."""
    for tag in (soup.title, soup.find("h1")):
        if isinstance(tag, Tag):
            title = _collapse_spaces(tag.get_text(" "))
            if title:
                return title
    return None


def _html_is_noise(tag: Tag) -> bool:
    """Whether `tag` is page chrome or hidden, so its whole subtree is dropped."""
    if tag.name in _HTML_DROP:
        return True
    attrs = tag.attrs
    if not attrs:
        return False
    if "hidden" in attrs or str(attrs.get("aria-hidden", "")).lower() == "true":
        return True
    role = attrs.get("role")
    if isinstance(role, str) and role.lower() in _HTML_DROP_ROLES:
        return True
    classes = attrs.get("class")
    if classes:
        tokens = classes.split() if isinstance(classes, str) else list(classes)
        if not _HTML_DROP_CLASSES.isdisjoint(tokens):
            return True
    return False


def _html_text(soup: BeautifulSoup) -> str:
    """Walk the content root and write its text with paragraph, line and table-cell breaks.

    The content root is the page's <main> (or role="main") when it has one, else <body>. A
    <header> keeps only its headings (the article title), not the menus around it. List items get
    a "- " prefix, table rows become lines with cells joined by " | ". The walk uses an explicit
    stack, so deeply nested markup cannot hit the recursion limit.
    """
    main = soup.find("main") or soup.find(role="main")
    root: Tag = main if isinstance(main, Tag) else (soup.body or soup)
    writer = _HtmlTextWriter()

    # Stack entries: a node to visit, or a plain str naming the element that ends there.
    stack: list[Any] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, NavigableString):
            if not isinstance(node, PreformattedString):  # skip comments, doctype, CDATA, ...
                writer.text(node)
        elif isinstance(node, str):
            writer.end(node)
        elif isinstance(node, Tag) and not _html_is_noise(node):
            if node.name == "header" and node is not root:
                children: list[Any] = node.find_all(_HTML_HEADINGS)
            else:
                children = list(node.children)
            writer.start(node.name)
            stack.append(node.name)  # end marker, popped after the children
            stack.extend(reversed(children))
    return writer.result()


class _HtmlTextWriter:
    """Collects HTML text, merging adjacent breaks and spaces instead of stacking them.

    Breaks, spaces, list bullets and cell separators are kept *pending* and only written before
    the next piece of text, so empty elements and whitespace between tags leave no trace.
    """

    def __init__(self) -> None:
        self.out: list[str] = []
        self.pending_break = 0  # newlines owed before the next text: 0, 1 or 2
        self.pending_space = False
        self.pending_prefix = ""  # "- " for a list item, " | " between table cells
        self.line_start = True  # no text written since the last break
        self.pre_depth = 0  # inside <pre>: whitespace is kept verbatim
        self.cell_depth = 0  # inside <td>/<th>: breaks become spaces, keeping the row on a line
        self.list_depth = 0  # inside <li>: a nested list is not a new paragraph

    def start(self, name: str) -> None:
        """An element opens."""
        if name == "br":
            self.line_break(1)
        elif name in ("td", "th"):
            if not self.line_start:
                self.pending_prefix = " | "
            self.cell_depth += 1
        elif name == "li":
            self.line_break(1)
            self.pending_prefix = "- "
            self.list_depth += 1
        elif name in ("tr", "dt", "dd"):
            self.line_break(1)
        elif name in _HTML_BLOCK:
            nested_list = self.list_depth and name in ("ul", "ol", "dl")
            self.line_break(1 if nested_list else 2)
        if name == "pre":
            self.pre_depth += 1

    def end(self, name: str) -> None:
        """An element closes."""
        if name in ("td", "th"):
            self.cell_depth -= 1
        elif name == "li":
            self.list_depth -= 1
            self.line_break(1)
        elif name in ("tr", "dt", "dd"):
            self.line_break(1)
        elif name in _HTML_BLOCK:
            nested_list = self.list_depth and name in ("ul", "ol", "dl")
            self.line_break(1 if nested_list else 2)
        if name == "pre":
            self.pre_depth -= 1

    def line_break(self, newlines: int) -> None:
        """Owe a line break (1) or paragraph break (2); inside a table cell, just a space."""
        if self.cell_depth:
            self.pending_space = True
            return
        self.pending_break = max(self.pending_break, newlines)
        self.pending_space = False
        self.pending_prefix = ""
        self.line_start = True

    def text(self, raw: str) -> None:
        """A text node."""
        if self.pre_depth:
            if raw:
                self._flush()
                self.out.append(raw)
                self.line_start = raw.endswith("\n")
            return
        collapsed = _WHITESPACE_RUN.sub(" ", raw)
        core = collapsed.strip(" ")
        if not core:
            if collapsed and not self.line_start:
                self.pending_space = True
            return
        if collapsed[0] == " ":
            self.pending_space = True
        self._flush()
        self.out.append(core)
        self.line_start = False
        self.pending_space = collapsed[-1] == " "

    def _flush(self) -> None:
        """Write what is owed before new text."""
        if self.pending_break:
            if self.out:
                self.out.append("\n" * self.pending_break)
            self.pending_break = 0
        elif self.pending_space and not self.line_start and not self.pending_prefix:
            self.out.append(" ")
        if self.pending_prefix:
            self.out.append(self.pending_prefix)
            self.pending_prefix = ""
        self.pending_space = False

    def result(self) -> str:
        """The collected text."""
        return "".join(self.out)


# --- Text and Markdown ------------------------------------------------------------------------


def _decode_text(path: Path, data: bytes) -> str:
    """Decode UTF-8 (with or without BOM) or UTF-16 with BOM; else Windows-1252, never failing.

    Windows-1252 is used instead of plain latin-1 for the fallback: it is identical for letters
    and also maps the curly quotes and dashes of legacy Windows files (latin-1 would turn them
    into invisible C1 control characters). Undefined bytes become U+FFFD.
    """
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise IngestError(f"{path.name}: cannot decode UTF-16 text ({exc.reason})") from exc
    if b"\x00" in data[:8192]:
        raise IngestError(f"{path.name}: binary data, not text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        logger.info("%s: not valid UTF-8, decoding as Windows-1252", path.name)
        return data.decode("cp1252", errors="replace")


_FENCED_CODE = re.compile(r"^ {0,3}(`{3,}|~{3,}).*?^ {0,3}\1", re.MULTILINE | re.DOTALL)
_FRONT_MATTER = re.compile(r"\A---\n(?P<body>.*?)\n(?:---|\.\.\.)[ \t]*$", re.MULTILINE | re.DOTALL)
_FRONT_MATTER_TITLE = re.compile(r"^title:[ \t]*(?P<title>.+?)[ \t]*$", re.MULTILINE)
_ATX_H1 = re.compile(r"^ {0,3}#[ \t]+(?P<title>.+?)(?:[ \t]+#+)?[ \t]*$", re.MULTILINE)
_SETEXT_H1 = re.compile(r"^ {0,3}(?P<title>\S.*)\n {0,3}=+[ \t]*$", re.MULTILINE)
_MD_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MD_EMPHASIS = re.compile(r"[*_`]+")


def _markdown_title(text: str) -> str | None:
    """Title from YAML front matter, else the first level-1 heading (``# Title`` or setext)."""
    front = _FRONT_MATTER.match(text)
    found = _FRONT_MATTER_TITLE.search(front.group("body")) if front else None
    if found:
        title = found.group("title").strip("\"'").strip()
        if title:
            return title
    # Blank out fenced code so a "# comment" in a shell snippet is not taken for a heading.
    prose = _FENCED_CODE.sub("", text)
    matches = [m for m in (_ATX_H1.search(prose), _SETEXT_H1.search(prose)) if m]
    if not matches:
        return None
    heading = min(matches, key=lambda m: m.start()).group("title")
    heading = _MD_EMPHASIS.sub("", _MD_LINK.sub(r"\1", heading))
    return _collapse_spaces(heading) or None


# --- Shared helpers ---------------------------------------------------------------------------

_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f\u00ad\u200b\ufeff]")
_BLANK_LINES = re.compile(r"\n{3,}")


def _normalise(text: str) -> str:
    """Unix newlines, no control characters or trailing spaces, at most one blank line in a row.

    Form feeds (page breaks in text files) become paragraph breaks and vertical tabs become line
    breaks; leading indentation is kept (code blocks). All regex passes, no per-character loops.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = text.replace("\x0c", "\n\n").replace("\x0b", "\n")
    text = _CONTROL_CHARS.sub("", text)
    # Per line, not per character; a regex like r"[ \t]+$" is quadratic on long runs of spaces.
    text = "\n".join([line.rstrip() for line in text.split("\n")])
    text = _BLANK_LINES.sub("\n\n", text)
    return text.strip("\n").rstrip()


def _collapse_spaces(text: str) -> str:
    """All whitespace runs to one space, stripped (for titles and table cells)."""
    return _WHITESPACE_RUN.sub(" ", text).strip()


def _title_from_stem(path: Path) -> str:
    """A readable title from the file name: ``paul_graham-essay.txt`` -> ``paul graham essay``."""
    title = _collapse_spaces(re.sub(r"[_-]+", " ", path.stem))
    return title or path.name
