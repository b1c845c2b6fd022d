"""A fake OpenAI + Azure OpenAI server: real HTTP on 127.0.0.1, one background thread.

``python -m citeflow.testing.openai_server`` serves one until interrupted: handy for benchmarks,
where the fake should not share a process (and a GIL) with the client.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from contextlib import suppress

from citeflow.testing.openai_replies import Reply
from citeflow.testing.openai_server.server import FakeOpenAIServer


def main(argv: Sequence[str] | None = None) -> None:
    """Serve until interrupted, e.g. with ``--tokens-per-second 50``."""
    parser = argparse.ArgumentParser(
        prog="python -m citeflow.testing.openai_server",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument("--ttft", type=float, default=0.0, help="seconds to the first token")
    parser.add_argument("--tokens-per-second", type=float, default=None)
    parser.add_argument("--reply-tokens", type=int, default=None, help="fixed reply length")
    parser.add_argument("--embedding-dim", type=int, default=384)
    parser.add_argument("--api-key", action="append", default=None, help="required key(s)")
    args = parser.parse_args(argv)
    replies = Reply.of_tokens(args.reply_tokens) if args.reply_tokens else None
    server = FakeOpenAIServer(
        replies,
        embedding_dim=args.embedding_dim,
        ttft=args.ttft,
        tokens_per_second=args.tokens_per_second,
        api_keys=args.api_key,
        record=False,
        host=args.host,
        port=args.port,
    )
    with server:
        sys.stdout.write(f"fake OpenAI: {server.openai_base_url}  Azure: {server.azure_endpoint}\n")
        sys.stdout.flush()
        with suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


if __name__ == "__main__":
    main()
