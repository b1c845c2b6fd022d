"""Tests for `citeflow.ingestion.readers` against real documents and corrupt inputs."""

from __future__ import annotations

import os
import timeit
import zipfile
from pathlib import Path

import pytest
from llama_index.core.schema import Document, MetadataMode
from pypdf import PdfWriter

from citeflow.errors import IngestError
from citeflow.ingestion.readers import SUPPORTED_SUFFIXES, discover, read_file

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO.parent / "shared" / "data" / "docs"
ESSAY = REPO / "data" / "paul_graham_essay.txt"

needs_docs = pytest.mark.skipif(
    not DOCS.is_dir(), reason=f"sample documents not found at {DOCS} (shared data not mounted)"
)


def _text(documents: list[Document]) -> str:
    return "\n\n".join(document.text for document in documents)


def _read_one(path: Path) -> Document:
    [document] = read_file(path)
    return document


# --- Real documents ---------------------------------------------------------------------------


@needs_docs
def test_multi_page_pdf_has_one_document_per_page() -> None:
    documents = read_file(DOCS / "multi_page.pdf")

    assert len(documents) == 5
    assert [d.metadata["page_label"] for d in documents] == ["1", "2", "3", "4", "5"]
    assert [d.metadata["page"] for d in documents] == [1, 2, 3, 4, 5]
    assert documents[0].text.startswith("The Evolution of the Word Processor")
    for document in documents:
        assert document.metadata["title"] == "multi page"  # no PDF title: from the file stem
        assert document.metadata["file_type"] == "pdf"
        assert document.metadata["file_name"] == "multi_page.pdf"
        assert document.metadata["file_path"] == str((DOCS / "multi_page.pdf").resolve())


@needs_docs
def test_korean_pdf_keeps_hangul_and_metadata_title() -> None:
    documents = read_file(DOCS / "normal_4pages.pdf")

    assert len(documents) == 4
    assert (
        documents[0].metadata["title"]
        == "코로나-19 관련 보험약관상 재해보험금 지급문제 및 개선과제"
    )
    text = _text(documents)
    assert "세계보건기구(WHO)" in text
    assert "\ufffd" not in text


@needs_docs
@pytest.mark.parametrize(
    ("name", "pages", "phrase"),
    [
        ("2305.03393v1-pg9.pdf", 1, "Optimized Table Tokenization for Table Structure Recognition"),
        ("code_and_formula.pdf", 2, "JavaScript Code Example"),
        ("picture_classification.pdf", 2, "Figures Example"),
    ],
)
def test_other_pdfs(name: str, pages: int, phrase: str) -> None:
    documents = read_file(DOCS / name)

    assert len(documents) == pages
    assert phrase in _text(documents)


@needs_docs
def test_docx_tables_are_read_in_order_and_merged_cells_once() -> None:
    document = _read_one(DOCS / "word_tables.docx")
    text = document.text

    assert document.metadata["title"] == "Test with tables"  # first Heading 1
    assert document.metadata["file_type"] == "docx"
    assert "Header 0.0 | Header 0.1 | Header 0.2\nCell 1.0 | Cell 1.1 | Cell 1.2" in text
    # Reading order: caption paragraph, its table, then the next caption.
    assert (
        text.index("A uniform table")
        < text.index("Cell 2.2")
        < text.index("A non-uniform table with horizontal spans")
    )
    # A merged cell is written once, not once per spanned grid cell: horizontally ...
    assert "Cell 1.0 | Merged Cell 1.1 1.2 | Cell 1.3\n" in text
    assert "Merged Cell 1.1 1.2 | Merged Cell 1.1 1.2" not in text
    # ... and vertically (the row below the span does not repeat it).
    assert "Cell 1.0 | Merged Cell 1.1 2.1 | Cell 1.2\nCell 2.0 | Cell 2.2\n" in text


@needs_docs
def test_docx_headings_lists_and_table() -> None:
    document = _read_one(DOCS / "word_sample.docx")
    text = document.text

    assert document.metadata["title"] == "Swimming in the lake"  # the Title-styled paragraph
    assert "\n\nLet’s swim!\n\n" in text  # heading as its own paragraph
    assert "- You can relax and look around\n- Paddle about" in text
    assert "Leaves | Ash, Elm, Maple | 50" in text


@needs_docs
def test_docx_plain_paragraphs_and_stem_title() -> None:
    document = _read_one(DOCS / "lorem_ipsum.docx")

    assert document.metadata["title"] == "lorem ipsum"
    assert document.text.startswith("Lorem ipsum dolor sit amet")
    assert "\n\n" in document.text  # paragraphs stay separated by blank lines
    assert "\n\n\n" not in document.text


