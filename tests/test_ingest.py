"""Ingestion: idempotent re-ingest, replacement, prune, corrupt files, metadata, store locking."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.schema import Document, MetadataMode

from citeflow.errors import StoreLockedError
from citeflow.ingestion.pipeline import Ingestor, doc_id_for, file_hash
from citeflow.knowledge_base import KnowledgeBase
from citeflow.settings import Settings
from citeflow.store import Store
from citeflow.testing.embedding import HashEmbedding, RecordingEmbedding
from tests.conftest import SHARED_DATA, open_kb, stored_points
from tests.store_helpers import small_ingestor


def _payloads(kb: KnowledgeBase) -> list[dict[str, object]]:
    return [r.payload for r in stored_points(kb.store, kb.collection)]


def _small(store: Store, embed: HashEmbedding | None = None, **options: Any) -> Ingestor:
    """An ingestor into collection "c" of small chunks, in windows and pools of two."""
    return small_ingestor(store, embed, window=2, pool=2, **options)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    (docs / "nested").mkdir(parents=True)
    (docs / "a.md").write_text("# Alpha notes\n\nAlpha is the first letter. " * 30)
    (docs / "nested" / "b.txt").write_text("Bravo is the second letter of the alphabet. " * 40)
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4\n this is not really a pdf")
    (docs / "notes.xyz").write_text("unsupported")
    return docs


@pytest.fixture
def disk_kb(settings: Settings) -> Iterator[KnowledgeBase]:
    with closing(open_kb(settings)) as kb:
        yield kb


def test_ingest_reports_and_skips_corrupt_files(disk_kb: KnowledgeBase, folder: Path) -> None:
    report = disk_kb.ingest([folder], progress=False)
    assert report.files == 3  # a.md, b.txt, broken.pdf; notes.xyz is not supported
    assert report.documents_added == 2
    assert [Path(p).name for p, _ in report.failed] == ["broken.pdf"]
    assert "broken.pdf" in report.failed[0][1]
    assert any(Path(p).name == "notes.xyz" for p, _ in report.skipped)
    assert report.chunks == disk_kb.count() > 2
    summary = report.summary()
    assert "2 added" in summary and "1 failed" in summary and "broken.pdf" in summary
    names = {p["file_name"] for p in _payloads(disk_kb)}
    assert names == {"a.md", "b.txt"}


def test_reingest_unchanged_does_nothing(disk_kb: KnowledgeBase, folder: Path) -> None:
    first = disk_kb.ingest([folder], progress=False)
    ids_before = {p["_node_content"] for p in _payloads(disk_kb)}
    second = disk_kb.ingest([folder], progress=False)
    assert second.unchanged == 2 and second.chunks == 0 and second.documents_added == 0
    assert disk_kb.count() == first.chunks
    ids_after = {p["_node_content"] for p in _payloads(disk_kb)}
    assert ids_before == ids_after


def test_changed_file_replaces_its_chunks(disk_kb: KnowledgeBase, folder: Path) -> None:
    disk_kb.ingest([folder], progress=False)
    (folder / "a.md").write_text("# Alpha notes\n\nAlpha was rewritten entirely. Short now.")
    report = disk_kb.ingest([folder], progress=False)
    assert report.replaced == 1 and report.unchanged == 1
    alpha = [p for p in _payloads(disk_kb) if p["file_name"] == "a.md"]
    assert len(alpha) == 1 and "rewritten entirely" in str(alpha[0]["_node_content"])
    assert len({p["content_hash"] for p in alpha}) == 1


def test_a_change_of_chunk_size_cuts_every_document_again(
    disk_kb: KnowledgeBase, folder: Path
) -> None:
    first = disk_kb.ingest([folder], progress=False)
    before = {r.file_name: r.content_hash for r in disk_kb.documents()}
    at_default = Ingestor(disk_kb.store, disk_kb.embed_model, collection="c", progress=False)
    digest = file_hash(folder / "a.md")
    assert at_default.version(digest) == digest  # what stores written before it counted hold
    assert before["a.md"] == disk_kb.ingestor().version(digest) != digest
    finer = small_ingestor(disk_kb.store, disk_kb.embed_model, disk_kb.collection)
    report = finer.ingest_paths([folder])
    assert report.replaced == 2 and report.unchanged == 0 and report.chunks > first.chunks
    assert disk_kb.count() == report.chunks  # the chunks of the old size are gone
    assert finer.ingest_paths([folder]).unchanged == 2
    assert disk_kb.ingest([folder], progress=False).replaced == 2
    assert {r.file_name: r.content_hash for r in disk_kb.documents()} == before


def test_prune_removes_documents_whose_files_are_gone(disk_kb: KnowledgeBase, folder: Path) -> None:
    disk_kb.ingest([folder], progress=False)
    (folder / "nested" / "b.txt").unlink()
    report = disk_kb.ingest([folder], prune=True, progress=False)
    assert report.removed == 1
    assert {d.file_name for d in disk_kb.documents()} == {"a.md"}


def test_delete_by_path(disk_kb: KnowledgeBase, folder: Path) -> None:
    disk_kb.ingest([folder], progress=False)
    assert disk_kb.delete([folder / "a.md"]) == 1
    assert {d.file_name for d in disk_kb.documents()} == {"b.txt"}
    assert disk_kb.delete([folder / "a.md"]) == 0


def test_chunks_keep_file_metadata_and_stable_ids(disk_kb: KnowledgeBase, folder: Path) -> None:
    disk_kb.ingest([folder], progress=False)
    for payload in _payloads(disk_kb):
        assert payload["doc_id"] == doc_id_for(Path(str(payload["file_path"])))
        assert payload["title"]
        assert payload["file_name"] in ("a.md", "b.txt")
    titles = {p["file_name"]: p["title"] for p in _payloads(disk_kb)}
    assert titles["a.md"] == "Alpha notes"


def test_data_survives_reopening(settings: Settings, folder: Path) -> None:
    with closing(open_kb(settings)) as kb:
        count = kb.ingest([folder], progress=False).chunks
    with closing(open_kb(settings)) as again:
        assert again.count() == count
        assert again.ingest([folder], progress=False).unchanged == 2


def test_second_process_on_embedded_store_gets_clear_error(settings: Settings) -> None:
    first = Store.open(settings.store)
    with closing(first), pytest.raises(StoreLockedError, match="citeflow serve"):
        Store.open(settings.store)


@pytest.mark.skipif(not (SHARED_DATA / "docs").is_dir(), reason="../shared/data/docs not present")
def test_mixed_formats_from_shared_docs(disk_kb: KnowledgeBase, tmp_path: Path) -> None:
    docs = tmp_path / "shared-docs"
    shutil.copytree(SHARED_DATA / "docs", docs)
    report = disk_kb.ingest([docs], progress=False)
    assert report.documents_added >= 10
    payloads = _payloads(disk_kb)
    types = {str(p["file_name"]).rsplit(".", 1)[-1] for p in payloads}
    assert {"pdf", "docx", "html", "md"} <= types
    pages = {p.get("page_label") for p in payloads if p["file_name"] == "multi_page.pdf"}
    assert len(pages) > 1


@pytest.mark.parametrize("overlap", [True, False])
def test_pools_are_embedded_in_length_order_and_every_chunk_keeps_its_own_vector(
    folder: Path, store: Store, overlap: bool
) -> None:
    """Small pools and windows: several length-sorted pools, written in series or by the writer
    thread; every stored chunk has the vector of its own text."""
    embed = RecordingEmbedding(dim=32, embed_batch_size=2)
    ingestor = small_ingestor(store, embed, "w", window=2, pool=6, overlap_writes=overlap)
    report = ingestor.ingest_paths([folder])
    assert report.chunks > 12 and store.count("w") == report.chunks
    assert sum(len(b) for b in embed.batches) == report.chunks
    for start in range(0, len(embed.batches), 3):  # 3 windows of 2 make a pool of 6
        pool = [t for b in embed.batches[start : start + 3] for t in b]
        assert [len(t) for t in pool] == sorted(len(t) for t in pool)
    points = stored_points(store, "w")
    nodes = store.nodes("w", [p.id for p in points])
    for point in points:
        text = nodes[point.id].get_content(metadata_mode=MetadataMode.EMBED)
        assert point.dense is not None
        assert list(point.dense) == pytest.approx(embed.get_text_embedding(text), abs=1e-6)


def test_a_document_cut_short_is_written_again_not_taken_as_unchanged(folder: Path) -> None:
    """An ingestion that dies midway leaves a document with some of its chunks; the next run
    sees that (each chunk records its document's chunk count) and writes it whole."""
    store = Store.open_path(":memory:")
    shutil.rmtree(folder / "nested")
    (folder / "broken.pdf").unlink()
    dying = RecordingEmbedding(dim=32, embed_batch_size=2, fail_on_batch=2)
    with pytest.raises(RuntimeError, match="embedder died"):
        _small(store, dying, overlap_writes=False).ingest_paths([folder])
    [record] = store.documents("c").values()
    assert 0 < record.chunks < record.expected_chunks  # type: ignore[operator]
    assert not record.complete and record.unfinished
    assert record.stored == f"{record.chunks} of {record.expected_chunks}"
    doc_id = doc_id_for(folder / "a.md")
    assert store.content_hashes("c", [doc_id]) == {doc_id: ""}
    stored = {p.id for p in stored_points(store, "c")}
    assert store.incomplete_points("c") == stored  # every chunk written so far is marked

    report = _small(store).ingest_paths([folder])
    assert (report.unchanged, report.replaced) == (0, 1)
    [record] = store.documents("c").values()
    assert record.complete and record.chunks == record.expected_chunks == report.chunks
    assert store.count("c") == report.chunks and not store.incomplete_points("c")
    again = _small(store).ingest_paths([folder])
    assert again.unchanged == 1 and again.chunks == 0


GEESE = "Geese migrate south in large V-shaped flocks every autumn. " * 40
DUCKS = "Ducks paddle on ponds and eat pond weed. " * 3


def _search_ids(store: Store, collection: str, text: str) -> set[str]:
    """The ids of every chunk a dense and a BM25 search for ``text`` find."""
    from citeflow.bm25 import BM25Encoder

    hits = store.search(
        collection,
        dense=HashEmbedding(dim=32).get_query_embedding(text),
        sparse=BM25Encoder().encode_query(text),
        limit=100,
        sparse_vectors=True,
    )
    assert set(hits.vectors) <= {c.id for c in hits.sparse}
    return {c.id for c in hits.dense} | {c.id for c in hits.sparse}


def _doc_ids(store: Store, collection: str, ids: set[str]) -> set[str]:
    return {str(n.metadata["doc_id"]) for n in store.nodes(collection, sorted(ids)).values()}


def test_chunks_of_a_write_cut_short_are_kept_out_of_searches(either_store: Store) -> None:
    """A document whose write died midway is in the store in part: no search finds those chunks
    (on the embedded engine and through a Qdrant server's API), until the document is written
    whole."""
    docs = [Document(id_="ducks", text=DUCKS), Document(id_="geese", text=GEESE)]
    _small(either_store).ingest_documents(docs[:1])
    dying = RecordingEmbedding(dim=32, embed_batch_size=2, fail_on_batch=3)
    with pytest.raises(RuntimeError, match="embedder died"):
        _small(either_store, dying).ingest_documents(docs[1:])
    assert either_store.count("c") == 1 + 3 * 2  # ducks, and three batches of geese
    geese = "Geese migrate south in V-shaped flocks"
    assert _doc_ids(either_store, "c", _search_ids(either_store, "c", geese)) == {"ducks"}
    assert not either_store.documents("c")["geese"].complete

    _small(either_store).ingest_documents(docs[1:])
    assert _doc_ids(either_store, "c", _search_ids(either_store, "c", geese)) == {"ducks", "geese"}
    assert either_store.documents("c")["geese"].complete


def test_a_replacement_cut_short_keeps_the_old_version_in_answers(folder: Path) -> None:
    """A changed file whose new version's write dies: the old version stays whole and is what
    searches find; the listing says the document is incomplete; the next run leaves the new
    version alone, whole."""
    store = Store.open_path(":memory:")
    shutil.rmtree(folder / "nested")
    (folder / "broken.pdf").unlink()
    first = _small(store).ingest_paths([folder])
    old = store.documents("c")[doc_id_for(folder / "a.md")]
    (folder / "a.md").write_text(GEESE)
    dying = RecordingEmbedding(dim=32, embed_batch_size=2, fail_on_batch=2)
    with pytest.raises(RuntimeError, match="embedder died"):
        _small(store, dying).ingest_paths([folder])
    record = store.documents("c")[old.doc_id]
    assert not record.complete and record.content_hash != old.content_hash
    assert record.chunks == 4 and record.expected_chunks is not None and record.expected_chunks > 4
    found = store.nodes("c", sorted(_search_ids(store, "c", "Alpha is the first letter")))
    assert len(found) == first.chunks  # the old version, whole, and nothing of the new one
    assert {n.metadata["content_hash"] for n in found.values()} == {old.content_hash}
    assert not _search_ids(store, "c", "Geese migrate south in V-shaped flocks") - set(found)

    report = _small(store).ingest_paths([folder])
    record = store.documents("c")[old.doc_id]
    assert report.replaced == 1 and record.complete and record.content_hash != old.content_hash
    assert store.count("c") == record.chunks == record.expected_chunks == report.chunks


def test_a_document_written_over_several_calls_is_complete_after_its_last_chunk() -> None:
    """`write_nodes` in slices (as the evaluation's corpus index writes): a document whose
    chunks span two calls is found by searches only once the second call has stored the rest."""
    store = Store.open_path(":memory:")
    ingestor = _small(store)
    nodes = ingestor.chunk_documents([Document(id_="geese", text=GEESE)])
    assert len(nodes) > 4
    ingestor.write_nodes(nodes[:3])
    assert store.incomplete_points("c") == {n.node_id for n in nodes[:3]}
    assert not store.documents("c")["geese"].complete
    ingestor.write_nodes(nodes[3:])
    assert not store.incomplete_points("c")
    assert store.documents("c")["geese"].complete


def test_writes_overlap_embedding_only_for_a_remote_embedder(store: Store) -> None:
    from citeflow.providers.embeddings import CompatOpenAIEmbedding

    remote = CompatOpenAIEmbedding(model_name="m", api_key="k", api_base="http://127.0.0.1:9")
    assert Ingestor(store, remote, collection="r").overlap_writes
    assert not Ingestor(store, HashEmbedding(dim=8), collection="r").overlap_writes


def test_ingest_documents_from_python_skips_unchanged_and_replaces_changed(store: Store) -> None:
    ingestor = Ingestor(store, HashEmbedding(dim=32), collection="py", progress=False)
    docs = [
        Document(id_=f"d{i}", text=f"Document {i} is about ducks number {i}.") for i in range(3)
    ]
    assert ingestor.ingest_documents(docs) == 3
    assert store.content_hashes("py", ["d0", "d2", "nope"]).keys() == {"d0", "d2"}
    before = store.content_hashes("py", ["d1"])["d1"]

    assert ingestor.ingest_documents(docs) == 0  # unchanged: nothing embedded or written
    changed = Document(id_="d1", text="Document 1 is now about geese.")
    assert ingestor.ingest_documents([changed]) == 1
    assert store.content_hashes("py", ["d1"])["d1"] != before
    nodes = store.nodes("py", [p.id for p in stored_points(store, "py")]).values()
    texts = {str(n.metadata["doc_id"]): n.get_content() for n in nodes}
    assert texts == {
        "d0": "Document 0 is about ducks number 0.",
        "d1": "Document 1 is now about geese.",
        "d2": "Document 2 is about ducks number 2.",
    }
    assert store.count("py") == 3  # the old chunk of d1 is gone


def test_content_hashes_name_the_stored_documents_only(either_store: Store) -> None:
    ingestor = Ingestor(either_store, HashEmbedding(dim=16), collection="h", progress=False)
    ingestor.ingest_documents([Document(id_=f"d{i}", text=f"text {i} of ducks") for i in range(6)])
    either_store.delete_document("h", "d3")
    ingestor.ingest_documents([Document(id_="d4", text="a new text of geese")])
    asked = ["d0", "d3", "d4", "missing"]
    found = either_store.content_hashes("h", asked)
    assert set(found) == {"d0", "d4"}
    assert found["d4"] == either_store.documents("h")["d4"].content_hash != ""


def test_the_one_chunk_shortcut_gives_what_the_splitter_gives() -> None:
    """Documents shorter than a chunk skip the splitter; around the size limit, with short or
    long metadata, the chunks are the splitter's own."""
    from llama_index.core.node_parser import SentenceSplitter

    ingestor = Ingestor(Store.open_path(":memory:"), HashEmbedding(dim=8), collection="s")
    splitter = SentenceSplitter(chunk_size=512, chunk_overlap=64)
    sentence = "Barn owls hunt voles at night near the old mill. "
    counts = set()
    for words in range(300, 470, 6):
        text = (sentence * 60).split()[:words]
        for title in ("Owls", "A much longer title about owls " * 12):
            doc = Document(text=" ".join(text) + ".", metadata={"title": title})
            ours = [(n.get_content(), n.start_char_idx) for n in ingestor._split(doc)]
            theirs = [
                (n.get_content(), n.start_char_idx)
                for n in splitter.get_nodes_from_documents([doc])
            ]
            assert ours == theirs, (words, len(title))
            counts.add((len(title) > 4, len(ours)))
    assert counts == {(False, 1), (False, 2), (True, 1), (True, 2)}  # both sides of the limit
