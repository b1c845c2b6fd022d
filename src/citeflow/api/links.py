"""Signed source links: document URLs a browser can open without the bearer key.

A source's ``url`` points at citeflow's ``GET /v1/documents/{name}/{doc_id}/file``. When the
server has API keys, a browser clicking that link (in Open WebUI's citation popup) cannot send an
``Authorization`` header, so the link carries its own proof instead::

    /v1/documents/essays/ab12/file?expires=1767225600&sig=Qm9v...

``sig`` is the HMAC-SHA256 of the collection, the document id and ``expires`` (itsdangerous'
`Signer`: URL-safe base64, the key used as it is) under the server's link key
(``CITEFLOW_LINK_SECRET``, else a key derived from the API keys, so that links survive restarts
and die with the keys); ``expires`` is a Unix time (``CITEFLOW_LINK_TTL`` after the answer;
``0``: the link never expires, only when the TTL is 0). A link opens one document's
file, nothing else. Without API keys, links are plain URLs: the endpoint is open anyway.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable
from urllib.parse import quote, urlencode

from itsdangerous import Signer

from citeflow.api.errors import AuthenticationError, PermissionDeniedError
from citeflow.settings import ServerSettings

_DERIVE = b"citeflow source links v1"


def document_path(collection: str, doc_id: str) -> str:
    """The path of a document's original file."""
    return f"/v1/documents/{quote(collection, safe='')}/{quote(doc_id, safe='')}/file"


class DocumentLinks:
    """Makes and checks signed document URLs.

    Args:
        key: the HMAC key; None: links are not signed (the server has no API keys).
        ttl: seconds a link stays valid; 0: forever.
        public_url: the server's external base URL; empty: the request's own.
        clock: the current Unix time (tests).
    """

    def __init__(
        self,
        key: bytes | None,
        *,
        ttl: int = 604_800,
        public_url: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.key = key
        self._signer = (
            None
            if key is None
            else Signer(key, key_derivation="none", digest_method=hashlib.sha256)
        )
        self.ttl = ttl
        self.public_url = public_url.rstrip("/")
        self.clock = clock

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> DocumentLinks:
        """Signed links when the server has API keys, with the configured or a derived key."""
        key: bytes | None = None
        if settings.link_secret is not None and settings.link_secret.get_secret_value():
            key = settings.link_secret.get_secret_value().encode()
        elif settings.api_keys:
            keys = sorted(k.get_secret_value() for k in settings.api_keys)
            key = hmac.new(_DERIVE, "\n".join(keys).encode(), hashlib.sha256).digest()
        if not settings.api_keys:
            key = None  # the document endpoint is open: nothing to sign
        return cls(key, ttl=settings.link_ttl, public_url=settings.public_url)

    def url(self, base_url: str, collection: str, doc_id: str) -> str:
        """The (signed) URL of a document's file; ``base_url`` unless `public_url` is set."""
        url = (self.public_url or base_url.rstrip("/")) + document_path(collection, doc_id)
        if self._signer is None:
            return url
        expires = int(self.clock()) + self.ttl if self.ttl else 0
        sig = self._signer.get_signature(_message(collection, doc_id, expires)).decode()
        return f"{url}?{urlencode({'expires': expires, 'sig': sig})}"

    def check(self, collection: str, doc_id: str, expires: str | None, sig: str | None) -> None:
        """Accept a link's ``expires`` and ``sig`` for this document, or raise.

        Raises:
            AuthenticationError: links are not signed here, or the link has no signature (401).
            PermissionDeniedError: the signature is wrong or the link has expired (403).
        """
        if self._signer is None or not sig or expires is None:
            raise AuthenticationError(
                "no API key: send 'Authorization: Bearer <key>', or open the signed link from an "
                "answer's sources"
            )
        when = int(expires) if expires.isdigit() and len(expires) <= 12 else None
        if when is None or not self._signer.verify_signature(
            _message(collection, doc_id, when), sig
        ):
            raise PermissionDeniedError("invalid document link", code="invalid_signature")
        if (when == 0 and self.ttl) or (when and when < self.clock()):
            raise PermissionDeniedError(
                "this document link has expired; ask again for a fresh one", code="link_expired"
            )


def _message(collection: str, doc_id: str, expires: int) -> str:
    """What a link's signature covers: the one document, and until when."""
    return f"{collection}\n{doc_id}\n{expires}"
