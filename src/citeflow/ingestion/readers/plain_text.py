"""Plain text and Markdown: decoding bytes whatever the encoding, and a Markdown file's title."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from citeflow.errors import IngestError
from citeflow.ingestion.readers.text_cleanup import collapse_spaces

__all__ = ["decode_text", "markdown_title"]

logger = logging.getLogger(__name__)


def decode_text(path: Path, data: bytes) -> str:
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


def markdown_title(text: str) -> str | None:
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
    return collapse_spaces(heading) or None
