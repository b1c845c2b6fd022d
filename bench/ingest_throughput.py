"""Ingestion throughput against the embedder's raw encode throughput, on the same texts.

SciFact's abstracts (BEIR, ../shared/data/scifact) go through citeflow's ingestion into an
embedded on-disk Qdrant with the real local embedder (all-MiniLM-L6-v2, CPU), BM25 sparse
vectors included; the same chunk texts are also encoded by the embedder alone.

The corpus is taken in slices (``--slice``, 250 documents): each slice is encoded raw and ingested
(one ``ingest_documents`` call into the growing collection), in alternating order, so that drifts
of the machine's speed (other load, frequency, steal) hit both sides alike; single whole-corpus
runs measured here varied by ±5% from one run to the next, more than the difference being
measured. The ratio is the sum of raw time over the sum of ingestion time; the spread of the
per-slice ratios is printed too. Each slice being a separate ingestion, its last batch write is not
overlapped with embedding, which the figure includes.
With --baseline, LlamaIndex's `VectorStoreIndex` is timed too, over qdrant-client's local mode
(its `QdrantVectorStore` speaks qdrant-client only, not the embedded engine).

    .venv/bin/python bench/ingest_throughput.py [--limit 5183] [--slice 250] [--repeats 1]
        [--baseline]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from contextlib import closing
from itertools import islice

from llama_index.core.schema import Document, MetadataMode

from citeflow.evaluation.dataset import load_beir
from citeflow.ingestion.pipeline import Ingestor
from citeflow.providers.embeddings import build_embed_model
from citeflow.settings import Settings
from citeflow.store import Store
from common import SCIFACT


def load(limit: int | None) -> list[Document]:
    abstracts = islice(load_beir(SCIFACT, evidence=False).corpus.values(), limit or None)
    return [Document(id_=a.id, text=a.text, metadata={"title": a.title}) for a in abstracts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="first N abstracts (all: 5,183)")
    parser.add_argument("--repeats", type=int, default=1, help="passes over the corpus")
    parser.add_argument("--baseline", action="store_true", help="also time VectorStoreIndex")
    parser.add_argument(
        "--slice", type=int, default=250, help="documents per paired slice (0: one slice)"
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore")

    settings = Settings(_env_file=None)
    embed = build_embed_model(settings)
    docs = load(args.limit)
    scratch = Store.open_path(":memory:")
    nodes = Ingestor(scratch, embed, collection="x", progress=False).chunk_documents(docs)
    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    embed.get_text_embedding_batch(texts[:512])  # warm-up (the first calls run slower)
    print(f"{len(docs)} documents, {len(texts)} chunks, embed batch {embed.embed_batch_size}")

    # Raw encoding and ingestion alternate slice by slice (which goes first flips every slice).
    size = args.slice or len(docs)
    slices = [docs[i : i + size] for i in range(0, len(docs), size)]
    by_doc: dict[str, list[str]] = {}
    for node, text in zip(nodes, texts, strict=True):
        by_doc.setdefault(node.metadata["doc_id"], []).append(text)
    slice_texts = [[t for d in part for t in by_doc.get(d.doc_id, [])] for part in slices]
    raw, ours, base, pairs = [], [], [], []
    for run in range(args.repeats):
        raw_s = ours_s = 0.0
        with tempfile.TemporaryDirectory() as tmp, closing(Store.open_path(tmp)) as store:
            ingestor = Ingestor(store, embed, collection="scifact", progress=False)
            for i, (part, part_texts) in enumerate(zip(slices, slice_texts, strict=True)):
                took = {}
                for side in ("raw", "ours") if (i + run) % 2 == 0 else ("ours", "raw"):
                    started = time.perf_counter()
                    if side == "raw":
                        embed.get_text_embedding_batch(part_texts)
                    else:
                        ingestor.ingest_documents(part)
                    took[side] = time.perf_counter() - started
                raw_s += took["raw"]
                ours_s += took["ours"]
                pairs.append(took["raw"] / took["ours"])
            assert store.count("scifact") == len(texts)
        raw.append(raw_s)
        ours.append(ours_s)
        if args.baseline:
            base.append(baseline(docs, embed, settings))
        print(
            f"pass {run + 1}: raw {raw[-1]:.1f}s, citeflow {ours[-1]:.1f}s "
            f"({raw[-1] / ours[-1]:.3f} of raw)"
            + (f", VectorStoreIndex {base[-1]:.1f}s" if base else "")
        )

    if len(pairs) > 1:
        q1, q2, q3 = statistics.quantiles(pairs, n=4)
        print(
            f"per-slice ratios ({len(pairs)} slices): median {q2:.3f}, "
            f"quartiles {q1:.3f}-{q3:.3f}, range {min(pairs):.3f}-{max(pairs):.3f}"
        )
    n = len(docs)
    r, o = sum(raw), sum(ours)
    print(f"\n{'':28s}{'docs/s':>9s}{'chunks/s':>10s}{'of raw':>8s}")
    print(f"{'embedder raw encode':28s}{n / r:9.1f}{len(texts) / r:10.1f}{1.0:8.3f}")
    print(f"{'citeflow ingest':28s}{n / o:9.1f}{len(texts) / o:10.1f}{r / o:8.3f}")
    if base:
        b = sum(base)
        print(f"{'LlamaIndex VectorStoreIndex':28s}{n / b:9.1f}{len(texts) / b:10.1f}{r / b:8.3f}")
    print(f"totals over {args.repeats} pass(es); target: citeflow >= 0.98 of raw")


def baseline(docs: list[Document], embed: object, settings: Settings) -> float:
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient

    with tempfile.TemporaryDirectory() as tmp, closing(QdrantClient(path=tmp)) as client:
        vector_store = QdrantVectorStore(collection_name="base", client=client)
        context = StorageContext.from_defaults(vector_store=vector_store)
        started = time.perf_counter()
        VectorStoreIndex.from_documents(
            docs,
            storage_context=context,
            embed_model=embed,  # type: ignore[arg-type]
            transformations=[SentenceSplitter(chunk_size=512, chunk_overlap=64)],
        )
        return time.perf_counter() - started


if __name__ == "__main__":
    main()
