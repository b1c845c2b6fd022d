"""Expand the paths a user gave (files and folders, recursively) into the files we can read."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from citeflow.ingestion.readers.dispatch import SUPPORTED_SUFFIXES

__all__ = ["discover"]


def discover(paths: Iterable[Path]) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Expand files and folders into readable files and skipped paths.

    Folders are walked recursively; hidden files and folders (names starting with ``.``, such as
    ``.git``) are skipped silently, symlinked folders are not followed. Each folder's files come
    back sorted, and the inputs keep their order, so the result is deterministic. A file reached
    twice (listed and inside a listed folder) is returned once. Paths that were given explicitly
    are taken even if hidden.

    Args:
        paths: Files and/or folders.

    Returns:
        ``(files, skipped)``: the supported files, and ``(path, reason)`` for every file or path
        that will not be read (unsupported type, path does not exist, ...). Nothing is raised for a
        bad path; it is reported in ``skipped``.
    """
    files: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    seen: set[Path] = set()

    for given in paths:
        path = Path(given)
        candidates: list[Path]
        if path.is_dir():
            candidates = _walk(path, skipped)
        elif path.is_file():
            candidates = [path]
        elif path.is_symlink():
            skipped.append((path, "broken symbolic link"))
            continue
        elif path.exists():
            skipped.append((path, "not a regular file or folder"))
            continue
        else:
            skipped.append((path, "path does not exist"))
            continue

        for candidate in candidates:
            key = candidate.resolve()
            if key in seen:
                continue
            seen.add(key)
            reason = _skip_reason(candidate)
            if reason is None:
                files.append(candidate)
            else:
                skipped.append((candidate, reason))
    return files, skipped


def _walk(folder: Path, skipped: list[tuple[Path, str]]) -> list[Path]:
    """All non-hidden files under `folder`, sorted; unreadable sub-folders go to `skipped`."""

    def on_error(exc: OSError) -> None:
        where = Path(exc.filename) if exc.filename else folder
        skipped.append((where, f"cannot read folder ({exc.strerror or exc})"))

    found: list[Path] = []
    for root, dirnames, filenames in os.walk(folder, onerror=on_error):
        # Prune in place so os.walk never descends into hidden folders (.git, .venv, ...).
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        root_path = Path(root)
        found.extend(root_path / name for name in filenames if not name.startswith("."))
    found.sort()
    return found


def _skip_reason(path: Path) -> str | None:
    """Why `path` (a file found by `discover`) will not be read, or None if it will."""
    if path.name.startswith("~$"):
        return "temporary Office lock file"
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        if not suffix:
            return "unsupported file type (no extension)"
        return f"unsupported file type ({path.suffix})"
    if not path.is_file():  # e.g. a broken symlink found while walking a folder
        return "not a regular file (broken link?)"
    return None
