"""A cited `Source` as the server shows it: an Open WebUI ``source`` event's data, an OpenAI
``url_citation`` annotation, a line of the Markdown source list.

Open WebUI numbers sources by order of arrival and merges those that share a key, so each cited
number gets its own key ``<doc_id>#<n>`` (two passages of one document are two chips) and the
server sends only cited sources, numbered 1..K in order of first citation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from openai.types.chat.chat_completion_message import Annotation, AnnotationURLCitation

from citeflow.api.links import document_path
from citeflow.api.schemas import SourceData, SourceMetadata, SourceRef
from citeflow.citations.sources import Source
from citeflow.result import CitedResponse

_URL_KEYS = ("url", "source_url", "link", "original_url")

#: ``(collection, doc_id) -> URL`` of a document's original file
DocumentLink = Callable[[str, str], str]


def _original_url(metadata: Mapping[str, Any]) -> str | None:
    for key in _URL_KEYS:
        value = metadata.get(key)
        if isinstance(value, str) and value.startswith(("http://", "https://")):
            return value
    return None


def _page(metadata: Mapping[str, Any]) -> int | None:
    """The 0-based page of a source, when the document has pages."""
    if metadata.get("page_label") in (None, ""):
        return None
    for key in ("page", "page_label"):
        value = metadata.get(key)
        if isinstance(value, int) and value >= 1:
            return value - 1
        if isinstance(value, str) and value.strip().isdigit() and int(value) >= 1:
            return int(value) - 1
    return None


def source_payload(
    source: Source,
    number: int,
    *,
    collection: str,
    link: DocumentLink = document_path,
) -> SourceData:
    """The ``data`` of an Open WebUI ``source`` event for cited source ``number``.

    ``metadata[0].source`` (Open WebUI's grouping key) is ``<doc_id>#<number>``: stable for the
    document, unique per number, never a URL. ``source.url`` is the document's original URL when
    its metadata has one, else ``link``'s URL of it (by default citeflow's document path).
    """
    doc_id = source.document
    file_name = source.title or doc_id
    name = f"{file_name}, page {source.page}" if source.page is not None else file_name
    url = _original_url(source.metadata) or link(collection, doc_id)
    ref: SourceRef = {"id": doc_id, "name": name, "url": url}
    metadata: SourceMetadata = {"source": f"{doc_id}#{number}", "name": name}
    page = _page(source.metadata)
    if page is not None:
        metadata["page"] = page
    metadata["doc_id"] = doc_id
    metadata["file_name"] = file_name
    return {
        "source": ref,
        "document": [source.text.strip()],
        "metadata": [metadata],
        "distances": [round(float(source.score or 0.0), 4)],
    }


def url_citation(payload: SourceData, number: int, at: int = 0) -> Annotation:
    """Cited source ``number`` as an OpenAI ``url_citation`` annotation: its document's name and
    link. Open WebUI keys an annotation's source by its URL and numbers sources in the order
    they arrive, so the URL carries the number (``#source-N``) to stay unique per number;
    ``start_index``/``end_index`` span the ``[N]`` marker in the answer."""
    base = payload["source"]["url"].split("#", 1)[0]
    return Annotation(
        type="url_citation",
        url_citation=AnnotationURLCitation(
            url=f"{base}#source-{number}",
            title=payload["source"]["name"],
            start_index=at,
            end_index=at + len(f"[{number}]"),
        ),
    )


def source_list_markdown(
    result: CitedResponse, mapping: Mapping[int, int], payloads: Sequence[SourceData]
) -> str:
    """A Markdown list of the cited sources, for clients that ignore source events."""
    if not payloads:
        return ""
    quotes: dict[int, str] = {}
    for citation in result.citations:
        new = mapping.get(citation.number)
        if new is not None and citation.quote and new not in quotes:
            quotes[new] = citation.quote
    lines = ["", "", "**Sources**", ""]
    for number, payload in enumerate(payloads, start=1):
        snippet = " ".join(quotes.get(number, payload["document"][0]).split())
        snippet = snippet if len(snippet) <= 110 else snippet[:109].rstrip() + "…"
        lines.append(f"{number}. {payload['source']['name']}: “{snippet}”")
    return "\n".join(lines)
