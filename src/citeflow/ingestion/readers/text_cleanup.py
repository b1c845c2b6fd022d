"""Text clean-up shared by the readers: normalised paragraphs, titles and one-line reasons.

Every reader's text is normalised the same way (see `normalise`), since the chunker splits on
blank lines.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["WHITESPACE_RUN", "collapse_spaces", "normalise", "short_reason", "title_from_stem"]

WHITESPACE_RUN = re.compile(r"\s+")
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f\u00ad\u200b\ufeff]")
_BLANK_LINES = re.compile(r"\n{3,}")


def normalise(text: str) -> str:
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


def collapse_spaces(text: str) -> str:
    """All whitespace runs to one space, stripped (for titles and table cells)."""
    return WHITESPACE_RUN.sub(" ", text).strip()


def title_from_stem(path: Path) -> str:
    """A readable title from the file name: ``paul_graham-essay.txt`` -> ``paul graham essay``."""
    title = collapse_spaces(re.sub(r"[_-]+", " ", path.stem))
    return title or path.name


def short_reason(exc: BaseException) -> str:
    """A library exception as a short, single-line reason."""
    text = str(exc).strip().strip("'\"").strip()  # KeyError quotes its message
    message = text.splitlines()[0] if text else type(exc).__name__
    return message if len(message) <= 120 else message[:117] + "..."
