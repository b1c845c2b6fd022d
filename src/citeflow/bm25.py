"""BM25 as Qdrant sparse vectors: term weights computed here, IDF computed by Qdrant.

A chunk's sparse vector holds, for each stemmed content term, BM25's saturated term frequency

    tf · (k1 + 1) / (tf + k1 · (1 − b + b · length / avg_length))

and a query's holds 1 for each of its terms. The collection's sparse vector is declared with
Qdrant's ``IDF`` modifier, so the server (or the embedded store) multiplies each query term by its
inverse document frequency over the whole collection, kept current as points come and go: the dot
product is the BM25 score. Nothing is downloaded, nothing is held in memory per collection, and
the same vectors work on embedded and server Qdrant.

Terms: lower-cased word tokens, English stop words dropped, Snowball (Porter 2) stems, mapped to
sparse indices by CRC-32 (stable across processes and versions).
"""

from __future__ import annotations

import functools
import re
import threading
import zlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

import Stemmer

#: English stop words (those of the classic SMART/NLTK lists that carry no topic)
STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself
    just me more most my myself no nor not now of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then there
    these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves also may might must shall
    et al ie eg vs via within without upon whether however thus therefore
    """.split()
)

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


@dataclass(frozen=True, slots=True)
class SparseVector:
    """Sorted sparse indices and their values (Qdrant's sparse vector shape)."""

    indices: list[int]
    values: list[float]


@functools.lru_cache(maxsize=1_000_000)
def _index(term: str) -> int:
    """A term's sparse index: its CRC-32 (stable across processes and versions)."""
    return zlib.crc32(term.encode("utf-8"))


class BM25Encoder:
    """Text → BM25 sparse vectors for documents and queries (thread-safe)."""

    def __init__(self, *, k1: float = 1.2, b: float = 0.75, avg_length: float = 128.0) -> None:
        if k1 < 0 or not 0.0 <= b <= 1.0 or avg_length <= 0:
            raise ValueError(f"bad BM25 parameters k1={k1} b={b} avg_length={avg_length}")
        self.k1 = k1
        self.b = b
        self.avg_length = avg_length
        self._local = threading.local()  # PyStemmer objects are not shared across threads
        self._word_cache: dict[str, int] = {}

    def _stemmer(self) -> Any:
        stemmer: Any = getattr(self._local, "stemmer", None)
        if stemmer is None:
            stemmer = Stemmer.Stemmer("english")
            stemmer.maxCacheSize = 100_000
            self._local.stemmer = stemmer
        return stemmer

    def terms(self, text: str) -> list[str]:
        """The stemmed content terms of ``text``, in order, repeats kept."""
        words = [w for w in _TOKEN.findall(text.lower()) if w not in STOP_WORDS]
        stems: list[str] = self._stemmer().stemWords(words)
        return stems

    def _word_indices(self, text: str) -> list[int]:
        """The sparse index of each content word of ``text``, in order, repeats kept.

        The same as ``[_index(t) for t in self.terms(text)]``, through a cache of word →
        index (stop words → -1), so that a word seen before costs one dict lookup instead of a
        stemmer call and a CRC: ingestion encodes every chunk of a corpus, whose words repeat.
        """
        cache = self._word_cache
        out: list[int] = []
        for word in _TOKEN.findall(text.lower()):
            index = cache.get(word)
            if index is None:
                stop = word in STOP_WORDS
                index = -1 if stop else _index(self._stemmer().stemWord(word))
                if len(cache) < 1_000_000:
                    cache[word] = index
            if index >= 0:
                out.append(index)
        return out

    def encode_document(self, text: str) -> SparseVector:
        """A chunk's vector: saturated, length-normalised term frequencies."""
        # two terms with the same CRC-32 (rare) add up, as one term would
        counts = Counter(self._word_indices(text))
        length = sum(counts.values())
        k1 = self.k1
        norm = k1 * (1.0 - self.b + self.b * length / self.avg_length)
        indices = sorted(counts)
        return SparseVector(
            indices=indices,
            values=[counts[i] * (k1 + 1.0) / (counts[i] + norm) for i in indices],
        )

    def encode_documents(self, texts: list[str]) -> list[SparseVector]:
        return [self.encode_document(t) for t in texts]

    def encode_query(self, text: str) -> SparseVector:
        """A query's vector: 1 per distinct term (Qdrant applies the IDF)."""
        indices = sorted({_index(t) for t in self.terms(text)})
        return SparseVector(indices=indices, values=[1.0] * len(indices))