@needs_docs
def test_wikipedia_html_drops_scripts_styles_and_navigation() -> None:
    document = _read_one(DOCS / "wiki_duck.html")
    text = document.text

    assert document.metadata["title"] == "Duck - Wikipedia"
    assert document.metadata["file_type"] == "html"
    assert "Duck is the common name for numerous species of waterfowl" in text
    assert "\n\nEtymology\n\n" in text  # headings kept as paragraphs
    # <script> and <style> content.
    assert "RLQ" not in text
    assert "function(" not in text
    assert "mw-parser-output" not in text
    # Navigation, menus and the language list around the article.
    assert "Toggle the table of contents" not in text
    assert "Afrikaans" not in text


@needs_docs
def test_simple_html_headings_lists_and_table() -> None:
    document = _read_one(DOCS / "example_03.html")
    text = document.text

    assert document.metadata["title"] == "Example Document"  # no <title>: first <h1>
    assert "border-collapse" not in text
    assert "\n\nIntroduction\n\nThis is the first paragraph of the introduction." in text
    assert "- First item in unordered list\n- Nested item 1" in text
    assert "Header 1 | Header 2 | Header 3\nRow 1, Col 1 | Row 1, Col 2 | Row 1, Col 3" in text


@needs_docs
@pytest.mark.parametrize(
    ("name", "title", "phrase"),
    [
        ("duck.md", "Swimming in the lake", "I like to eat leaves"),
        ("mixed.md", "Title", "Scrooge McDuck"),
    ],
)
def test_markdown(name: str, title: str, phrase: str) -> None:
    document = _read_one(DOCS / name)

    assert document.metadata["title"] == title
    assert document.metadata["file_type"] == "md"
    assert phrase in document.text


@needs_docs
def test_every_sample_document_reads_with_text() -> None:
    files, _ = discover([DOCS])

    assert len(files) == 12
    for path in files:
        documents = read_file(path)
        assert documents
        assert all(document.text.strip() for document in documents)


@needs_docs
def test_discover_reports_license_as_unsupported() -> None:
    files, skipped = discover([DOCS])

    assert files == sorted(files)
    assert DOCS / "multi_page.pdf" in files
    assert DOCS / "LICENSE.docling-MIT" not in files
    assert skipped == [(DOCS / "LICENSE.docling-MIT", "unsupported file type (.docling-MIT)")]


# --- Sample corpus ----------------------------------------------------------------------------


@pytest.mark.skipif(not ESSAY.is_file(), reason=f"sample corpus missing: {ESSAY}")
def test_paul_graham_essay_is_one_document_and_fast() -> None:
    document = _read_one(ESSAY)
    assert document.metadata["title"] == "paul graham essay"
    assert document.metadata["file_type"] == "txt"
    assert document.text.startswith("What I Worked On\n\nFebruary 2021\n\n")
    assert "\n\n\n" not in document.text

    timings = timeit.repeat(lambda: read_file(ESSAY), "gc.enable()", repeat=5, number=1)
    assert min(timings) < 0.010, f"reading a 75 KB text file took {min(timings) * 1000:.1f} ms"


# --- Metadata visibility ----------------------------------------------------------------------


def test_bookkeeping_metadata_is_hidden_from_embedder_and_llm(tmp_path: Path) -> None:
    note = tmp_path / "release_notes-v2.md"
    note.write_text("Intro line\n\n# Release Notes\n\nBody text.\n", encoding="utf-8")

    document = read_file(note)[0]
    assert document.metadata["title"] == "Release Notes"
    embed = document.get_content(MetadataMode.EMBED)
    llm = document.get_content(MetadataMode.LLM)
    assert "title: Release Notes" in embed
    assert "release_notes-v2.md" not in embed
    assert "file_name: release_notes-v2.md" in llm
    for content in (embed, llm):
        assert str(tmp_path) not in content
        assert "file_type" not in content
    assert {"page", "page_label"} <= set(document.excluded_embed_metadata_keys)
    assert {"page", "page_label", "file_path"} <= set(document.excluded_llm_metadata_keys)


# --- Text handling ----------------------------------------------------------------------------


def test_whitespace_is_normalised_but_paragraphs_kept(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"First line  \r\nsecond line\t\r\n\r\n\r\n\r\n  indented code\n\n\nLast\n\n")

    document = read_file(path)[0]

    assert document.text == "First line\nsecond line\n\n  indented code\n\nLast"
    assert document.metadata["title"] == "notes"


def test_non_utf8_text_falls_back_instead_of_failing(tmp_path: Path) -> None:
    path = tmp_path / "legacy.txt"
    path.write_bytes("Caf\xe9 \x93quoted\x94 \x81".encode("latin-1"))

    text = read_file(path)[0].text

    assert text.startswith("Café “quoted”")


def test_utf16_text_with_bom(tmp_path: Path) -> None:
    path = tmp_path / "wide.txt"
    path.write_bytes("héllo wörld\r\nline 2".encode("utf-16"))

    assert read_file(path)[0].text == "héllo wörld\nline 2"


