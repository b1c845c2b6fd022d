"""What the server may expose, by the address it listens on and whether it has API keys.

Without ``CITEFLOW_API_KEYS`` anyone who reaches the server can ask, upload and delete
documents. That is fine on a loopback address (only this machine), not on ``0.0.0.0`` or a
network interface: `check_bind` refuses such an address without keys, unless the operator says
``--insecure-no-auth``, and then it is said loudly at start.

The API's documentation (``/docs``, ``/redoc``, ``/openapi.json``) describes every route: with
``CITEFLOW_API_DOCS=auto`` it is served on a loopback address only (`docs_enabled`).
"""

from __future__ import annotations

import ipaddress

from citeflow.errors import ConfigError
from citeflow.settings import ServerSettings


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only (``127.0.0.0/8``, ``::1``,
    ``localhost``); a host name other than ``localhost`` counts as reachable from the network."""
    host = host.strip().strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(settings: ServerSettings, *, insecure_no_auth: bool = False) -> str | None:
    """Refuse to serve without keys on an address others can reach; the warning to log when
    the operator insists (``insecure_no_auth``), else None.

    Raises:
        ConfigError: no API keys, a non-loopback host, and no ``insecure_no_auth``.
    """
    if settings.api_keys or is_loopback(settings.host):
        return None
    where = f"{settings.host}:{settings.port}"
    if not insecure_no_auth:
        raise ConfigError(
            f"refusing to serve on {where} without API keys: anyone who can reach it could "
            "read, upload and delete documents; set CITEFLOW_API_KEYS or CITEFLOW_API_KEYS_FILE, "
            "listen on 127.0.0.1, or pass --insecure-no-auth"
        )
    return (
        f"AUTH IS OFF on {where} (--insecure-no-auth): anyone who can reach it can read, "
        "upload and delete documents; set CITEFLOW_API_KEYS or CITEFLOW_API_KEYS_FILE"
    )


def docs_enabled(settings: ServerSettings) -> bool:
    """Whether to serve the API docs: ``CITEFLOW_API_DOCS`` on, off, or auto (loopback only)."""
    if settings.api_docs == "auto":
        return is_loopback(settings.host)
    return settings.api_docs == "on"
