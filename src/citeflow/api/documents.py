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
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Annotated, Any, BinaryIO

from fastapi import APIRouter, Depends, File, UploadFile
from fastapi.responses import FileResponse

from citeflow.api.deps import EngineDep, require_api_key, require_key_or_link
from citeflow.api.errors import BadRequestError, PayloadTooLargeError
from citeflow.api.schemas import DocumentInfo, DocumentList, ErrorResponse
from citeflow.errors import CiteflowError, CollectionNotFoundError
from citeflow.ingestion.readers import SUPPORTED_SUFFIXES
from citeflow.names import check_collection_name
from citeflow.store import DocumentRecord

ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse} for status in (400, 401, 403, 404, 413, 422, 503)
}

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


def _info(record: DocumentRecord) -> DocumentInfo:
    return DocumentInfo(
        doc_id=record.doc_id,
        file_name=record.file_name,
        file_path=record.file_path,
        title=record.title,
        chunks=record.chunks,
        complete=record.complete,
    )


def _safe_name(filename: str | None) -> str:
    name = Path((filename or "").replace("\\", "/")).name.strip()
    if not name or name.startswith("."):
        raise BadRequestError(f"file name {filename!r} is not usable", param="file")
    if Path(name).suffix.lower() not in SUPPORTED_SUFFIXES:
        supported = ", ".join(sorted(SUPPORTED_SUFFIXES))
        raise BadRequestError(
            f"{name}: unsupported file type (supported: {supported})", param="file"
        )
    return name


def _save(source: BinaryIO, target: Path, limit: int) -> None:
    """Copy an upload to ``target`` (atomically), at most ``limit`` bytes."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False, suffix=".part") as out:
        temp = Path(out.name)
        try:
            size = 0
            while block := source.read(1 << 20):
                size += len(block)
                if size > limit:
                    raise PayloadTooLargeError(
                        f"{target.name} is over the upload limit of {limit} bytes", param="file"
                    )
                out.write(block)
        except BaseException:
            out.close()
            temp.unlink(missing_ok=True)
            raise
    shutil.move(temp, target)


@router.post("/collections/{name}/documents")
async def upload_documents(
    name: str, engine: EngineDep, file: Annotated[list[UploadFile], File()]
) -> dict[str, Any]:
    """Add or replace documents (multipart ``file`` parts); unchanged files are skipped."""
    collection = check_collection_name(name)
    names = [_safe_name(upload.filename) for upload in file]
    if len(set(names)) != len(names):
        raise BadRequestError("the same file name is uploaded twice", param="file")
    folder = engine.upload_dir(collection)
    paths: list[Path] = []
    for upload, filename in zip(file, names, strict=True):
        target = folder / filename
        await asyncio.to_thread(_save, upload.file, target, engine.options.max_upload_bytes)
        paths.append(target)
    report = await engine.ingest_files(collection, paths)
    if report.failed and len(report.failed) == len(paths):
        for path in paths:
            path.unlink(missing_ok=True)
        raise UnprocessableError("; ".join(reason for _, reason in report.failed))
    records = {Path(r.file_path).name: r for r in await engine.documents(collection)}
    return {
        "object": "list",
        "collection": collection,
        "data": [_info(records[n]).model_dump() for n in names if n in records],
        "added": report.documents_added,
        "replaced": report.replaced,
        "unchanged": report.unchanged,
        "chunks": report.chunks,
        "failed": [{"file": Path(p).name, "reason": r} for p, r in report.failed],
    }


@router.get("/collections/{name}/documents")
async def list_documents(name: str, engine: EngineDep) -> DocumentList:
    """The documents of a knowledge base; 404 if there is none of that name."""
    records = await engine.documents(check_collection_name(name))
    return DocumentList(collection=name, data=[_info(r) for r in records])


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
