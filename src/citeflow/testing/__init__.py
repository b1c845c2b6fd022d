"""Test support: fakes of citeflow's providers, for tests and benchmarks.

Like ``fastapi.testclient``, this is part of the installed package so that citeflow's own tests,
its benchmarks and your tests of code built on citeflow share one set of doubles; citeflow
itself never imports it. Each fake is in its own module, and this package imports none of them,
so using one never pulls in another's dependencies:

* `citeflow.testing.llm`: `ScriptedLLM`, an LLM that answers from a script;
* `citeflow.testing.embedding`: `HashEmbedding`, a deterministic bag-of-words embedder (and
  `RecordingEmbedding`, which records its batches and can fail on one);
* `citeflow.testing.openai_server`: `FakeOpenAIServer`, a real HTTP OpenAI / Azure OpenAI
  server on 127.0.0.1 whose replies (`citeflow.testing.openai_replies`) are scripted, paced or
  failing; ``python -m citeflow.testing.openai_server`` runs one on its own.
"""
