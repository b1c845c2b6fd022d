"""The API's documentation: the OpenAPI schema and its ``/docs`` and ``/redoc`` pages.

They describe every route, so they are served only when `citeflow.api.exposure.docs_enabled`
says so (``CITEFLOW_API_DOCS``: auto, on a loopback address only; on; off), and with API keys
they need the key like the rest of the API. A browser sends no ``Authorization`` header, so with
keys the pages open only through a client that sends it; the schema itself is one request away::

    curl -H "Authorization: Bearer $KEY" http://HOST:8000/openapi.json

The schema declares the bearer scheme (`citeflow.api.deps.bearer_scheme`) and the request body
of routes that read their body themselves (chat completions: limits are checked before the body
is read, and its errors are citeflow's own): such a route says ``openapi_extra=json_body(Model)``
and `install` adds ``Model``'s schema to the document's components.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel

from citeflow.api.deps import require_api_key

OPENAPI_PATH = "/openapi.json"
_REF = "#/components/schemas/{model}"

#: request body models declared with `json_body`, by schema name
_BODIES: dict[str, type[BaseModel]] = {}

router = APIRouter(include_in_schema=False, dependencies=[Depends(require_api_key)])


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """A route's ``openapi_extra`` declaring a JSON request body of ``model`` (documentation
    only: the route still reads and validates the body itself)."""
    _BODIES[model.__name__] = model
    ref = {"$ref": _REF.format(model=model.__name__)}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def install(app: FastAPI) -> None:
    """Make ``app.openapi()`` include the request bodies declared with `json_body`."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for name, model in _BODIES.items():
                body = model.model_json_schema(ref_template=_REF)
                for nested, definition in body.pop("$defs", {}).items():
                    components.setdefault(nested, definition)
                components[name] = body
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _schema_url(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/") + OPENAPI_PATH


@router.get(OPENAPI_PATH)
async def openapi_document(request: Request) -> JSONResponse:
    """The OpenAPI schema."""
    app: FastAPI = request.app
    return JSONResponse(app.openapi())


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    """Swagger UI over the schema."""
    return get_swagger_ui_html(openapi_url=_schema_url(request), title="citeflow - Swagger UI")


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    """ReDoc over the schema."""
    return get_redoc_html(openapi_url=_schema_url(request), title="citeflow - ReDoc")
