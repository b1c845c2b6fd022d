"""The embedded store at 10,000, 100,000 and 1,000,000 chunks: the previous store beside this one.
It is longer than 400 lines because its workers live in this same script: each runs in a fresh
process, on this checkout's store or on an old commit's, from one file.

Synthetic chunks shaped like citeflow's: 384-d vectors clustered as sentence embeddings are (200
centres plus noise, normalised), ~600-character texts drawn from a Zipfian vocabulary with their
BM25 vectors (`citeflow.bm25`), and the payload citeflow's ingestion writes (LlamaIndex node
content, file path and name, title, doc id, content hash, chunk count and index). Everything
goes through `citeflow.store.Store`, as citeflow uses it.

* **new**: this checkout's store (qdrant-edge, `src/citeflow/store/edge.py`);
* **old**: the store of commit ``--old-ref`` (qdrant-client's local mode plus citeflow's numpy
  index), run from ``git archive`` of that commit. Measured up to 100,000 chunks: at 1,000,000
  it would hold every point in Python (over 40 GB at the 4.2 GB per 100,000 measured).

Each cell runs in fresh processes, so peak memory is the process's own: ``VmHWM`` (all resident
pages, the store's memory-mapped files included) and the peak of ``RssAnon`` (the memory the
process itself holds; mapped file pages are page cache the kernel can drop):

1. ingest: chunks written in batches of 256 by ``Store.add`` (generation not timed), then for
   the new store ``Store.optimize`` (the HNSW build ``citeflow ingest`` runs at its end);
2. serve: a new process opens the store and answers a first hybrid search (the reopen cost every
   ``citeflow ask`` pays), then ``--queries`` dense and hybrid top-10 searches: dense = the
   dense side plus ``Store.nodes`` of the top 10; hybrid = both sides in one round trip, citeflow's
   relative fusion, ``Store.nodes`` of the fused top 10; then the hybrid searches again while
   another thread writes new chunks in batches of 64 (documents arriving through the API: no
   index is built while serving, and these stay unindexed until the next ``citeflow ingest``
   or ``citeflow optimize``);
3. recall (new store, before serving): dense top-10 ids against an exact search over the same
   vectors.

With ``--memory-limit MB`` every worker runs in a memory cgroup of that size (cgroup v2 or
v1; root needed), as a container limit would hold it: the kernel then reclaims the mapped file
pages it needs to, and a worker that needs more anonymous memory than the limit is killed
(the cell reports it).

    .venv/bin/python bench/store_scale.py [--sizes 10000,100000,1000000] [--stores old,new]
        [--old-ref 3b14540] [--queries 200] [--dir DIR] [--memory-limit MB]

One file of about 470 lines on purpose: each cell re-runs this script as its worker process
(``--worker``), against either tree's store, so the workers live beside the driver.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from common import ROOT, proc_status_kb

COLLECTION = "scale"
DIM = 384
BATCH = 256
CENTRES = 200
VOCABULARY = 5_000
WORDS_PER_CHUNK = 90
SEED = 20261124

#: the issue's targets on a 2-core machine
TARGETS = {
    100_000: "reopen ≤ 1 s, hybrid p50 ≤ 10 ms, ≥ 5,000 upserts/s, peak ≤ 1 GB",
    1_000_000: "hybrid p50 ≤ 30 ms",
}


# --- synthetic chunks ------------------------------------------------------------------------
def _vocabulary() -> list[str]:
    rng = np.random.default_rng(SEED)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    lengths = rng.integers(3, 11, VOCABULARY)
    return ["".join(rng.choice(letters, n)) for n in lengths]


def _centres() -> npt.NDArray[np.float32]:
    rng = np.random.default_rng([SEED, 1])
    centres = rng.standard_normal((CENTRES, DIM)).astype(np.float32)
    return centres / np.linalg.norm(centres, axis=1, keepdims=True)


def batch_vectors(batch: int, size: int, centres: npt.NDArray[np.float32]) -> Any:
    """The vectors of batch ``batch`` (``size`` chunks), the same in every process."""
    rng = np.random.default_rng([SEED, 2, batch])
    picks = rng.integers(0, CENTRES, size)
    vectors = centres[picks] + 0.6 * rng.standard_normal((size, DIM)).astype(np.float32) / 20
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def batch_texts(batch: int, size: int, words: list[str]) -> list[str]:
    rng = np.random.default_rng([SEED, 3, batch])
    ranks = np.minimum(rng.zipf(1.2, (size, WORDS_PER_CHUNK)), VOCABULARY) - 1
    return [" ".join(words[r] for r in row) for row in ranks]


def point_id(index: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"citeflow-scale-{index}"))


def batches(n: int) -> Iterator[tuple[int, int]]:
    for batch, start in enumerate(range(0, n, BATCH)):
        yield batch, min(BATCH, n - start)


# --- workers (run with PYTHONPATH at the store's source) --------------------------------------
def _peak_mb() -> float:
    return proc_status_kb("self", "VmHWM").get("VmHWM", float("nan")) / 1024


def make_batch(batch: int, size: int, words: list[str], centres: Any, encoder: Any) -> Any:
    """Batch ``batch`` as LlamaIndex nodes with their BM25 vectors."""
    from llama_index.core.schema import TextNode

    vectors = batch_vectors(batch, size, centres)
    texts = batch_texts(batch, size, words)
    nodes = []
    for i in range(size):
        index = batch * BATCH + i
        doc = index // 20
        node = TextNode(
            id_=point_id(index),
            text=texts[i],
            embedding=vectors[i].tolist(),
            metadata={
                "file_path": f"/srv/handbook/section-{doc // 50}/page-{doc}.md",
                "file_name": f"page-{doc}.md",
                "title": f"Handbook page {doc}",
                "doc_id": hashlib.sha1(f"doc-{doc}".encode()).hexdigest(),
                "content_hash": hashlib.sha256(f"doc-{doc}".encode()).hexdigest(),
                "chunk_count": 20,
                "chunk_index": index % 20,
            },
        )
        nodes.append(node)
    return nodes, encoder.encode_documents(texts)


def worker_ingest(path: str, n: int) -> dict[str, Any]:
    from citeflow.bm25 import BM25Encoder
    from citeflow.store import Store

    words, centres, encoder = _vocabulary(), _centres(), BM25Encoder()
    store = Store.open_path(path)
    writing = 0.0
    for batch, size in batches(n):
        nodes, sparse = make_batch(batch, size, words, centres, encoder)
        started = time.perf_counter()
        store.add(COLLECTION, nodes, sparse)
        writing += time.perf_counter() - started
    written_peak = _peak_mb()
    optimize = None
    if hasattr(store, "optimize"):
        started = time.perf_counter()
        store.optimize(COLLECTION)
        optimize = time.perf_counter() - started
    store.close()
    return {
        "upserts_per_s": n / writing,
        "optimize_s": optimize,
        "write_peak_mb": written_peak,
        "ingest_peak_mb": _peak_mb(),
    }


def _queries(n: int, count: int) -> list[tuple[Any, str]]:
    """(vector, words) per query: a stored chunk's vector moved a little, and
    four of its words."""
    words, centres = _vocabulary(), _centres()
    rng = np.random.default_rng([SEED, 4])
    found = []
    for index in rng.integers(0, n, count):
        batch, offset = divmod(int(index), BATCH)
        size = min(BATCH, n - batch * BATCH)
        vector = batch_vectors(batch, size, centres)[offset]
        vector = vector + 0.02 * rng.standard_normal(DIM).astype(np.float32)
        text = batch_texts(batch, size, words)[offset].split()
        picked = " ".join(text[j] for j in rng.integers(0, len(text), 4))
        found.append((vector / np.linalg.norm(vector), picked))
    return found


def worker_serve(path: str, n: int, count: int) -> dict[str, Any]:
    from citeflow.bm25 import BM25Encoder
    from citeflow.query.fusion import fuse
    from citeflow.store import Store

    encoder = BM25Encoder()
    queries = [(v.tolist(), encoder.encode_query(t)) for v, t in _queries(n, count + 1)]

    def hybrid(store: Any, dense: list[float], sparse: Any) -> None:
        hits = store.search(COLLECTION, dense=dense, sparse=sparse, limit=10, sparse_limit=10)
        top = fuse(hits.dense, hits.sparse, mode="relative", top_k=10)
        store.nodes(COLLECTION, [key for key, _ in top])

    def dense_only(store: Any, dense: list[float], sparse: Any) -> None:
        hits = store.search(COLLECTION, dense=dense, limit=10)
        store.nodes(COLLECTION, [c.id for c in hits.dense])

    def ms(run: Callable[..., None], *args: Any) -> float:
        """The milliseconds of ``run(*args)``: one search."""
        started = time.perf_counter()
        run(*args)
        return (time.perf_counter() - started) * 1000

    started = time.perf_counter()
    store = Store.open_path(path)
    hybrid(store, *queries[0])
    reopen = time.perf_counter() - started
    timings: dict[str, list[float]] = {"dense": [], "hybrid": []}
    for dense, sparse in queries[1:]:
        for name, run in (("dense", dense_only), ("hybrid", hybrid)):
            timings[name].append(ms(run, store, dense, sparse))
    serve_peak = _peak_mb()
    # documents arriving through the API while questions are answered: another thread adds
    # chunks in batches of 64 (as uploads do) during a second round of hybrid searches
    words, centres = _vocabulary(), _centres()
    extra = max(BATCH, min(10_000, n // 10))
    first = n // BATCH + 1
    arriving = [make_batch(first + b, 64, words, centres, encoder) for b in range(extra // 64)]
    stop = threading.Event()

    def upload() -> None:
        for nodes, sparse in arriving:
            if stop.is_set():
                return
            store.add(COLLECTION, nodes, sparse)

    writer = threading.Thread(target=upload)
    writer.start()
    during = [ms(hybrid, store, dense, sparse) for dense, sparse in queries[1:]]
    stop.set()
    writer.join()
    store.close()
    out: dict[str, Any] = {"reopen_s": reopen, "serve_peak_mb": serve_peak}
    for name, values in (*timings.items(), ("writing", during)):
        out[f"{name}_p50"] = statistics.median(values)
        out[f"{name}_p95"] = statistics.quantiles(values, n=20)[-1]
    out["writing_max"] = max(during)
    return out


def worker_recall(path: str, n: int, count: int) -> dict[str, Any]:
    from citeflow.store import Store

    centres = _centres()
    queries = _queries(n, count)
    matrix = np.stack([v for v, _ in queries]).astype(np.float32)
    best_scores = np.full((count, 10), -np.inf, dtype=np.float32)
    best_ids = np.zeros((count, 10), dtype=np.int64)
    for batch, size in batches(n):
        scores = matrix @ batch_vectors(batch, size, centres).T
        ids = np.arange(batch * BATCH, batch * BATCH + size)
        merged = np.concatenate([best_scores, scores], axis=1)
        merged_ids = np.concatenate([best_ids, np.broadcast_to(ids, (count, size))], axis=1)
        keep = np.argsort(-merged, axis=1)[:, :10]
        best_scores = np.take_along_axis(merged, keep, axis=1)
        best_ids = np.take_along_axis(merged_ids, keep, axis=1)
    store = Store.open_path(path)
    found = 0
    for q, (vector, _) in enumerate(queries):
        hits = store.search(COLLECTION, dense=vector.tolist(), limit=10)
        exact = {point_id(int(i)) for i in best_ids[q]}
        found += len(exact & {c.id for c in hits.dense})
    store.close()
    return {"dense_recall_at_10": found / (10 * count)}


# --- driver ----------------------------------------------------------------------------------
class MemoryLimit:
    """A memory cgroup of ``mb`` MiB that workers start in (v2 ``memory.max`` where the memory
    controller is on the unified hierarchy, else v1 ``memory.limit_in_bytes``)."""

    def __init__(self, mb: int) -> None:
        self.mb = mb
        name = f"citeflow-store-scale-{os.getpid()}"
        v2, v1 = Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/memory")
        controllers = v2 / "cgroup.controllers"
        if controllers.is_file() and "memory" in controllers.read_text().split():
            self.path, limit = v2 / name, "memory.max"
        elif v1.is_dir():
            self.path, limit = v1 / name, "memory.limit_in_bytes"
        else:
            raise SystemExit("--memory-limit: no memory cgroup here (cgroup v1 or v2 needed)")
        try:
            self.path.mkdir(exist_ok=True)
            (self.path / limit).write_text(str(mb * 1024 * 1024))
        except OSError as exc:
            message = f"--memory-limit: cannot create a memory cgroup ({exc}); run as root"
            raise SystemExit(message) from None

    def enter(self) -> None:
        """Move the calling process (a worker between fork and exec) into the cgroup."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def remove(self) -> None:
        self.path.rmdir()


