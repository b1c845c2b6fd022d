"""Uploaded files: a multipart body streamed straight to disk, within limits, or nothing at all.

FastAPI's ``UploadFile`` reads the whole body (spooling its files to temporary files) before the
route runs, so a 1 GB upload was on disk, in full, before its HTTP 413. `receive_files` instead:

* refuses a declared ``Content-Length`` over the limit before reading a byte of the body;
* parses the body as it arrives (python-multipart's streaming parser) and writes each ``file``
  part to a ``.part`` file in the folder of its target (a rename keeps it, atomically);
* stops reading at once when a file or the body passes its limit, or a part's file name is
  refused (checked as soon as the part's headers have arrived);
* deletes its ``.part`` files whatever goes wrong, including a client that goes away or a full
  disk (`citeflow.disk`: HTTP 507).

File writes run in a worker thread, one hop per received piece of the body: the event loop
never waits for the disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect, Request

from citeflow.api.body import read_within
from citeflow.api.errors import BadRequestError, PayloadTooLargeError
from citeflow.disk import disk_space

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

#: Room for the multipart framing (boundaries, part headers) on top of the files themselves.
FRAMING_BYTES = 64 * 1024
#: Most ``file`` parts in one request.
MAX_FILES = 100
#: The multipart field each file is sent as.
FIELD = "file"


@dataclass(frozen=True)
class ReceivedFile:
    """One uploaded file: its (checked) name and the ``.part`` file holding its bytes."""

    name: str
    temp: Path


#: A piece of disk work found by the parser: open a file's ``.part``, write to it, close it.
_OPEN, _WRITE, _CLOSE = range(3)
_Work = tuple[int, int, bytes]  # (what, the file's index, data)


class _Reader:
    """The parser's callbacks (which only take notes) and the disk work they ask for (`apply`,
    in a worker thread)."""

    def __init__(
        self,
        folder: Path,
        *,
        max_file_bytes: int,
        check_name: Callable[[str | None], str],
    ) -> None:
        self.folder = folder
        self.max_file_bytes = max_file_bytes
        self.check_name = check_name
        self.names: list[str] = []  # the file parts met so far
        self.files: list[ReceivedFile] = []  # those whose .part file exists
        self.ended = False
        self._headers: list[tuple[bytes, bytes]] = []
        self._header_name = b""
        self._header_value = b""
        self._file: int | None = None  # the index of the file part being read
        self._size = 0
        self._work: list[_Work] = []
        self._open: dict[int, BinaryIO] = {}
        self._lock = threading.Lock()
        self._discarded = False

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self.on_part_begin,
            "on_header_field": self.on_header_field,
            "on_header_value": self.on_header_value,
            "on_header_end": self.on_header_end,
            "on_headers_finished": self.on_headers_finished,
            "on_part_data": self.on_part_data,
            "on_part_end": self.on_part_end,
            "on_end": self.on_end,
        }

    # --- parser callbacks (no I/O) -------------------------------------------------------------
    def on_part_begin(self) -> None:
        self._headers, self._file, self._size = [], None, 0

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def on_header_end(self) -> None:
        self._headers.append((self._header_name.strip().lower(), self._header_value.strip()))
        self._header_name = self._header_value = b""

    def on_headers_finished(self) -> None:
        disposition = next((v for k, v in self._headers if k == b"content-disposition"), b"")
        _, options = parse_options_header(disposition)
        if options.get(b"name", b"").decode("latin-1") != FIELD:
            return  # another field: read past it
        raw = options.get(b"filename")
        try:
            filename = raw.decode("utf-8") if raw is not None else None
        except UnicodeDecodeError:
            raise BadRequestError(
                "a file name is not valid UTF-8; rename the file", param=FIELD
            ) from None
        name = self.check_name(filename)
        if name in self.names:
            raise BadRequestError(f"the file name {name!r} is uploaded twice", param=FIELD)
        if len(self.names) >= MAX_FILES:
            raise BadRequestError(
                f"more than {MAX_FILES} files in one upload; send them in several requests",
                param=FIELD,
            )
        self._file = len(self.names)
        self.names.append(name)
        self._work.append((_OPEN, self._file, b""))

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self._file is None:
            return
        self._size += end - start
        if self._size > self.max_file_bytes:
            raise PayloadTooLargeError(
                f"{self.names[self._file]} is over the upload limit of {self.max_file_bytes} bytes",
                param=FIELD,
            )
        self._work.append((_WRITE, self._file, data[start:end]))

    def on_part_end(self) -> None:
        if self._file is not None:
            self._work.append((_CLOSE, self._file, b""))
            self._file = None

    def on_end(self) -> None:
        self.ended = True

    # --- disk (in a worker thread) -------------------------------------------------------------
    def take_work(self) -> list[_Work]:
        work, self._work = self._work, []
        return work

    def apply(self, work: list[_Work]) -> None:
        """Create, write and close ``.part`` files as the parser found their parts."""
        with self._lock:
            if self._discarded:
                return
            for what, index, data in work:
                if what == _OPEN:
                    temp, out = create_part(self.folder)
                    self.files.append(ReceivedFile(self.names[index], temp))
                    self._open[index] = out
                elif what == _WRITE:
                    self._open[index].write(data)
                else:
                    self._open.pop(index).close()

    def discard(self) -> None:
        """Close and delete every ``.part`` file (any failure, or a cancellation).

        Takes the lock: a cancelled request's `apply` may still be running in its thread.
        """
        with self._lock:
            self._discarded = True
            for out in self._open.values():
                with contextlib.suppress(OSError):  # a full disk fails the flush: drop the bytes
                    out.close()
            self._open.clear()
            for received in self.files:
                received.temp.unlink(missing_ok=True)


def create_part(folder: Path) -> tuple[Path, BinaryIO]:
    """A new, empty ``.part`` file in ``folder`` (made if need be), open for writing: where
    each received file is written."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=folder, prefix=".upload-", suffix=".part")
    return Path(temp), os.fdopen(fd, "wb")


