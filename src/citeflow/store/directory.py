"""The embedded store's directory: what wrote it, who has it open, and room to write.

Layout of the store directory (``<CITEFLOW_DATA_DIR>/qdrant``)::

    citeflow-store.json    the format marker: {"format": 1, "engine": "qdrant-edge", ...}
    citeflow.lock          held (flock) by the one process that has the store open
    shards/<collection>/   one qdrant-edge shard per collection
    legacy-qdrant-local/   a store of an earlier citeflow, kept after its migration

A directory without the marker but with qdrant-client's local-mode files (``meta.json``,
``collection/``) was written by an earlier citeflow; `citeflow.store.migration` copies it.

**Room to write.** qdrant-edge writes through memory-mapped files (its write-ahead log is two
32 MiB files, filled as points arrive). On a full disk a write to such a file does not fail with
an error: the operating system kills the process (``SIGBUS``), losing what was in flight. So
every open and every write first checks the free space (`require_room`) and refuses with one
clear `StorageFullError` while there is still room for the engine to finish what it has begun.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from contextlib import AbstractContextManager
from importlib.metadata import version
from pathlib import Path
from typing import IO

from citeflow.disk import disk_space
from citeflow.errors import StorageFullError, StoreLockedError, StoreUnreadableError

#: the store format this version writes and reads
FORMAT = 1
MARKER = "citeflow-store.json"
LOCK = "citeflow.lock"
SHARDS = "shards"
LEGACY_KEPT = "legacy-qdrant-local"

#: free space kept in reserve below every write: the write-ahead log's next 32 MiB segment, the
#: current one's unwritten part, and the segment files' growth
RESERVE_BYTES = 128 * 1024 * 1024
#: disk taken per point written, at most (a 384-d vector, its BM25 vector and a ~1 KB payload
#: take about 6 KB across the log and the segment; the figure leaves room for larger ones)
BYTES_PER_POINT = 64 * 1024


def full_disk_guard(location: str) -> AbstractContextManager[None]:
    """Around a write to the store at ``location``: a full disk becomes one clear
    `StorageFullError` (`citeflow.disk.disk_space`). Each write happens or not (the embedded
    engine checks for room first, a Qdrant server undoes its failed operation), so what was
    stored before stays stored."""
    return disk_space(
        f"no space left on the disk holding the store ({location}): a write failed and was "
        "undone, nothing already stored was lost; free some space, then try again"
    )


def free_bytes(root: Path) -> int:
    """Free space on the disk holding ``root``, in bytes (for unprivileged writers)."""
    return shutil.disk_usage(root).free


def require_room(root: Path, points: int = 0, *, extra_bytes: int = 0) -> None:
    """Raise `StorageFullError` unless the disk holding ``root`` has room for ``points`` more
    points and ``extra_bytes`` more bytes above the reserve (see the module doc)."""
    if free_bytes(root) < RESERVE_BYTES + points * BYTES_PER_POINT + extra_bytes:
        raise StorageFullError(
            f"not enough free space on the disk holding the store ({root}): nothing was "
            f"written and nothing already stored was lost; free some space (citeflow keeps "
            f"{RESERVE_BYTES // 2**20} MiB in reserve), then try again"
        )


def check_marker(root: Path) -> None:
    """A clear error if the directory's marker (when there is one) cannot be read or is of a
    format this version does not know."""
    path = root / MARKER
    if not path.exists():
        return
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        store_format, engine = int(data["format"]), str(data["engine"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StoreUnreadableError(
            f"the store {root} has a damaged {MARKER} ({exc.__class__.__name__}); restore the "
            "directory from a backup, or set CITEFLOW_DATA_DIR to a new directory and "
            "ingest again"
        ) from None
    if store_format > FORMAT or engine != "qdrant-edge":
        raise StoreUnreadableError(
            f"the store {root} was written by a newer citeflow (store format {store_format}, "
            f"engine {engine}); this one reads format {FORMAT}: upgrade citeflow, or "
            "set CITEFLOW_DATA_DIR to another directory"
        )


def write_marker(root: Path) -> None:
    """Mark ``root`` as a store of this format (written atomically)."""
    data = {"format": FORMAT, "engine": "qdrant-edge", "engine_version": version("qdrant-edge-py")}
    staging = root / f".{MARKER}.tmp"
    staging.write_text(json.dumps(data) + "\n", encoding="utf-8")
    os.replace(staging, root / MARKER)


def has_legacy_store(root: Path) -> bool:
    """Whether ``root`` holds qdrant-client local-mode files (an earlier citeflow's store)."""
    return (root / "meta.json").is_file() and (root / "collection").is_dir()


class DirectoryLock:
    """An exclusive lock on the store directory, held while the store is open (one process).

    The shards' own logs are locked by the engine too; this lock also covers the collections
    not opened yet and a migration in progress. It goes with the process (``kill -9`` included).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._file: IO[bytes] | None = None

    def acquire(self) -> None:
        handle = open(self.root / LOCK, "a+b")  # noqa: SIM115 (held until release)
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise locked_error(self.root) from None
        self._file = handle

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None


def locked_error(root: Path) -> StoreLockedError:
    return StoreLockedError(
        f"the embedded store {root} is in use by another process (is `citeflow serve` "
        "running?); stop it, or send documents through its API"
    )
