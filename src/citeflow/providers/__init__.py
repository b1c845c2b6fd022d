"""Model providers: build the LLM and the embedding model that `Settings` asks for."""
