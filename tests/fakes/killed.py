"""``kill -9`` midway: a forked child process killed with SIGKILL once it has gone so far.

The child reports its progress by writing a byte to a pipe for each step it finishes (a batch
embedded, a batch copied); the test kills it after a given number of steps, wherever it is in
the next one, as a crash or the OOM killer would.
"""

from __future__ import annotations

import multiprocessing
import os
import select
import signal
from collections.abc import Callable
from typing import Any


def kill_9_after(
    steps: int, target: Callable[..., None], *args: Any, what: str, within: float
) -> None:
    """Run ``target(*args, notify_fd)`` in a forked child and ``kill -9`` it once it has written
    ``steps`` bytes to ``notify_fd``; an AssertionError naming the ``what`` child if it stops
    first, or writes nothing for ``within`` seconds."""
    read_fd, write_fd = os.pipe()
    child = multiprocessing.get_context("fork").Process(
        target=target, args=(*args, write_fd), daemon=True
    )
    child.start()
    os.close(write_fd)
    try:
        seen = b""
        while len(seen) < steps:
            ready, _, _ = select.select([read_fd], [], [], within)
            chunk = os.read(read_fd, 8) if ready else b""
            assert chunk, f"the {what} child stopped early (exit code {child.exitcode})"
            seen += chunk
    finally:
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        os.close(read_fd)
    assert child.exitcode == -signal.SIGKILL
