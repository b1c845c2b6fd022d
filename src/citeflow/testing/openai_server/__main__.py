"""``python -m citeflow.testing.openai_server``: serve a fake OpenAI server until interrupted."""

from citeflow.testing.openai_server.cli import main

main()
