"""Documents over HTTP: upload, list, delete, and the original file of a cited source.

The embedded Qdrant store admits one process, so while the server runs, documents go in through
it (``citeflow ingest`` would find the store locked):

| route | what |
| --- | --- |
| ``POST /v1/collections/{name}/documents`` | multipart upload of one or more ``file`` parts |
| ``GET /v1/collections/{name}/documents`` | the documents of a knowledge base |
| ``DELETE /v1/collections/{name}/documents/{doc_id}`` | remove a document (and its upload) |
| ``GET /v1/documents/{name}/{doc_id}/file`` | the document's original file (source links) |

The file route accepts, in place of the bearer key, the signature of a signed source link
(``?expires=...&sig=...``, `citeflow.api.links`), so that a browser can open it.

Uploaded files are kept in ``<data_dir>/uploads/<collection>/`` under their file name: they
are the documents' originals, and uploading a file of the same name again replaces it.

No response names a path of the server's file system: a document's ``file_path`` is its path
relative to the folder that holds the collection's ingested files (`shown_paths`): an upload's
file name, or e.g. ``guides/setup.md`` for ``citeflow ingest ~/handbook``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import Container, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse

from citeflow.api.deps import EngineDep, require_api_key, require_key_or_link
from citeflow.api.engine import Engine
from citeflow.api.errors import BadRequestError
from citeflow.api.schemas import DocumentInfo, DocumentList, error_responses
from citeflow.api.uploads import ReceivedFile, receive_files
from citeflow.errors import CiteflowError, CollectionNotFoundError
from citeflow.ingestion.pipeline import doc_id_for, file_hash
from citeflow.ingestion.readers import SUPPORTED_SUFFIXES
from citeflow.names import check_collection_name
from citeflow.store import DocumentRecord

ERRORS = error_responses(400, 401, 403, 404, 413, 422, 503)

router = APIRouter(
    prefix="/v1", tags=["documents"], dependencies=[Depends(require_api_key)], responses=ERRORS
)
#: The original files: the bearer key or a signed link.
files = APIRouter(
    prefix="/v1", tags=["documents"], dependencies=[Depends(require_key_or_link)], responses=ERRORS
)

#: Served documents may be HTML: no scripts on this origin, no sniffing, no signed URL leaked
#: through the Referer header, no shared caches.
FILE_HEADERS = {
    "Content-Security-Policy": "sandbox",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "private, max-age=300",
}


class UnprocessableError(CiteflowError):
    """Files that were received but could not be read (HTTP 422)."""

    kind = "invalid_request_error"
    status = 422


def shown_paths(records: Sequence[DocumentRecord], uploads: Path) -> dict[str, str]:
    """Each document's path as a client may see it, by document id: relative to ``uploads``
    for an uploaded file, else to the deepest folder holding all the other files (a single
    file: its name); "" for a document that has no file."""
    uploads = uploads.resolve()
    paths = {r.doc_id: Path(r.file_path) for r in records if r.file_path}
    ingested = [p for p in paths.values() if not p.is_relative_to(uploads)]
    root: Path | None = None
    # none, relative and absolute paths mixed, or several drives: no root
    with contextlib.suppress(ValueError):
        root = Path(os.path.commonpath([p.parent for p in ingested]))
    shown = {r.doc_id: "" for r in records}
    for doc_id, path in paths.items():
        if path.is_relative_to(uploads):
            shown[doc_id] = path.relative_to(uploads).as_posix()
        elif root is not None and path.is_relative_to(root):
            shown[doc_id] = path.relative_to(root).as_posix()
        else:
            shown[doc_id] = path.name
    return shown


def _info(record: DocumentRecord, shown: dict[str, str]) -> DocumentInfo:
    return DocumentInfo(
        doc_id=record.doc_id,
        file_name=record.file_name,
        file_path=shown.get(record.doc_id, ""),
        title=record.title,
        chunks=record.chunks,
        expected_chunks=record.expected_chunks,
        complete=record.complete,
        problem=None if record.complete else _problem(record),
    )


def _problem(record: DocumentRecord) -> str:
    """What the documents API says of a document whose write was cut short, and the fix."""
    return (
        f"incomplete: its ingestion was cut short ({record.stored} chunks stored, kept out of "
        "answers); upload the file again, or ingest it again"
    )


#: Longest file name kept (bytes of its UTF-8 form): most file systems' limit (NAME_MAX).
MAX_NAME_BYTES = 255


def _shown(name: str | None, limit: int = 80) -> str:
    text = repr(name)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def _safe_name(filename: str | None) -> str:
    """The name an uploaded file is kept under (its base name), else HTTP 400."""
    name = Path((filename or "").replace("\\", "/")).name.strip()
    if not name or name.startswith("."):
        raise BadRequestError(f"file name {_shown(filename)} is not usable", param="file")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise BadRequestError(
            f"file name {_shown(name)} has control characters; rename the file", param="file"
        )
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > MAX_NAME_BYTES:
        raise BadRequestError(
            f"file name {_shown(name)} is {size} bytes long (UTF-8), over the limit of "
            f"{MAX_NAME_BYTES}; rename the file to something shorter",
            param="file",
        )
    if Path(name).suffix.lower() not in SUPPORTED_SUFFIXES:
        supported = ", ".join(sorted(SUPPORTED_SUFFIXES))
        raise BadRequestError(
            f"{name}: unsupported file type (supported: {supported})", param="file"
        )
    return name


@dataclass(frozen=True)
class _Kept:
    """An uploaded file under its name, and the earlier upload of that name it replaces, set
    aside until the new file is ingested (a corrupt new file must not cost the old original)."""

    path: Path
    previous: Path | None


def _keep(received: Sequence[ReceivedFile], folder: Path) -> list[_Kept]:
    """Rename the ``.part`` files to their names, setting earlier uploads of the same names
    aside; if one fails, put everything back and delete the ``.part`` files."""
    kept: list[_Kept] = []
    try:
        for item in received:
            target = folder / item.name
            previous: Path | None = None
            if target.exists():
                fd, aside = tempfile.mkstemp(dir=folder, prefix=".previous-", suffix=".keep")
                os.close(fd)
                previous = Path(aside)
                os.replace(target, previous)
            kept.append(_Kept(target, previous))
            os.replace(item.temp, target)
    except BaseException:
        _settle(kept, keep=set())
        for item in received:
            item.temp.unlink(missing_ok=True)
        raise
    return kept


def _settle(kept: Sequence[_Kept], *, keep: Container[str]) -> None:
    """Keep the new files named in ``keep`` (their earlier uploads are deleted); put the
    earlier upload back in place of any other (or delete it, when it replaced none)."""
    for item in kept:
        if item.path.name in keep:
            if item.previous is not None:
                item.previous.unlink(missing_ok=True)
        elif item.previous is not None:
            os.replace(item.previous, item.path)
        else:
            item.path.unlink(missing_ok=True)


def _stored_whole(engine: Engine, collection: str, kept: Sequence[_Kept]) -> set[str]:
    """The names of the kept files whose content the store holds whole (after an ingestion
    that failed midway: those files were ingested before it failed)."""
    try:
        ids = {doc_id_for(item.path): item for item in kept}
        stored = engine.store.content_hashes(collection, list(ids))
        version = engine.knowledge_base(collection).ingestor(progress=False).version
        return {
            item.path.name
            for doc_id, item in ids.items()
            if stored.get(doc_id) == version(file_hash(item.path))
        }
    except Exception:  # the store or the disk fails too: put every earlier upload back
        return set()


#: The upload's body in the OpenAPI schema (the route reads it as a stream, not as a form).
UPLOAD_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "file": {
                            "type": "array",
                            "items": {"type": "string", "format": "binary"},
                            "description": "One part per file, each with its file name.",
                        }
                    },
                    "required": ["file"],
                }
            }
        },
    }
}


@router.post("/collections/{name}/documents", openapi_extra=UPLOAD_BODY)
async def upload_documents(name: str, request: Request, engine: EngineDep) -> dict[str, Any]:
    """Add or replace documents (multipart ``file`` parts); unchanged files are skipped.

    The files are streamed to disk as they arrive: a body over the limit is refused by its
    ``Content-Length`` before it is read, or as soon as it passes the limit (HTTP 413), and
    nothing of a refused upload is kept. A file that cannot be read (HTTP 422 when no file
    can) is not kept, and an earlier upload of its name stays in place.
    """
    collection = check_collection_name(name)
    folder = engine.upload_dir(collection)
    received = await receive_files(
        request,
        folder,
        max_file_bytes=engine.settings.server.max_upload_bytes,
        check_name=_safe_name,
    )
    kept = await asyncio.to_thread(_keep, received, folder)
    names = [item.name for item in received]
    try:
        report = await engine.ingest_files(collection, [item.path for item in kept])
    except BaseException:
        with anyio.CancelScope(shield=True):
            whole = await asyncio.to_thread(_stored_whole, engine, collection, kept)
            await asyncio.to_thread(_settle, kept, keep=whole)
        raise
    counts = {
        "added": report.documents_added,
        "replaced": report.replaced,
        "unchanged": report.unchanged,
    }
    request.app.state.metrics.ingested({**counts, "failed": len(report.failed)}, report.chunks)
    failed = {Path(path).name for path, _ in report.failed}
    await asyncio.to_thread(_settle, kept, keep=set(names) - failed)
    if report.failed and len(report.failed) == len(kept):
        raise UnprocessableError("; ".join(reason for _, reason in report.failed))
    here = folder.resolve()
    uploaded = [r for r in await engine.documents(collection) if r.file_path]
    records = {Path(r.file_path).name: r for r in uploaded if Path(r.file_path).parent == here}
    shown = shown_paths(list(records.values()), folder)
    return {
        "object": "list",
        "collection": collection,
        "data": [_info(records[n], shown).model_dump() for n in names if n in records],
        **counts,
        "chunks": report.chunks,
        "failed": [{"file": Path(p).name, "reason": r} for p, r in report.failed],
    }


@router.get("/collections/{name}/documents")
async def list_documents(name: str, engine: EngineDep) -> DocumentList:
    """The documents of a knowledge base; 404 if there is none of that name."""
    collection = check_collection_name(name)
    records = await engine.documents(collection)
    shown = shown_paths(records, engine.upload_dir(collection))
    return DocumentList(collection=name, data=[_info(r, shown) for r in records])


@router.delete("/collections/{name}/documents/{doc_id}")
async def delete_document(name: str, doc_id: str, engine: EngineDep) -> dict[str, Any]:
    """Remove a document's chunks (and its file, if it was uploaded here)."""
    record = await engine.delete_document(check_collection_name(name), doc_id)
    return {"id": record.doc_id, "object": "document", "deleted": True}


@files.get(
    "/documents/{name}/{doc_id}/file",
    response_class=FileResponse,
    responses={200: {"content": {"application/octet-stream": {}}}},
)
async def document_file(name: str, doc_id: str, engine: EngineDep) -> FileResponse:
    """The original file of a document, when the server can read it.

    Auth: the bearer key, or the ``expires`` and ``sig`` of a signed source link.
    """
    record = await engine.document(check_collection_name(name), doc_id)
    path = Path(record.file_path) if record.file_path else None
    if path is None or not await asyncio.to_thread(path.is_file):
        raise CollectionNotFoundError(f"the file of document {doc_id!r} is not available")
    return FileResponse(
        path,
        filename=record.file_name or path.name,
        content_disposition_type="inline",
        headers=FILE_HEADERS,
    )
