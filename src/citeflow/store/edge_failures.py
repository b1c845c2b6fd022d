"""qdrant-edge's failures as citeflow's errors: a damaged or locked shard is one clear line."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from qdrant_edge import EdgeShard

from citeflow.errors import CiteflowError, StoreUnreadableError
from citeflow.store.directory import locked_error

__all__ = ["load_shard", "reading"]


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """Around each operation on an open shard: a failure of the engine itself (a damaged file
    found while reading or writing) becomes one clear `StoreUnreadableError`. Input the engine
    refuses ("Wrong input") and citeflow's own errors pass unchanged."""
    try:
        yield
    except CiteflowError:
        raise
    except Exception as exc:  # qdrant-edge raises plain Exceptions; its text tells them apart
        text = str(exc)
        if "Wrong input" in text or type(exc) is not Exception:
            raise
        problem = f"could not be read ({_first_line(text)}): its files are damaged"
        raise _damaged(path, problem) from None


def load_shard(path: Path) -> EdgeShard:
    """Open one shard; its problems as one clear line each."""
    try:
        return EdgeShard.load(str(path))
    except Exception as exc:  # qdrant-edge raises plain Exceptions; its text tells them apart
        text = str(exc)
        if "WouldBlock" in text:
            raise locked_error(path.parent.parent) from None
        problem = (
            f"cannot be opened ({_first_line(text)}): its files are damaged or were written by "
            "another version"
        )
        raise _damaged(path, problem) from None


def _damaged(path: Path, problem: str) -> StoreUnreadableError:
    """The collection's shard at ``path`` has ``problem``, and what to do about it."""
    return StoreUnreadableError(
        f"the collection {path.name!r} in the store {path.parent.parent} {problem}; restore the "
        f"directory from a backup, or move {path} aside and ingest the collection's documents "
        "again"
    )


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "no reason given"
    return line if len(line) <= 200 else line[:197] + "..."
