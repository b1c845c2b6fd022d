"""Structured logs for operators: one JSON object per line on stderr (or plain text)."""

from __future__ import annotations

import json
import logging
import sys
import time
import warnings
from typing import Any

_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """``{"ts": ..., "level": ..., "logger": ..., "msg": ..., **extra}``."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RESERVED and not key.startswith("_"):
                payload[key] = value
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


def configure(level: str = "WARNING", *, json_format: bool = False) -> None:
    """Set up citeflow's logging once, for an entry point (CLI or server)."""
    from citeflow.tracing import TraceIds

    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(TraceIds())
    handler.setFormatter(
        JsonFormatter() if json_format else logging.Formatter("%(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger("citeflow")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    # local Qdrant warns that payload indexes (made for server Qdrant) do nothing locally
    warnings.filterwarnings("ignore", message="Payload indexes have no effect")
    # pypdf reports recoverable oddities of real-world PDFs at WARNING; ingestion reports failures
    logging.getLogger("pypdf").setLevel(logging.ERROR)
