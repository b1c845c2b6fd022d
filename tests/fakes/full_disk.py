"""A disk that fills up: the embedded Qdrant client with room for only so many more writes.

The fault is injected at the store's one dependency, its `QdrantClient` (a
`citeflow.store.client.ClientEngine` takes the client it is given). qdrant-client's local mode
stores each point in an SQLite file, one transaction per point; on a full disk SQLite fails the
transaction it is in and rolls it back, and the error reaches the caller as
``sqlite3.OperationalError: database or disk is full`` (``SQLITE_FULL``), after the batch's
earlier points were stored. `FullDiskClient` does the same: each point written (upserted, or its
payload changed) takes one unit of ``room``; the write that finds no room left stores the points
before it and raises that error.
"""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from qdrant_client import QdrantClient


def disk_full_error(kind: str = "sqlite") -> Exception:
    """The exception a write meets on a full disk: SQLite's, or the operating system's."""
    if kind == "oserror":
        return OSError(errno.ENOSPC, "No space left on device")
    error = sqlite3.OperationalError("database or disk is full")
    error.sqlite_errorcode = sqlite3.SQLITE_FULL  # type: ignore[attr-defined]
    return error


class FullDiskClient(QdrantClient):
    """A `QdrantClient` (embedded) on a disk with room for ``room`` more points (None: no
    limit); see the module doc."""

    def __init__(self, *args: Any, room: int | None = None, **kw: Any):
        super().__init__(*args, **kw)
        self.room = room
        self.failures = 0

    def free(self, room: int | None = None) -> None:
        """Make room (None: no limit any more)."""
        self.room = room

    def _write_what_fits(
        self, write: Callable[..., Any], points: Any, *args: Any, **kw: Any
    ) -> Any:
        """``write`` the points that fit, taking their room; if some do not, the error a full
        disk gives after them."""
        assert isinstance(points, Sequence)
        fits = len(points) if self.room is None else min(len(points), self.room)
        if self.room is not None:
            self.room -= fits
        if fits < len(points):
            if fits:
                write(list(points[:fits]), *args, **kw)
            raise self._fail()
        return write(points, *args, **kw)

    def _fail(self) -> Exception:
        self.failures += 1
        return disk_full_error()

    def upsert(self, collection_name: str, points: Any, *args: Any, **kw: Any) -> Any:
        return self._write_what_fits(partial(super().upsert, collection_name), points, *args, **kw)

    def delete_payload(
        self, collection_name: str, keys: Sequence[str], points: Any, *args: Any, **kw: Any
    ) -> Any:
        write = partial(super().delete_payload, collection_name, keys)
        return self._write_what_fits(write, points, *args, **kw)

    def delete(self, collection_name: str, *args: Any, **kw: Any) -> Any:
        if self.room == 0:  # deleting writes too (SQLite's write-ahead log)
            raise self._fail()
        return super().delete(collection_name, *args, **kw)


class FillingDisk:
    """The disk under an embedded store (`citeflow.store.edge`) with room for ``room`` more
    points: the store's free-space check (`citeflow.store.directory.free_bytes`) sees citeflow's
    reserve plus that room, and every point the engine stores takes one unit of it.

    The embedded engine writes through memory-mapped files, which on a really full disk kill
    the process instead of failing a write; so its guard is the check before each write, and
    this fake drives that check (``tests/test_store_durability.py`` fills a real disk).
    """

    def __init__(self, monkeypatch: Any, room: int | None) -> None:
        from citeflow.store import directory
        from citeflow.store.edge import EdgeEngine

        self.room = room
        real_upsert = EdgeEngine.upsert

        def upsert(engine: EdgeEngine, collection: str, points: Sequence[Any]) -> None:
            real_upsert(engine, collection, points)
            if self.room is not None:
                self.room -= len(points)

        def free_bytes(root: Any) -> int:
            if self.room is None:
                return 1 << 40
            return directory.RESERVE_BYTES + max(self.room, 0) * directory.BYTES_PER_POINT

        monkeypatch.setattr(EdgeEngine, "upsert", upsert)
        monkeypatch.setattr(directory, "free_bytes", free_bytes)

    def free(self, room: int | None = None) -> None:
        """Make room (None: no limit any more)."""
        self.room = room
