"""Moving a store of an earlier citeflow (qdrant-client's local mode) into the embedded engine.

Earlier versions kept the embedded store as qdrant-client local-mode files (``meta.json`` and
``collection/<name>/storage.sqlite``). On first open (or ``citeflow migrate``) each collection
is copied point by point into a new shard: ids, dense vectors and payloads as they are, nothing
re-embedded; BM25 vectors copied, or computed from the chunk's text for collections written
before the keyword side existed.

Interrupted at any point, nothing is lost and the next open carries on:

* a collection is copied into ``shards/.<name>.migrating`` and renamed to ``shards/<name>`` only
  once whole, so a half copy never stands for the collection (it is started again);
* the old files are read only, and moved into ``legacy-qdrant-local/`` only after every
  collection is copied; they stay there until you delete them.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from citeflow.bm25 import BM25Encoder
from citeflow.errors import StoreUnreadableError
from citeflow.store.client import ClientEngine
from citeflow.store.copying import copy_points
from citeflow.store.directory import LEGACY_KEPT, full_disk_guard, has_legacy_store, locked_error
from citeflow.store.edge import EdgeEngine
from citeflow.store.engine import DENSE_VECTOR

if TYPE_CHECKING:
    from qdrant_client import QdrantClient

log = logging.getLogger("citeflow.store")

#: qdrant-client's local-mode files in a store directory
LEGACY_FILES = ("meta.json", "collection")


def migrate(root: Path, *, progress: bool = True) -> int:
    """Copy every collection of the earlier store in ``root`` into the embedded engine (see the
    module doc); the number of points copied. The caller holds the directory lock."""
    from qdrant_client import QdrantClient

    if not has_legacy_store(root):
        return 0
    try:
        client = QdrantClient(path=str(root))
    except RuntimeError as exc:
        if "already accessed by another instance" in str(exc):
            raise locked_error(root) from None
        raise _unreadable(root, exc) from None
    except Exception as exc:  # a damaged SQLite file or meta.json
        raise _unreadable(root, exc) from None
    source = ClientEngine(client, location=str(root))
    target = EdgeEngine(root)
    encoder = BM25Encoder()
    copied = 0
    try:
        names = source.collections()
        log.info("migrating the store %s to the embedded engine: %s", root, ", ".join(names))
        for name in names:
            if target.exists(name):  # copied by an earlier, interrupted run
                continue
            staging = f".{name}.migrating"
            total = source.count(name)
            with full_disk_guard(target.location):
                target.drop(staging)
                target.create(staging, _dimension(client, name))  # kept even if empty
                with tqdm(
                    total=total, desc=f"migrating {name}", unit="chunk", disable=not progress
                ) as bar:
                    copy_points(source, name, target, staging, encoder, on_batch=bar.update)
                target.optimize(staging)
            target.rename(staging, name)
            copied += total
    finally:
        target.close()
        source.close()
    kept = root / LEGACY_KEPT
    kept.mkdir(exist_ok=True)
    for name in LEGACY_FILES:
        if (root / name).exists():
            shutil.move(str(root / name), str(kept / name))
    log.warning(
        "migrated the store %s (%d chunks) to the embedded engine; the old files are kept in "
        "%s: delete that folder once the knowledge bases answer as before",
        root,
        copied,
        kept,
    )
    return copied


def _dimension(client: QdrantClient, collection: str) -> int:
    """The size of a collection's dense vectors (its one unnamed vector, or ``text-dense``)."""
    vectors = client.get_collection(collection).config.params.vectors
    if isinstance(vectors, dict):
        vectors = vectors.get(DENSE_VECTOR) or next(iter(vectors.values()), None)
    if vectors is None:
        raise ValueError(f"collection {collection!r} has no dense vectors")
    return vectors.size


def _unreadable(root: Path, exc: BaseException) -> StoreUnreadableError:
    return StoreUnreadableError(
        f"the store {root} was written by an earlier citeflow and cannot be read for its "
        f"migration ({exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
        "restore the directory from a backup, or set CITEFLOW_DATA_DIR to a new directory "
        "and ingest again"
    )
