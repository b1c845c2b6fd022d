"""Processes for the e2e test: free ports, servers in their own process groups, readiness."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import httpx


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """A command run in its own process group, its output in ``<log_dir>/<name>.log``.

    Stopping it (on exit of the ``with`` block, failure included) ends the whole group:
    SIGTERM, then SIGKILL after ``grace`` seconds.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        log_dir: Path,
        grace: float = 10.0,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.env = dict(env)
        self.cwd = cwd
        self.log_path = log_dir / f"{name}.log"
        self.grace = grace
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Server:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def stop(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, self.grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                process.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(
        self,
        url: str,
        *,
        timeout: float,
        ready: Callable[[httpx.Response], bool] = lambda r: r.status_code == 200,
        headers: Mapping[str, str] | None = None,
    ) -> float:
        """Seconds until GET ``url`` is `ready`; RuntimeError (with the log's tail) if the
        process exits first or ``timeout`` passes."""
        started = time.monotonic()
        while True:
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                raise RuntimeError(f"{self.name} exited ({code}):\n{self.log_tail()}")
            try:
                if ready(httpx.get(url, headers=headers, timeout=5)):
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            if time.monotonic() - started > timeout:
                raise RuntimeError(
                    f"{self.name} not ready at {url} after {timeout:.0f} s:\n{self.log_tail()}"
                )
            time.sleep(0.5)
