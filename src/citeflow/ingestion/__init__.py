"""Ingestion: find files, read them into LlamaIndex Documents, and index them."""
