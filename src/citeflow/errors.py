"""citeflow's errors: one shallow hierarchy.

Every error a user can cause or fix is a `CiteflowError` whose message is one line saying what is
wrong and what to do. The CLI prints that line; the server maps the class to an HTTP status and an
OpenAI-style error body in one place (`citeflow.api.errors`).
"""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its class name when empty): what a one-line
    error or log message quotes of an underlying failure."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class CiteflowError(Exception):
    """Base class: a clear, one-line, user-facing problem."""

    #: OpenAI-style error ``type`` and HTTP status used by the server.
    kind: str = "server_error"
    status: int = 500
    #: the error body's ``param`` (the request field at fault) and ``code``, when it has them
    param: str | None = None
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if param is not None:
            self.param = param
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return self.message


class ConfigError(CiteflowError):
    """A setting is missing or invalid."""


class InvalidRequestError(CiteflowError):
    """The request itself is wrong (empty question, bad parameter)."""

    kind = "invalid_request_error"
    status = 400


class EmptyQueryError(InvalidRequestError):
    """The question is empty."""


class InvalidCollectionNameError(InvalidRequestError):
    """A collection name breaks the rule of `citeflow.names` (HTTP 400)."""

    param = "name"
    code = "invalid_collection_name"


class CollectionNotFoundError(CiteflowError):
    """No knowledge base of that name exists."""

    kind = "not_found_error"
    status = 404


class EmptyCollectionError(CiteflowError):
    """The knowledge base exists but holds no documents."""

    kind = "invalid_request_error"
    status = 400


class StoreLockedError(CiteflowError):
    """The embedded Qdrant store is opened by another process (usually `citeflow serve`)."""

    status = 503


class StoreUnreadableError(CiteflowError):
    """The embedded store's files cannot be opened: written by another version, or damaged.

    Nothing is changed or deleted: the message names the directory and what to do.
    """

    status = 503


class StorageFullError(CiteflowError):
    """The disk holding the store or the uploads is full (HTTP 507).

    ``message`` names the place and what to do (for the CLI and the server log); ``public`` is
    what the server tells its clients, which names no path of the server.
    """

    status = 507
    code = "insufficient_storage"

    def __init__(self, message: str, *, public: str | None = None) -> None:
        super().__init__(message)
        self.public = public or (
            "the server's disk is full: the request could not be completed, and nothing "
            "stored before was lost; retry once the server's operator has freed space"
        )


class ModelError(CiteflowError):
    """A model is missing, fails its checksum, or cannot be loaded."""

    status = 503


class UpstreamError(CiteflowError):
    """An LLM or embedding provider failed or timed out.

    ``message`` holds the provider's own words (for the CLI and the server log); ``public`` is
    what the server tells its clients, which names no key, account or internal detail.
    """

    kind = "upstream_error"
    status = 502

    def __init__(self, message: str, *, public: str | None = None) -> None:
        super().__init__(message)
        self.public = public or (
            "the model provider failed; retry later, or ask the server's operator to check "
            "the server log"
        )


class UpstreamRateLimitError(UpstreamError):
    """A provider answered HTTP 429: passed on as 429 with ``retry_after`` (seconds)."""

    kind = "rate_limit_error"
    status = 429
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after: float, public: str | None = None) -> None:
        super().__init__(message, public=public)
        self.retry_after = retry_after


class IngestError(CiteflowError):
    """A file cannot be read or parsed (reported and skipped by ingestion)."""

    kind = "invalid_request_error"
    status = 400
