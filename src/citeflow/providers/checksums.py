"""Check a large file's size and sha256, remembering the result in a ``<file>.sha256`` sidecar
(the digest with the file's size and mtime), so later checks of an unchanged file cost one
``stat`` instead of re-hashing a gigabyte."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from tqdm import tqdm

__all__ = ["hash_files", "record_checksum", "verified"]

log = logging.getLogger("citeflow.models")

#: bytes read at a time while hashing or copying
CHUNK = 8 * 1024 * 1024
_SIDECAR_SUFFIX = ".sha256"


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + _SIDECAR_SUFFIX)


def _recorded_ok(path: Path, expected_sha256: str, expected_size: int) -> bool:
    """True if the sidecar says ``path``, as it is now (size, mtime), has the expected digest."""
    try:
        stat = path.stat()
        record = json.loads(_sidecar(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        isinstance(record, dict)
        and record.get("sha256") == expected_sha256.lower()
        and record.get("size") == expected_size == stat.st_size
        and record.get("mtime_ns") == stat.st_mtime_ns
    )


def record_checksum(path: Path, sha256: str) -> None:
    """Write the sidecar for ``path`` (best effort: a read-only directory only costs a re-hash)."""
    stat = path.stat()
    record = {"sha256": sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    try:
        _sidecar(path).write_text(json.dumps(record) + "\n", encoding="utf-8")
    except OSError as exc:
        log.warning("cannot record the checksum of %s: %s", path, exc)


def hash_files(
    paths: Sequence[Path], *, progress: bool, desc: str, out: BinaryIO | None = None
) -> tuple[str, int]:
    """The hex sha256 and the size of ``paths`` joined in order, written to ``out`` as read;
    ``progress``: a byte counter on stderr."""
    digest = hashlib.sha256()
    written = 0
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    total = sum(p.stat().st_size for p in paths)
    with tqdm(
        total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, disable=not progress
    ) as bar:
        for path in paths:
            with path.open("rb") as src:
                while n := src.readinto(buffer):
                    digest.update(view[:n])
                    if out is not None:
                        out.write(view[:n])
                    written += n
                    bar.update(n)
    return digest.hexdigest(), written


def verified(
    path: Path, expected_sha256: str, expected_size: int, *, verify: bool, progress: bool
) -> bool:
    """True if ``path`` has the expected size and digest; re-hash only when the sidecar is stale
    (or ``verify``), and record a good digest."""
    try:
        if path.stat().st_size != expected_size:
            return False
    except OSError:
        return False
    if not verify and _recorded_ok(path, expected_sha256, expected_size):
        return True
    log.info("verifying %s", path)
    digest, _ = hash_files([path], progress=progress, desc=f"verifying {path.name}")
    if digest != expected_sha256.lower():
        return False
    record_checksum(path, digest)
    return True
