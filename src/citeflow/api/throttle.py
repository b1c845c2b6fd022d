"""Failed API keys: a client address that keeps sending wrong keys is slowed down (HTTP 429).

``CITEFLOW_AUTH_MAX_FAILURES`` (default 10) wrong keys from one address within
``CITEFLOW_AUTH_FAILURE_WINDOW`` seconds (default 60); past them, a wrong key from that address
gets 429 with ``Retry-After`` (the time until its oldest counted failure leaves the window)
instead of 401, and is not counted. A right key always passes and counts for nothing, so a
guesser sharing an address (a proxy, a NAT) with real clients locks out no one who has the key.
A request with no key at all is no guess and is not counted either.

Memory is bounded: at most ``max_failures`` times per address and ``max_clients`` addresses;
addresses whose failures have all left the window are forgotten first, then the ones that failed
least recently. `FailedKeys` is used from the event loop only (no lock).

Not the ``limits`` library: its moving window is this window, but its in-memory storages keep
every address until the window passes (the synchronous one keeps an empty entry per address for
good), with no cap, and read the wall clock: with 20,000 guessing addresses ``limits.aio``
kept them all at 178 µs per wrong key, `FailedKeys` its cap of 10,000 at 83 µs.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable

from citeflow.api.errors import AuthThrottledError

log = logging.getLogger("citeflow.server")


class FailedKeys:
    """Wrong API keys per client address in a sliding window.

    Args:
        max_failures: wrong keys allowed per address per window; 0: no limit.
        window: seconds over which they are counted.
        clock: monotonic seconds (tests).
        max_clients: addresses remembered at most.
    """

    def __init__(
        self,
        max_failures: int,
        window: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = 10_000,
    ) -> None:
        self.max_failures = max_failures
        self.window = window
        self.clock = clock
        self.max_clients = max_clients
        self._failures: dict[str, deque[float]] = {}

    def __len__(self) -> int:
        """Addresses remembered."""
        return len(self._failures)

    def _recent(self, client: str, now: float) -> deque[float] | None:
        times = self._failures.get(client)
        if times is None:
            return None
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._failures[client]
            return None
        return times

    def check(self, client: str) -> None:
        """Raise `AuthThrottledError` (429) if ``client`` has used up its wrong keys."""
        if not self.max_failures:
            return
        now = self.clock()
        times = self._recent(client, now)
        if times is not None and len(times) >= self.max_failures:
            wait = times[0] + self.window - now
            raise AuthThrottledError(
                f"too many wrong API keys from this address; retry in {math.ceil(wait)} s",
                retry_after=wait,
            )

    def failed(self, client: str) -> None:
        """Count one wrong key from ``client``."""
        if not self.max_failures:
            return
        now = self.clock()
        times = self._recent(client, now)
        if times is None:
            if len(self._failures) >= self.max_clients:
                self._prune(now)
            times = deque(maxlen=self.max_failures)
        else:
            del self._failures[client]  # re-inserted last: the most recent failure
        times.append(now)
        self._failures[client] = times
        if len(times) == self.max_failures:
            log.warning(
                "%d wrong API keys from %s within %g s; its wrong keys get 429 for now",
                self.max_failures,
                client,
                self.window,
                extra={"client": client},
            )

    def _prune(self, now: float) -> None:
        stale = [c for c, times in self._failures.items() if times[-1] <= now - self.window]
        for client in stale:
            del self._failures[client]
        excess = len(self._failures) - self.max_clients + 1
        if excess > 0:  # the least recent failures first (insertion order)
            for client in list(self._failures)[: max(excess, self.max_clients // 4)]:
                del self._failures[client]
