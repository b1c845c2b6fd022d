"""Copying a collection point by point between engines, or within one: nothing re-embedded.

`Store.copy` uses it to give a collection its keyword side (`Store.add_keyword_index`), and
`citeflow.store.migration` to move a store of an earlier citeflow into the embedded engine. Ids,
dense vectors and payloads are copied as they are; a point without a BM25 vector gets one
computed from its text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import islice

from llama_index.core.schema import MetadataMode

from citeflow.bm25 import BM25Encoder
from citeflow.store.client import ClientEngine
from citeflow.store.edge import EdgeEngine
from citeflow.store.engine import Point, Record
from citeflow.store.records import to_node

#: the engines a `Store` runs on (the operations they share: `citeflow.store.engine`)
Engine = ClientEngine | EdgeEngine
#: points read and written per engine call when copying a collection
COPY_BATCH = 256


def pages(engine: Engine, collection: str) -> Iterator[list[Record]]:
    """Every point of ``collection`` with its payload and vectors, `COPY_BATCH` at a time."""
    records = engine.scroll(collection, None, True, vectors=True, page=COPY_BATCH)
    while batch := list(islice(records, COPY_BATCH)):
        yield batch


def copy_points(
    source: Engine,
    source_collection: str,
    target: Engine,
    target_collection: str,
    encoder: BM25Encoder | None,
    *,
    on_batch: Callable[[int], None] | None = None,
) -> None:
    """Copy every point of ``source_collection`` into ``target_collection`` (hybrid layout,
    created on the first batch), nothing re-embedded; BM25 vectors computed from the text by
    ``encoder`` where a point has none. ``on_batch`` hears how many points each batch held."""
    for batch in pages(source, source_collection):
        first = batch[0].dense
        if first is None:
            raise ValueError(f"collection {source_collection!r} has points without a dense vector")
        if not target.exists(target_collection):
            target.create(target_collection, len(first))
        out = []
        for record in batch:
            sparse = record.sparse
            if (sparse is None or not sparse.indices) and encoder is not None:
                node = to_node(record.id, record.payload)
                sparse = encoder.encode_document(node.get_content(MetadataMode.EMBED))
            assert record.dense is not None
            out.append(Point(record.id, record.dense, sparse, record.payload))
        target.upsert(target_collection, out)
        if on_batch is not None:
            on_batch(len(out))
