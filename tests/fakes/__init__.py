"""Fakes only citeflow's own tests need (a filling disk); the shared ones (LLM, embedder, OpenAI
server) are in `citeflow.testing`."""
