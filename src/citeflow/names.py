"""Collection names: the one rule, checked wherever a name comes in.

A knowledge base (a Qdrant collection) is named by 1-64 ASCII letters, digits, ``-`` and ``_``,
starting with a letter or digit: it is a path segment of the HTTP API, a folder name under
``<data_dir>/uploads/`` and part of a model id (``citeflow-<name>``), so nothing else is safe in
all three. The HTTP API (path parameters), the CLI (``--collection``), the settings
(``CITEFLOW_COLLECTION``) and the Python API (`citeflow.knowledge_base.KnowledgeBase`) all
check it here.
"""

from __future__ import annotations

import re

from citeflow.errors import InvalidCollectionNameError

#: The rule, for messages and docs.
COLLECTION_NAME_RULE = "1-64 letters, digits, '-' or '_', starting with a letter or digit"

_COLLECTION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", re.ASCII)


def collection_name_problem(name: str) -> str | None:
    """What is wrong with ``name`` as a collection name (one line), or None if it is valid."""
    if _COLLECTION_NAME.fullmatch(name):
        return None
    shown = name if len(name) <= 80 else name[:77] + "..."
    return f"collection name {shown!r} is not valid: use {COLLECTION_NAME_RULE}"


def check_collection_name(name: str) -> str:
    """``name``, if it is a valid collection name.

    Raises:
        InvalidCollectionNameError: it is not (HTTP 400).
    """
    problem = collection_name_problem(name)
    if problem is not None:
        raise InvalidCollectionNameError(problem)
    return name