async def receive_files(
    request: Request,
    folder: Path,
    *,
    max_file_bytes: int,
    check_name: Callable[[str | None], str],
) -> list[ReceivedFile]:
    """The `FIELD` parts of a multipart/form-data body, each in a ``.part`` file in
    ``folder``; the caller renames them to their names or deletes them.

    The whole body may hold at most ``max_file_bytes`` plus `FRAMING_BYTES`, each file at most
    ``max_file_bytes``; ``check_name`` turns a part's file name into the name to keep it under
    (or raises). Other fields are read past and ignored.

    Raises:
        PayloadTooLargeError: a declared or streamed body, or one file, over the limit (413).
        BadRequestError: not multipart/form-data, malformed or cut short, a refused file name,
            no `FIELD` part (400).
        StorageFullError: no space left on the disk for the files (507).
    """
    content_type, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if content_type != b"multipart/form-data" or not boundary:
        raise BadRequestError(
            f"send the files as multipart/form-data, one '{FIELD}' part per file",
            param=FIELD,
        )
    reader = _Reader(folder, max_file_bytes=max_file_bytes, check_name=check_name)
    too_large = PayloadTooLargeError(
        f"the upload is over the limit of {max_file_bytes} bytes (the files of one request "
        "together); send fewer or smaller files per request",
        param=FIELD,
    )
    try:
        parser = MultipartParser(boundary, reader.callbacks())
        async for piece in read_within(request, max_file_bytes + FRAMING_BYTES, too_large):
            parser.write(piece)
            if work := reader.take_work():
                with disk_space(
                    f"no space left on the disk holding the uploads ({folder}): the upload was "
                    "not kept, nothing already stored was lost; free some space, then upload again"
                ):
                    await asyncio.to_thread(reader.apply, work)
        if not reader.ended:
            raise BadRequestError(
                "the multipart body ends before its closing boundary; send the whole body",
                param=FIELD,
            )
    except FormParserError as exc:
        reader.discard()
        raise BadRequestError(f"invalid multipart body: {exc}", param=FIELD) from None
    except ClientDisconnect:
        reader.discard()
        raise BadRequestError("the client went away during the upload") from None
    except BaseException:
        reader.discard()
        raise
    if not reader.files:
        raise BadRequestError(
            f"no '{FIELD}' part: send each file as a multipart/form-data part named '{FIELD}'",
            param=FIELD,
        )
    return reader.files
