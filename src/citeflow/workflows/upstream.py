"""`upstream`: a provider's failure (HTTP, timeout, runtime) as one clear `UpstreamError`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from citeflow.errors import CiteflowError
from citeflow.providers.upstream_errors import as_upstream_error


@contextmanager
def upstream(what: str) -> Iterator[None]:
    """Raise what fails inside as an `UpstreamError` about ``what`` (a `CiteflowError` as is)."""
    try:
        yield
    except CiteflowError:
        raise
    except Exception as exc:
        raise as_upstream_error(exc, what=what) from exc
