"""The API's documentation: the OpenAPI schema and its ``/docs`` and ``/redoc`` pages.

They describe every route, so they are served only when `citeflow.api.exposure.docs_enabled`
says so (``CITEFLOW_API_DOCS``: auto, on a loopback address only; on; off), and with API keys
they need the key like the rest of the API. A browser sends no ``Authorization`` header, so with
keys the pages open only through a client that sends it; the schema itself is one request away::

    curl -H "Authorization: Bearer $KEY" http://HOST:8000/openapi.json
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from citeflow.api.deps import require_api_key

OPENAPI_PATH = "/openapi.json"

router = APIRouter(include_in_schema=False, dependencies=[Depends(require_api_key)])


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