def test_markdown_title_ignores_code_and_uses_front_matter(tmp_path: Path) -> None:
    fenced = tmp_path / "setup-guide.md"
    fenced.write_text("```bash\n# install it\npip install x\n```\n\n# Setup Guide\n", "utf-8")
    front = tmp_path / "post.md"
    front.write_text('---\ntitle: "From Front Matter"\n---\n\n# Heading\n', "utf-8")
    plain = tmp_path / "my_notes-2024.md"
    plain.write_text("No heading here.\n", "utf-8")

    assert read_file(fenced)[0].metadata["title"] == "Setup Guide"
    assert read_file(front)[0].metadata["title"] == "From Front Matter"
    assert read_file(plain)[0].metadata["title"] == "my notes 2024"


# --- Corrupt and unreadable inputs ------------------------------------------------------------


def _assert_ingest_error(path: Path, reason: str) -> None:
    with pytest.raises(IngestError) as caught:
        read_file(path)
    message = str(caught.value)
    assert message.startswith(f"{path.name}: ")
    assert reason in message
    assert "\n" not in message
    assert "Traceback" not in message


@needs_docs
def test_truncated_pdf(tmp_path: Path) -> None:
    path = tmp_path / "truncated.pdf"
    data = (DOCS / "multi_page.pdf").read_bytes()
    path.write_bytes(data[: len(data) // 3])

    _assert_ingest_error(path, "corrupt or unreadable PDF")


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("fake.pdf", b"just some text pretending to be a PDF\n", "not a PDF file"),
        ("random.docx", os.urandom(4096), "not a valid .docx file"),
        ("blob.txt", b"PK\x03\x04\x00\x00binary\x00stuff", "binary data, not text"),
        (
            "shell.html",
            "<html><head><script>var x = 1;</script></head>"
            "<body><nav>Home | About</nav><footer>© 2024</footer></body></html>".encode(),
            "no text found",
        ),
        *[(f"empty.{kind}", b"", "empty file") for kind in ("txt", "md", "pdf", "docx", "html")],
        ("data.xlsx", b"whatever", "unsupported file type (.xlsx)"),
    ],
)
def test_unreadable_bytes(tmp_path: Path, name: str, data: bytes, reason: str) -> None:
    path = tmp_path / name
    path.write_bytes(data)

    _assert_ingest_error(path, reason)


def test_pdf_without_text_is_reported_as_scanned(tmp_path: Path) -> None:
    path = tmp_path / "scan.pdf"
    writer = PdfWriter()
    writer.add_blank_page(width=595, height=842)
    writer.add_blank_page(width=595, height=842)
    writer.write(path)

    _assert_ingest_error(path, "no extractable text (scanned PDF?)")


def test_zip_that_is_not_a_docx(tmp_path: Path) -> None:
    path = tmp_path / "archive.docx"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "hello")

    _assert_ingest_error(path, "not a valid .docx file")


def test_missing_file(tmp_path: Path) -> None:
    _assert_ingest_error(tmp_path / "gone.pdf", "file not found")


# --- Discovery --------------------------------------------------------------------------------


def test_discover_recurses_sorted_skips_hidden_and_reports_problems(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / ".git" / "objects").mkdir(parents=True)
    (root / ".hidden_dir").mkdir()
    for relative in [
        "b.md",
        "a.txt",
        "UPPER.PDF",
        "sub/c.html",
        "sub/deeper/d.docx",
        "sub/image.png",
        "LICENSE",
        ".hidden.md",
        ".git/objects/readme.md",
        ".hidden_dir/notes.txt",
        "~$locked.docx",
    ]:
        (root / relative).write_bytes(b"x")
    missing = tmp_path / "nope"

    files, skipped = discover([root, missing, root / "a.txt"])

    assert files == [
        root / "UPPER.PDF",
        root / "a.txt",
        root / "b.md",
        root / "sub" / "c.html",
        root / "sub" / "deeper" / "d.docx",
    ]
    assert sorted(skipped) == sorted(
        [
            (root / "LICENSE", "unsupported file type (no extension)"),
            (root / "sub" / "image.png", "unsupported file type (.png)"),
            (root / "~$locked.docx", "temporary Office lock file"),
            (missing, "path does not exist"),
        ]
    )


def test_discover_takes_explicit_files_and_is_deterministic(tmp_path: Path) -> None:
    hidden = tmp_path / ".explicit.md"
    hidden.write_text("# Hi\n", encoding="utf-8")
    plain = tmp_path / "plain.txt"
    plain.write_text("hi\n", encoding="utf-8")

    first = discover([hidden, plain, tmp_path])
    second = discover(iter([hidden, plain, tmp_path]))

    assert first == second
    assert first[0] == [hidden, plain]  # explicit hidden file taken; no duplicates from the folder
    assert first[1] == []


def test_supported_suffixes() -> None:
    assert {".txt", ".md", ".markdown", ".pdf", ".docx", ".html", ".htm"} == SUPPORTED_SUFFIXES
