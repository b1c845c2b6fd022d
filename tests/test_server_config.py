"""`citeflow serve`'s process setup: uvicorn's loop and HTTP implementation, the gc tuning."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from citeflow import server
from citeflow.api import exposure
from citeflow.errors import ConfigError
from citeflow.knowledge_base import KnowledgeBase
from citeflow.settings import ServerSettings
from tests.server_helpers import make_engine


def test_auto_picks_the_c_implementations_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "installed", lambda module: True)
    assert server.loop_and_http(ServerSettings.defaults()) == ("uvloop", "httptools")


def test_auto_falls_back_to_the_pure_python_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "installed", lambda module: False)
    assert server.loop_and_http(ServerSettings.defaults()) == ("asyncio", "h11")


def test_explicit_choices_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "installed", lambda module: True)
    options = ServerSettings.defaults(uvicorn_loop="asyncio", uvicorn_http="h11")
    assert server.loop_and_http(options) == ("asyncio", "h11")


def test_asking_for_a_missing_implementation_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(server, "installed", lambda module: module != "httptools")
    with pytest.raises(ConfigError, match="httptools"):
        server.loop_and_http(ServerSettings.defaults(uvicorn_http="httptools"))


def test_uvicorn_config_carries_the_choices_and_the_address() -> None:
    host, port, loop, http = "127.0.0.1", 8123, "asyncio", "h11"
    options = ServerSettings.defaults(host=host, port=port, uvicorn_loop=loop, uvicorn_http=http)
    config = server.uvicorn_config(object(), options)
    assert (config.host, config.port, config.loop, config.http) == (host, port, loop, http)


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop is not installed on Windows")
def test_the_installed_dependencies_give_the_fast_path() -> None:
    assert server.loop_and_http(ServerSettings.defaults()) == ("uvloop", "httptools")


def test_tune_gc_freezes_the_heap_and_raises_the_young_threshold() -> None:
    thresholds = gc.get_threshold()
    try:
        server.tune_gc()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == server.GC_THRESHOLDS
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_the_app_closes_the_llm_http_client_when_it_shuts_down(kb: KnowledgeBase) -> None:
    from types import SimpleNamespace

    from fastapi.testclient import TestClient

    client = httpx.AsyncClient()
    llm: Any = SimpleNamespace(aclose=client.aclose)  # as LeanStreamingMixin.aclose
    with TestClient(server.create_app(make_engine(kb, llm))):
        assert not client.is_closed
    assert client.is_closed


def test_no_route_depends_on_a_plain_def() -> None:
    """FastAPI runs a plain ``def`` dependency (or endpoint) in its thread pool: a worker thread
    round trip per request. Every route's are ``async def``."""
    import inspect

    from fastapi.dependencies.models import Dependant
    from fastapi.routing import APIRoute

    from citeflow.api import docs, documents, routes

    def is_async(call: Any) -> bool:  # a function, or an object such as HTTPBearer
        method = vars(type(call)).get("__call__")
        return inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(method)

    def calls(dependant: Dependant) -> Iterator[Any]:
        for sub in dependant.dependencies:
            yield sub.call
            yield from calls(sub)

    every = [
        route
        for router in (routes.health, routes.api, documents.router, documents.files, docs.router)
        for route in router.routes
        if isinstance(route, APIRoute)
    ]
    assert any(r.path.endswith("/chat/completions") for r in every)
    sync = sorted(
        {
            f"{route.path}: {getattr(call, '__name__', call)}"
            for route in every
            for call in [route.endpoint, *calls(route.dependant)]
            if call is not None and not is_async(call)
        }
    )
    assert sync == []


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.1.1", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.20", False),
        ("citeflow.example.com", False),
        ("", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert exposure.is_loopback(host) is loopback


def _settings(**values: Any) -> ServerSettings:
    return ServerSettings.defaults(**values)


def test_no_keys_on_a_network_address_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as info:
        exposure.check_bind(_settings(host="0.0.0.0"))
    message = str(info.value)
    assert "0.0.0.0:8000" in message and "CITEFLOW_API_KEYS" in message
    assert "--insecure-no-auth" in message and "\n" not in message


def test_insecure_no_auth_serves_with_a_loud_warning() -> None:
    warning = exposure.check_bind(_settings(host="0.0.0.0"), insecure_no_auth=True)
    assert warning is not None and warning.startswith("AUTH IS OFF on 0.0.0.0:8000")
    assert "\n" not in warning


def test_keys_or_loopback_need_no_flag_and_say_nothing() -> None:
    assert exposure.check_bind(_settings(host="0.0.0.0", api_keys=[SecretStr("k")])) is None
    assert exposure.check_bind(_settings(host="127.0.0.1")) is None
    assert exposure.check_bind(_settings(host="localhost"), insecure_no_auth=True) is None
