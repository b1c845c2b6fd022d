"""citeflow's chunk store: `Store` over an embedded Qdrant engine or a Qdrant server.

`citeflow.store.store` is the facade the rest of citeflow uses; `citeflow.store.engine` says what
an engine does; `citeflow.store.edge` and `citeflow.store.client` are the two engines;
`citeflow.store.directory` and `citeflow.store.migration` look after the embedded directory.
"""

from citeflow.store.engine import (
    DENSE_VECTOR,
    INCOMPLETE,
    SPARSE_VECTOR,
    Candidate,
    Hits,
    Layout,
    Vector,
)
from citeflow.store.records import DOC_KEYS, DocumentRecord
from citeflow.store.store import Store

__all__ = [
    "DENSE_VECTOR",
    "DOC_KEYS",
    "INCOMPLETE",
    "SPARSE_VECTOR",
    "Candidate",
    "DocumentRecord",
    "Hits",
    "Layout",
    "Store",
    "Vector",
]