def _run(src: Path, kind: str, *values: object, limit: MemoryLimit | None = None) -> dict[str, Any]:
    """Run the worker ``kind`` on ``values`` (its path and numbers); its JSON result plus
    ``anon_peak_mb``, the peak of its anonymous memory (``RssAnon``, sampled every 50 ms from
    outside: the store's memory-mapped files count in ``VmHWM`` as page cache the kernel can drop,
    which this leaves out)."""
    args = (kind, *map(str, values))
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONWARNINGS": "ignore"}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", *args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(
            command, env=env, stdout=out, stderr=err, preexec_fn=limit.enter if limit else None
        )
        anon = 0
        while child.poll() is None:
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # it just exited
                anon = max(anon, proc_status_kb(child.pid, "RssAnon").get("RssAnon", 0))
            time.sleep(0.05)
        out.seek(0)
        err.seek(0)
        if child.returncode == -9 and limit is not None:
            raise WorkerKilled(f"{args[0]} killed under the {limit.mb} MiB limit")
        if child.returncode != 0:
            raise RuntimeError(f"worker {args} failed:\n{err.read().decode()[-3000:]}")
        result: dict[str, Any] = json.loads(out.read().decode().strip().splitlines()[-1])
    result[f"{args[0]}_anon_peak_mb"] = anon / 1024
    return result


