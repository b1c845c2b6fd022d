"""Rate limits of chat completions: HTTP 429 with ``Retry-After`` instead of a slow collapse.

Two limits, each off when set to 0:

* ``CITEFLOW_MAX_CONCURRENT_CHATS`` (default 128): chat completions in progress at once, streams
  included until their last byte (or their client's disconnect). Past it, the server would only
  queue work on the same cores, and every answer would start later; a client told 429 can retry.
* ``CITEFLOW_CHATS_PER_MINUTE`` (default off): chat completions started per minute by one client,
  identified by its API key (or, without keys, its address). A token bucket: up to the rate in a
  burst, refilled evenly. One Open WebUI instance usually shares one key among its users, so
  size this for the whole instance.

Both checks happen before the request body is read. `ChatLimits.admit` returns a `Slot` that the
route releases when the answer is complete (for a stream: when the stream ends).

Not the ``limits`` library: it has fixed, moving and sliding windows but no token bucket, and
none of them can refill evenly; a moving window of 2 per minute would tell a client that spent
its burst to wait 60 s where the bucket says 30 s. A concurrency cap is not a rate limit at all.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from citeflow.api.errors import RateLimitError


class Slot:
    """One admitted chat completion; `release` (idempotent) frees its concurrency slot."""

    def __init__(self, on_release: Callable[[], None] | None = None) -> None:
        self._on_release = on_release

    def release(self) -> None:
        callback, self._on_release = self._on_release, None
        if callback is not None:
            callback()


class ConcurrencyLimit:
    """At most ``limit`` slots held at once (0: no limit)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0
        self._lock = threading.Lock()

    def acquire(self) -> Slot:
        """A slot, or `RateLimitError` when all are held."""
        if not self.limit:
            return Slot()
        with self._lock:
            if self.active >= self.limit:
                raise RateLimitError(
                    f"too many chat completions in progress (at most {self.limit} at once); "
                    "retry shortly",
                    retry_after=1,
                )
            self.active += 1
        return Slot(self._release)

    def _release(self) -> None:
        with self._lock:
            self.active -= 1


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


class RequestRate:
    """A token bucket per client: ``per_minute`` requests, as a burst or spread out (0: off).

    Args:
        per_minute: the rate, and the bucket's size.
        clock: monotonic seconds (tests).
        max_clients: buckets kept at most; full ones are forgotten first (they hold no state).
    """

    def __init__(
        self,
        per_minute: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = 10_000,
    ) -> None:
        self.per_minute = per_minute
        self.clock = clock
        self.max_clients = max_clients
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def take(self, client: str) -> None:
        """Spend one request of ``client``'s budget, or raise `RateLimitError`."""
        if not self.per_minute:
            return
        rate = self.per_minute / 60.0
        now = self.clock()
        with self._lock:
            bucket = self._buckets.get(client)
            if bucket is None:
                if len(self._buckets) >= self.max_clients:
                    self._prune(now, rate)
                bucket = self._buckets[client] = _Bucket(float(self.per_minute), now)
            bucket.tokens = min(
                float(self.per_minute), bucket.tokens + (now - bucket.updated) * rate
            )
            bucket.updated = now
            if bucket.tokens < 1.0:
                wait = (1.0 - bucket.tokens) / rate
                raise RateLimitError(
                    f"rate limit of {self.per_minute} chat completions per minute reached; "
                    f"retry in {math.ceil(wait)} s",
                    retry_after=wait,
                    reason="per_minute",
                )
            bucket.tokens -= 1.0

    def _prune(self, now: float, rate: float) -> None:
        full = [
            key
            for key, b in self._buckets.items()
            if b.tokens + (now - b.updated) * rate >= self.per_minute
        ]
        for key in full or list(self._buckets)[: len(self._buckets) // 2]:
            del self._buckets[key]


def client_id(token: str | None, address: str | None, *, user: str | None = None) -> str:
    """Who a request is from, for `RequestRate`: the Open WebUI user it is for
    (`citeflow.api.users`), else its bearer key (hashed), else its address."""
    if user:
        return "user:" + hashlib.sha256(user.encode()).hexdigest()[:32]
    if token:
        return "key:" + hashlib.sha256(token.encode()).hexdigest()[:32]
    return f"addr:{address or 'unknown'}"


class ChatLimits:
    """The concurrency limit and the per-client rate, checked together."""

    def __init__(self, max_concurrent: int = 0, per_minute: int = 0) -> None:
        self.concurrency = ConcurrencyLimit(max_concurrent)
        self.rate = RequestRate(per_minute)

    def admit(self, client: str) -> Slot:
        """Admit one chat completion of ``client``, or raise `RateLimitError` (429)."""
        slot = self.concurrency.acquire()
        try:
            self.rate.take(client)
        except BaseException:
            slot.release()
            raise
        return slot
