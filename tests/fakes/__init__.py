"""Fakes only citeflow's own tests need (a filling disk, an event recorder); the shared ones (LLM,
embedder, OpenAI server) are in `citeflow.testing`."""
