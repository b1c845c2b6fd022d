"""An httpx transport that sends requests with aiohttp: the OpenAI SDK's client, aiohttp's wire.

The OpenAI SDK talks to its ``httpx.AsyncClient``; httpx's own transport (httpcore + h11, pure
Python) parses every chunk of a streamed answer in Python, and a streamed chat completion is
tens of chunks. aiohttp's HTTP parser is C, so reading and parsing the same stream costs the
client much less CPU. `AiohttpTransport` plugs aiohttp under the unchanged httpx and
SDK layers (auth, headers, retries, error mapping, `LeanStreamingMixin`), so only the socket
work changes hands::

    httpx.AsyncClient(transport=AiohttpTransport(), timeout=..., limits=...)

httpx's timeouts (``connect``, ``read``, ``pool``) carry over; aiohttp's errors become the httpx
errors the SDK maps (`httpx.TimeoutException` → ``APITimeoutError``, other transport errors →
``APIConnectionError``). The aiohttp session is made lazily, in the event loop of the first
request, and again if a later request runs in another loop (e.g. ``asyncio.run`` per question).
Requests through proxies set in the environment keep httpx's own proxy transport.

Why not the SDK's ``openai.DefaultAioHttpClient`` (openai 2.54, httpx-aiohttp 0.2.0): it is as
fast, but it reports a refused connection or a DNS failure as ``APITimeoutError`` (its error map
takes aiohttp's ``ClientConnectorError`` for a ``ConnectTimeout``; acknowledged in
openai/openai-python#3594), so a wrong ``CITEFLOW_OPENAI_BASE_URL`` would read "timed out"
instead of "cannot reach"; and it keeps its first event loop's session.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
import httpx
import openai

__all__ = ["AiohttpTransport", "aiohttp_client"]


@contextmanager
def _mapped_errors(request: httpx.Request, *, connecting: bool) -> Iterator[None]:
    """aiohttp's exceptions as the httpx exceptions that httpx's own transport raises."""
    try:
        yield
    except TimeoutError as exc:  # aiohttp's timeouts subclass it
        kind: type[httpx.TransportError] = httpx.ConnectTimeout if connecting else httpx.ReadTimeout
        raise kind(str(exc) or "timed out", request=request) from exc
    except aiohttp.ClientConnectorError as exc:
        raise httpx.ConnectError(str(exc), request=request) from exc
    except aiohttp.ServerDisconnectedError as exc:
        raise httpx.RemoteProtocolError(str(exc) or "server disconnected", request=request) from exc
    except aiohttp.ClientPayloadError as exc:
        raise httpx.ReadError(str(exc), request=request) from exc
    except aiohttp.InvalidURL as exc:
        raise httpx.UnsupportedProtocol(str(exc), request=request) from exc
    except aiohttp.ClientError as exc:
        raise httpx.NetworkError(str(exc) or type(exc).__name__, request=request) from exc


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _mapped_errors(self._request, connecting=False):
            async for chunk in self._response.content.iter_any():
                yield chunk

    async def aclose(self) -> None:
        self._response.release()


class AiohttpTransport(httpx.AsyncBaseTransport):
    """Sends httpx requests through one aiohttp session (per event loop), with the OpenAI SDK's
    connection limits (``max_connections`` and ``keepalive_expiry`` apply) and TLS verified."""

    def __init__(self) -> None:
        self._ssl = httpx.create_ssl_context()
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _current_session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=openai.DEFAULT_CONNECTION_LIMITS.max_connections or 0,
                keepalive_timeout=openai.DEFAULT_CONNECTION_LIMITS.keepalive_expiry or 15.0,
                ssl=self._ssl,
            )
            self._session = aiohttp.ClientSession(
                connector=connector, auto_decompress=False, trust_env=False
            )
            self._loop = loop
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = self._current_session()
        timeout: dict[str, Any] = request.extensions.get("timeout", {})
        body = await request.aread()
        with _mapped_errors(request, connecting=True):
            response = await session.request(
                request.method,
                str(request.url),
                headers=request.headers.multi_items(),
                data=body or None,
                allow_redirects=False,
                compress=None,
                timeout=aiohttp.ClientTimeout(
                    total=None,
                    connect=timeout.get("pool"),
                    sock_connect=timeout.get("connect"),
                    sock_read=timeout.get("read"),
                ),
                server_hostname=request.extensions.get("sni_hostname"),
            )
        return httpx.Response(
            status_code=response.status,
            headers=response.raw_headers,
            stream=_ResponseStream(response, request),
            request=request,
            extensions={
                "http_version": b"HTTP/1.1",
                "reason_phrase": (response.reason or "").encode(),
            },
        )

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None


def aiohttp_client(timeout: float) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` over `AiohttpTransport`, for the OpenAI SDK's ``http_client``.

    Redirects are followed as the SDK's own client does.
    """
    return httpx.AsyncClient(
        transport=AiohttpTransport(),
        timeout=httpx.Timeout(timeout, connect=5.0),
        limits=openai.DEFAULT_CONNECTION_LIMITS,
        follow_redirects=True,
    )