class WorkerKilled(RuntimeError):
    """A worker was killed by the memory cgroup's limit."""


def _disk_mb(path: Path) -> float:
    du = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True)
    return int(du.stdout.split()[0]) / 1024


def _old_source(ref: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "src"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "src"


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--stores", default="old,new")
    parser.add_argument("--old-ref", default="3b14540")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--recall-queries", type=int, default=50)
    parser.add_argument("--old-max", type=int, default=100_000)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--memory-limit", type=int, default=None, metavar="MB")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        kind, path, *rest = args.worker
        numbers = [int(x) for x in rest]
        work = {"ingest": worker_ingest, "serve": worker_serve, "recall": worker_recall}[kind]
        print(json.dumps(work(path, *numbers)))
        return 0

    sizes = [int(s) for s in args.sizes.split(",")]
    stores = args.stores.split(",")
    base = Path(tempfile.mkdtemp(prefix="store-scale-", dir=args.dir))
    sources = {"new": ROOT / "src"}
    if "old" in stores:
        (base / "old-src").mkdir()
        sources["old"] = _old_source(args.old_ref, base / "old-src")
    limit = MemoryLimit(args.memory_limit) if args.memory_limit else None
    rows: list[dict[str, Any]] = []
    try:
        for n in sizes:
            for name in stores:
                if name == "old" and n > args.old_max:
                    rows.append({"store": name, "n": n, "skipped": True})
                    continue
                path = base / f"{name}-{n}"
                run = partial(_run, sources[name], limit=limit)
                print(f"{name} {n:,}: ingesting", file=sys.stderr, flush=True)
                started = time.perf_counter()
                row: dict[str, Any] = {"store": name, "n": n}
                try:
                    row |= run("ingest", path, n)
                    row["disk_mb"] = _disk_mb(path)
                    if name == "new":  # before serving, which adds chunks
                        row |= run("recall", path, n, args.recall_queries)
                    print(f"{name} {n:,}: serving", file=sys.stderr, flush=True)
                    row |= run("serve", path, n, args.queries)
                except WorkerKilled as killed:
                    row["killed"] = str(killed)
                row["cell_s"] = time.perf_counter() - started
                print(f"{name} {n:,}: {json.dumps(row)}", file=sys.stderr, flush=True)
                rows.append(row)
                shutil.rmtree(path, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        if limit is not None:
            limit.remove()
    _print_table(rows, args)
    return 0


#: the table's columns after chunks and store: heading, then (row key, decimals) of its figures
COLUMNS: list[tuple[str, list[tuple[str, int]]]] = [
    ("upserts/s", [("upserts_per_s", 0)]),
    ("index build s", [("optimize_s", 1)]),
    ("reopen + first search s", [("reopen_s", 2)]),
    ("dense p50 / p95 ms", [("dense_p50", 2), ("dense_p95", 2)]),
    ("hybrid p50 / p95 ms", [("hybrid_p50", 2), ("hybrid_p95", 2)]),
    (
        "hybrid while writing p50 / p95 / max ms",
        [("writing_p50", 2), ("writing_p95", 2), ("writing_max", 1)],
    ),
    ("dense recall@10", [("dense_recall_at_10", 3)]),
    ("peak MB ingest / serve (RSS)", [("ingest_peak_mb", 0), ("serve_peak_mb", 0)]),
    ("peak MB ingest / serve (anonymous)", [("ingest_anon_peak_mb", 0), ("serve_anon_peak_mb", 0)]),
    ("disk MB", [("disk_mb", 0)]),
]


def _print_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    cgroup = (
        f", every worker in a {args.memory_limit} MiB memory cgroup" if args.memory_limit else ""
    )
    print(
        f"\nstore_scale: {os.cpu_count()} cores, {args.queries} queries per cell, "
        f"old = {args.old_ref}, new = this checkout{cgroup}\n"
    )
    headings = ["chunks", "store", *(heading for heading, _ in COLUMNS)]
    print("| " + " | ".join(headings) + " |")
    print("|" + " --- |" * len(headings))
    for row in rows:
        cell = f"| {row['n']:,} | {row['store']} |"
        if row.get("skipped"):
            print(f"{cell} not run: it holds every point in memory |" + " |" * 7)
        elif row.get("killed"):
            print(f"{cell} {row['killed']} |" + " |" * 9)
        else:
            figures = [" / ".join(_fmt(row.get(k), d) for k, d in keys) for _, keys in COLUMNS]
            print(f"{cell} " + " | ".join(figures) + " |")
    print()
    for n, target in TARGETS.items():
        print(f"target at {n:,}: {target}")


if __name__ == "__main__":
    raise SystemExit(main())
