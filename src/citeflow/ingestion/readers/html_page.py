"""HTML reader: a page's readable text, without scripts, styles and page chrome."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bs4 import BeautifulSoup
from bs4.element import NavigableString, PreformattedString, Tag

from citeflow.errors import IngestError
from citeflow.ingestion.readers.text_cleanup import (
    WHITESPACE_RUN,
    collapse_spaces,
    normalise,
    short_reason,
)

__all__ = ["read_html"]

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


def read_html(path: Path, data: bytes) -> tuple[str, str | None]:
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
        raise IngestError(f"{path.name}: cannot parse HTML ({short_reason(exc)})") from exc
    return normalise(text), title


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
            title = collapse_spaces(tag.get_text(" "))
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
    return not _HTML_DROP_CLASSES.isdisjoint(tag.get_attribute_list("class"))


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
        if name in ("td", "th"):
            if not self.line_start:
                self.pending_prefix = " | "
            self.cell_depth += 1
        elif name == "li":
            self.line_break(1)
            self.pending_prefix = "- "
            self.list_depth += 1
        elif name in ("br", "tr", "dt", "dd"):
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
        collapsed = WHITESPACE_RUN.sub(" ", raw)
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
