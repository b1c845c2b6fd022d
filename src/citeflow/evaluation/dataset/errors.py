"""`DatasetError`: what is wrong with an evaluation dataset, and where."""

from __future__ import annotations

from pathlib import Path

from citeflow.errors import InvalidRequestError

__all__ = ["DatasetError"]


class DatasetError(InvalidRequestError):
    """An evaluation dataset is missing a file or holds a bad line.

    ``file`` is the offending file (relative to the dataset folder when inside it) and ``line``
    its 1-based line number, or 0 when the problem is the file as a whole.
    """

    def __init__(self, file: Path | str, line: int, problem: str) -> None:
        where = f"{file} line {line}" if line else str(file)
        super().__init__(f"{where}: {problem}")
        self.file = str(file)
        self.line = line
