"""A full disk, told in one line.

citeflow writes to disk in two places: the store (the embedded Qdrant keeps each collection in
an SQLite file; a Qdrant server has its own disk) and the server's uploads folder. When either
runs out of space, the failure comes as an `OSError` (``ENOSPC``, or ``EDQUOT`` for a full
quota), SQLite's ``SQLITE_FULL`` ("database or disk is full"), or a Qdrant server's "No space
left on device"; `disk_space` turns each into a `StorageFullError` whose message says what
failed, that nothing already stored was lost, and what to do.
"""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from qdrant_client.http.exceptions import UnexpectedResponse

from citeflow.errors import StorageFullError

#: errno values of a full disk (and of a full disk quota)
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_no_space(exc: BaseException) -> bool:
    """Whether ``exc`` is a write that failed for want of disk space."""
    if isinstance(exc, OSError):
        return exc.errno in NO_SPACE
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)
        return code == sqlite3.SQLITE_FULL or "disk is full" in str(exc)
    if isinstance(exc, UnexpectedResponse):
        return "No space left on device" in str(exc)
    return False


@contextmanager
def disk_space(message: str) -> Iterator[None]:
    """Raise `StorageFullError` with ``message`` (one line: what failed, that nothing stored
    was lost, what to do) when the block fails for want of disk space; other errors pass."""
    try:
        yield
    except (OSError, sqlite3.OperationalError, UnexpectedResponse) as exc:
        if not is_no_space(exc):
            raise
        raise StorageFullError(message) from exc
