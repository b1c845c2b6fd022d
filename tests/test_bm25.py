"""BM25 term weights: what goes into the sparse vectors Qdrant scores with its IDF."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from citeflow.bm25 import BM25Encoder


def weight(encoder: BM25Encoder, text: str, term: str) -> float:
    vector = encoder.encode_document(text)
    index = encoder.encode_query(term).indices[0]
    return vector.values[vector.indices.index(index)]


def test_terms_are_stemmed_lowercased_content_words() -> None:
    encoder = BM25Encoder()
    assert encoder.terms("The Printers were RUNNING, and it runs!") == [
        "printer",
        "run",
        "run",
    ]
    assert encoder.terms("of the and") == []


def test_query_has_one_unit_weight_per_distinct_term_sorted() -> None:
    vector = BM25Encoder().encode_query("toner toner printer")
    assert len(vector.indices) == 2
    assert vector.indices == sorted(vector.indices)
    assert vector.values == [1.0, 1.0]
    assert BM25Encoder().encode_query("what is it?").indices == []


def test_term_frequency_saturates() -> None:
    encoder = BM25Encoder(avg_length=10)
    once = weight(encoder, "toner paper ink desk lamp", "toner")
    thrice = weight(encoder, "toner toner toner desk lamp", "toner")
    assert once < thrice < 3 * once
    assert thrice < encoder.k1 + 1  # the BM25 ceiling


def test_longer_chunks_weigh_the_same_count_less() -> None:
    padded = "toner " + " ".join(f"word{i}" for i in range(40))
    encoder = BM25Encoder(avg_length=10)
    assert weight(encoder, padded, "toner") < weight(encoder, "toner desk", "toner")
    flat = BM25Encoder(b=0.0, avg_length=10)
    assert weight(flat, padded, "toner") == pytest.approx(weight(flat, "toner desk", "toner"))


def test_indices_are_stable_across_encoders_and_threads() -> None:
    text = "Yahoo bought Viaweb in 1998 and it became Yahoo Store."
    first = BM25Encoder().encode_document(text)
    encoder = BM25Encoder()
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(encoder.encode_document, [text] * 16))
    assert all(r == first for r in results)


def test_bad_parameters_are_rejected() -> None:
    with pytest.raises(ValueError, match="BM25"):
        BM25Encoder(b=1.5)
    with pytest.raises(ValueError, match="BM25"):
        BM25Encoder(avg_length=0)


def test_document_vectors_are_bm25_of_the_stemmed_terms_seen_again_or_not() -> None:
    """The word cache changes nothing: a text encoded twice (second time all from the cache)
    gets the weights BM25 gives its stemmed content terms."""
    encoder = BM25Encoder(avg_length=20)
    text = "Running runners ran; the runner runs and RUNS again, with tests of the tested code."
    terms = encoder.terms(text)
    counts = {t: terms.count(t) for t in terms}
    norm = encoder.k1 * (1 - encoder.b + encoder.b * len(terms) / 20)
    expected = {
        encoder.encode_query(t).indices[0]: tf * (encoder.k1 + 1) / (tf + norm)
        for t, tf in counts.items()
    }
    for _ in range(2):
        vector = encoder.encode_document(text)
        assert vector.indices == sorted(expected)
        assert vector.values == pytest.approx([expected[i] for i in vector.indices])
    assert "the" not in terms and len(counts) < len(terms)  # stop words out, repeats counted
