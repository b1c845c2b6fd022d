"""Test doubles: scripted LLM, hash embedder, and a fake OpenAI/Azure HTTP server.

Import what you need from its module (e.g. ``tests.fakes.openai_server``); this package imports
nothing itself, so using one fake never pulls in another's dependencies.
"""
