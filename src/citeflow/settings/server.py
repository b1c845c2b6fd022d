"""The settings of `citeflow serve`: address, API keys, request limits, links, CORS, uvicorn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from citeflow.settings.group import SettingsGroup, UserPath

DocsKind = Literal["auto", "on", "off"]


class ServerSettings(SettingsGroup):
    """The HTTP server: where it listens, who may call it, its limits and defaults."""

    host: str = Field(default="127.0.0.1", description="`citeflow serve` address.")
    port: int = Field(default=8000, ge=1, le=65535, description="`citeflow serve` port.")
    # NoDecode: a plain key or a comma-separated list is not JSON (`parse_api_keys`)
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        description='Bearer keys: one key, several separated by commas, or a JSON list ["k1", '
        '"k2"]; unset or []: no auth (`citeflow serve` then refuses a non-loopback host).',
    )
    api_keys_file: UserPath | None = Field(
        default=None,
        description="File of bearer keys, one per line (blank lines and # comments ignored), "
        "e.g. a Docker or Kubernetes secret; its keys are added to CITEFLOW_API_KEYS.",
    )
    auth_max_failures: int = Field(
        default=10,
        ge=0,
        description="Wrong API keys one client address may send per CITEFLOW_AUTH_FAILURE_WINDOW;"
        " more get 429 (a right key always passes). 0: off.",
    )
    auth_failure_window: int = Field(
        default=60, ge=1, description="Seconds over which wrong API keys are counted."
    )
    api_docs: DocsKind = Field(
        default="auto",
        description="/docs, /redoc and /openapi.json: auto (on only when bound to loopback) | on "
        "| off; with API keys they need the key too.",
    )
    openwebui_jwt_secret: SecretStr | None = Field(
        default=None,
        description="Open WebUI's FORWARD_USER_INFO_HEADER_JWT_SECRET: forwarded users are then "
        "believed only from its signed X-OpenWebUI-User-Jwt (empty: from the plain "
        "X-OpenWebUI-User-* headers).",
    )
    annotations: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="Cited sources as OpenAI url_citation annotations too: auto (requests from "
        "a browser, e.g. an Open WebUI Direct Connection) | on | off.",
    )
    source_list: bool = Field(
        default=False,
        description="Append a Markdown list of the cited sources to answers, for clients that "
        "ignore Open WebUI's source events (Open WebUI would show them twice); a request can "
        'ask for it: "citeflow": {"source_list": true} or X-Citeflow-Source-List: true.',
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Web origins allowed to call the API from a browser (CORS), comma-separated "
        "(https://chat.example.com): Open WebUI Direct Connections need theirs.",
    )
    metrics: bool = Field(
        default=True,
        description="Serve Prometheus metrics at GET /metrics (with API keys, behind the key).",
    )
    public_url: str = Field(
        default="",
        description="Server URL as browsers see it, for source links "
        "(https://citeflow.example.com); empty: the URL a request came in on.",
    )
    link_secret: SecretStr | None = Field(
        default=None,
        description="Key that signs source links (HMAC-SHA256); empty: derived from the API keys.",
    )
    link_ttl: int = Field(
        default=604_800, ge=0, description="Seconds a signed source link stays valid; 0: forever."
    )
    max_concurrent_chats: int = Field(
        default=128, ge=0, description="Chat completions in progress at once; more get 429. 0: off."
    )
    chats_per_minute: int = Field(
        default=0,
        ge=0,
        description="Chat completions per minute per API key (or per client address without "
        "keys); more get 429. 0: off.",
    )
    search_timeout: float = Field(
        default=10.0,
        gt=0,
        le=600,
        description="POST /search: seconds one search may take; past them it answers with what "
        "it has (the first search always runs; the rewrite, LLM grading and retry rounds are "
        "cut short).",
    )
    max_message_chars: int = Field(
        default=32_000, ge=1, description="Longest accepted message (characters); longer: 413."
    )
    max_body_bytes: int = Field(
        default=4_000_000, ge=1, description="Largest accepted request body; larger: 413."
    )
    max_upload_bytes: int = Field(
        default=50_000_000,
        ge=1,
        description="Largest uploaded document, and of all the files of one upload together "
        "(plus 64 KiB of multipart framing); larger: 413, by Content-Length before the body is "
        "read, else as soon as it passes the limit.",
    )
    keepalive_seconds: float = Field(
        default=10.0,
        gt=0,
        description="Streams: an SSE comment is sent after this many silent seconds.",
    )
    cancel_timeout: float = Field(
        default=2.0, gt=0, description="Seconds a cancelled query may take to wind down."
    )
    max_skill_records: int = Field(
        default=1_000,
        ge=1,
        description="POST /v1/skills/embeddings: most records per call (Azure AI Search sends up "
        "to the skill's batchSize, by default 1000); more: 413.",
    )
    # about 8,000 tokens of English: the input limit of OpenAI's embedding models (8,191 tokens)
    max_skill_text_chars: int = Field(
        default=32_000,
        ge=1,
        description="Embedding skill: longest text embedded (characters); a longer one is that "
        "record's error.",
    )
    max_skill_body_bytes: int = Field(
        default=32_000_000,
        ge=1,
        description="Embedding skill: largest body of one call; larger: 413 (lower the skill's "
        "batchSize).",
    )
    uvicorn_loop: Literal["auto", "uvloop", "asyncio"] = Field(
        default="auto", description="Event loop: auto (uvloop when installed) | uvloop | asyncio."
    )
    uvicorn_http: Literal["auto", "httptools", "h11"] = Field(
        default="auto",
        description="HTTP/1.1 parser: auto (httptools when installed) | httptools | h11.",
    )
    step_cache: bool = Field(
        default=False,
        description="Build each workflow's steps once instead of on every step (citeflow.speedups: "
        "reads a private attribute of llama-index-workflows; ~0.8 ms less CPU per answer).",
    )
    gc_freeze: bool = Field(
        default=True,
        description="After start-up, move the objects alive then (models, libraries) out of the "
        "garbage collector's reach and collect the young generation less often.",
    )

    @field_validator("api_keys", mode="before")
    @classmethod
    def _parse_api_keys(cls, value: object) -> object:
        return parse_api_keys(value) if isinstance(value, str) else value

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _parse_origins(cls, value: object) -> object:
        if isinstance(value, str):
            return [o.strip().rstrip("/") for o in value.split(",") if o.strip()]
        return value

    @field_validator("api_keys")
    @classmethod
    def _no_empty_key(cls, value: list[SecretStr]) -> list[SecretStr]:
        if any(not key.get_secret_value().strip() for key in value):
            raise ValueError("holds an empty key; every key needs at least one character")
        return value

    @model_validator(mode="after")
    def _key_file(self) -> Self:
        if self.api_keys_file is not None:
            known = {key.get_secret_value() for key in self.api_keys}
            extra = [k for k in read_api_keys_file(self.api_keys_file) if k not in known]
            self.api_keys = [*self.api_keys, *(SecretStr(k) for k in extra)]
        return self


def parse_api_keys(text: str) -> list[str]:
    """``CITEFLOW_API_KEYS``: one key, keys separated by commas, or a JSON list of strings.

    Raises:
        ValueError: the value is empty, holds an empty key, or is a malformed JSON list.
    """
    text = text.strip()
    if not text:
        raise ValueError(
            "is set but empty: give a key, several separated by commas, or a JSON list; "
            "unset it to serve without keys"
        )
    if text.startswith("["):
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ValueError(
                f"starts with '[' but is not a JSON list ({exc.args[0]}); write "
                '["k1", "k2"] or k1,k2'
            ) from None
        if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
            raise ValueError('a JSON value must be a list of strings: ["k1", "k2"]')
        keys = [k.strip() for k in value]
    else:
        keys = [k.strip() for k in text.split(",")]
    if not all(keys):
        raise ValueError("holds an empty key (a stray comma?); every key needs a character")
    return keys


def read_api_keys_file(path: Path) -> list[str]:
    """The keys of a key file: one per line; blank lines and lines starting with # ignored.

    Raises:
        ValueError: the file cannot be read, is not UTF-8 text, or holds no key.
    """
    where = "CITEFLOW_API_KEYS_FILE"
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError(f"{where}: {path} is not UTF-8 text; put one key per line") from None
    except OSError as exc:
        raise ValueError(f"{where}: cannot read {path} ({exc.strerror or exc})") from None
    keys = [line.strip() for line in text.splitlines()]
    keys = [k for k in keys if k and not k.startswith("#")]
    if not keys:
        raise ValueError(
            f"{where}: {path} holds no key; put one key per line (blank lines and # comments "
            "are ignored)"
        )
    return keys
