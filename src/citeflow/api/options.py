"""The server's own knobs: request limits, keep-alive interval, the Markdown source list default,
the search budget.

They are not (yet) fields of `citeflow.settings.Settings`; `ServerOptions.from_settings` reads
them from the settings when a field of the same name exists there, so adding one to `Settings`
(``CITEFLOW_MAX_MESSAGE_CHARS`` etc.) makes it configurable with no change here.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal

from citeflow.settings import Settings

#: Model ids are ``citeflow-<collection>``.
MODEL_PREFIX = "citeflow-"


@dataclass(frozen=True, slots=True)
class ServerOptions:
    """Limits and defaults of the HTTP server.

    Attributes:
        max_message_chars: longest accepted message content (characters); longer is HTTP 413.
        max_body_bytes: largest accepted request body; larger is HTTP 413 before parsing.
        max_upload_bytes: largest accepted uploaded document, and of all the files of one
            upload request together (plus 64 KiB of multipart framing); larger is HTTP 413, by
            the ``Content-Length`` before the body is read, else as soon as it passes the limit.
        keepalive_seconds: an SSE comment line is sent after this many silent seconds.
        source_list: append a Markdown list of the cited sources to answers by default (for
            clients that ignore Open WebUI's source events); off, since Open WebUI would show
            the sources twice. A request can ask for it (``"citeflow": {"source_list": true}``
            or the ``X-Citeflow-Source-List: true`` header).
        annotations: send each cited source as an OpenAI ``url_citation`` annotation too
            (``delta.annotations`` in streams, ``message.annotations`` otherwise): ``auto`` for
            requests from a browser (an ``Origin`` header: an Open WebUI Direct Connection,
            whose source events Open WebUI ignores), ``on`` for every request (other OpenAI
            clients; Open WebUI's server-side connections would then list each source twice),
            ``off``.
        cancel_timeout: seconds to wait for a cancelled workflow run to wind down.
        max_concurrent_chats: chat completions in progress at once; more get HTTP 429 (0: off).
        chats_per_minute: chat completions per minute per client; more get HTTP 429 (0: off).
        search_timeout: seconds one ``POST /search`` may take; past them it answers with what
            it has (`citeflow.api.search`), never with an error.
        loop: uvicorn's event loop: ``auto`` (uvloop when installed, else asyncio), ``uvloop``
            or ``asyncio``.
        http: uvicorn's HTTP/1.1 implementation: ``auto`` (httptools when installed, else h11),
            ``httptools`` or ``h11``.
        max_skill_records: most records in one call of the embedding skill
            (``POST /v1/skills/embeddings``, `citeflow.api.skills`); more is HTTP 413. Azure AI
            Search sends up to the skill's ``batchSize`` (its default: 1,000).
        max_skill_text_chars: longest text the embedding skill embeds (characters); a longer
            one is that record's error. 32,000 characters is about 8,000 tokens of English,
            the input limit of OpenAI's embedding models (8,191 tokens).
        max_skill_body_bytes: largest body of an embedding skill call; larger is HTTP 413
            (lower the skill's ``batchSize``).
        gc_freeze: after start-up, move the objects alive then (models, libraries: most of the
            heap) out of the garbage collector's reach and collect the young generation less
            often (see `citeflow.server.tune_gc`).
    """

    max_message_chars: int = 32_000
    max_body_bytes: int = 4_000_000
    max_upload_bytes: int = 50_000_000
    keepalive_seconds: float = 10.0
    source_list: bool = False
    annotations: Literal["auto", "on", "off"] = "auto"
    cancel_timeout: float = 2.0
    max_concurrent_chats: int = 128
    chats_per_minute: int = 0
    search_timeout: float = 10.0
    loop: Literal["auto", "uvloop", "asyncio"] = "auto"
    http: Literal["auto", "httptools", "h11"] = "auto"
    max_skill_records: int = 1_000
    max_skill_text_chars: int = 32_000
    max_skill_body_bytes: int = 32_000_000
    gc_freeze: bool = True

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> ServerOptions:
        """The options, taking any field that `Settings` defines, then ``overrides``."""
        values: dict[str, Any] = {}
        for field in fields(cls):
            if field.name in type(settings).model_fields:
                values[field.name] = getattr(settings, field.name)
        values.update(overrides)
        return cls(**values)
