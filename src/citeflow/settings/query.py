"""The settings of the knowledge base and of answering: where the store is, how documents are
chunked, how a question is searched, and how the answer is cited and traced."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from citeflow.settings.group import SettingsGroup, UserPath
from citeflow.settings.providers import xdg_dir

GraderKind = Literal["auto", "llm", "score", "none"]
JudgeKind = Literal["auto", "on", "off"]
CitationModeKind = Literal["auto", "markers", "structured", "evidence"]
RetrievalMode = Literal["hybrid", "dense", "keyword"]
FusionKind = Literal["rrf", "relative"]


class StoreSettings(SettingsGroup):
    """Where the knowledge bases live: the embedded Qdrant store or a Qdrant server."""

    data_dir: UserPath = Field(
        default_factory=lambda: xdg_dir("XDG_DATA_HOME", ".local/share") / "citeflow",
        description="Embedded Qdrant store and citeflow's own files.",
    )
    collection: str = Field(default="default", description="Knowledge base (Qdrant collection).")
    qdrant_url: str | None = Field(default=None, description="Server or cluster; empty: embedded.")
    qdrant_api_key: SecretStr | None = Field(default=None, description="Qdrant API key.")

    @field_validator("collection")
    @classmethod
    def _collection_name(cls, value: str) -> str:
        from citeflow.names import collection_name_problem

        value = value.strip()
        problem = collection_name_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @property
    def qdrant_path(self) -> Path:
        """Embedded Qdrant's directory (used only when no `qdrant_url` is set)."""
        return self.data_dir / "qdrant"


class ChunkingSettings(SettingsGroup):
    """How ingested documents are cut into stored chunks (``CITEFLOW_CHUNK_*``)."""

    model_config = SettingsConfigDict(env_prefix="CITEFLOW_CHUNK_")

    size: int = Field(default=512, ge=32, description="Tokens per stored chunk.")
    overlap: int = Field(default=64, ge=0, description="Tokens shared by adjacent chunks.")

    @model_validator(mode="after")
    def _overlap_below_size(self) -> Self:
        if self.overlap >= self.size:
            raise ValueError("CITEFLOW_CHUNK_OVERLAP must be smaller than CITEFLOW_CHUNK_SIZE")
        return self


class RetrievalSettings(SettingsGroup):
    """How a question is searched, graded and searched again, and how long a query may take."""

    top_k: int = Field(default=6, ge=1, le=100, description="Chunks retrieved per search.")
    mode: RetrievalMode = Field(
        default="hybrid",
        validation_alias="CITEFLOW_RETRIEVAL",
        description="Search: hybrid (dense + BM25 fused) | dense | keyword (BM25 only).",
    )
    fusion: FusionKind = Field(
        default="relative",
        description="Hybrid fusion: relative (normalised scores) | rrf (reciprocal rank).",
    )
    dense_weight: float = Field(
        default=0.5, ge=0.0, le=1.0, description="Hybrid: weight of the dense side (BM25: 1-w)."
    )
    rrf_k: int = Field(default=60, ge=0, description="Reciprocal rank fusion constant.")
    candidates: int = Field(
        default=100,
        ge=1,
        le=1000,
        validation_alias="CITEFLOW_HYBRID_CANDIDATES",
        description="Hybrid: chunks fetched per side before fusion (at least top_k).",
    )
    feedback_chunks: int = Field(
        default=3,
        ge=0,
        le=50,
        description="Hybrid: pseudo-relevance feedback: the mean embedding of the fused top N "
        "chunks is added to the query's and the dense side searched again (one more search). "
        "0: off.",
    )
    feedback_weight: float = Field(
        default=0.5,
        ge=0.0,
        le=10.0,
        description="Hybrid feedback: weight of the top chunks' mean embedding (the query's: 1).",
    )
    grader: GraderKind = Field(
        default="auto",
        description="Grading: auto (score for local, llm otherwise) | llm | score | none.",
    )
    relevance_threshold: float = Field(
        default=0.25, description="Score grader: minimum similarity for a relevant chunk."
    )
    relevance_coverage: float = Field(
        default=0.6,
        ge=0.0,
        le=1.0,
        description="Score grader: a chunk holding this share of the question's words "
        "(IDF-weighted) is relevant at any similarity, e.g. a name the embedder misses. 0: off.",
    )
    max_rounds: int = Field(
        default=1,
        ge=1,
        le=5,
        description="Retrieval rounds, first included; 2+: reword and search again when "
        "grading keeps nothing (bench/grading_value.py: rarely pays).",
    )
    on_no_relevant: Literal["best", "refuse"] = Field(
        default="best",
        description="When no round finds a relevant chunk: answer from the best hits, or refuse.",
    )
    fallback_chunks: int = Field(
        default=3,
        ge=1,
        le=50,
        description="How many of the best hits of all rounds are answered from when no round "
        "finds a relevant chunk (CITEFLOW_ON_NO_RELEVANT=best).",
    )
    workflow_timeout: float = Field(default=600.0, gt=0, description="Seconds per query, at most.")


class CitationSettings(SettingsGroup):
    """How sources are cut, given to the LLM, and how its citations are checked."""

    model_config = SettingsConfigDict(env_prefix="CITEFLOW_CITATION_")

    chunk_size: int = Field(default=160, ge=32, description="Tokens per Source N.")
    chunk_overlap: int = Field(
        default=16, ge=0, description="Tokens shared by adjacent citation chunks."
    )
    max_sources: int = Field(
        default=4,
        ge=1,
        le=50,
        validation_alias="CITEFLOW_MAX_SOURCES",
        description="Sources given to the LLM.",
    )
    context_budget: int = Field(
        default=900,
        ge=128,
        validation_alias="CITEFLOW_CONTEXT_BUDGET",
        description="Tokens of sources per synthesis call (compact mode).",
    )
    repair: bool = Field(
        default=True,
        validation_alias="CITEFLOW_REPAIR_CITATIONS",
        description="Check [N] against sources; move, drop or add markers.",
    )
    # Chosen on HotpotQA by bench/citation_settings.py (docs/citations.md).
    support_keep: float = Field(
        default=0.2,
        ge=0.0,
        le=1.0,
        validation_alias="CITEFLOW_SUPPORT_KEEP",
        description="Word support (IDF-weighted share of a sentence's words in the source) at "
        "which the model's own [N] stays.",
    )
    support_threshold: float = Field(
        default=0.55,
        ge=0.0,
        le=1.0,
        validation_alias="CITEFLOW_SUPPORT_THRESHOLD",
        description="Word support at which citeflow moves a wrong [N] to the source that "
        "supports the sentence, or adds one to an uncited sentence.",
    )
    mode: CitationModeKind = Field(
        default="auto",
        description="How the model cites: markers (prose with [N]) | structured (JSON whose "
        "every sentence names its sources, by a grammar or structured outputs) | evidence "
        "(markers, shown only the source sentences that bear on the question) | auto (the "
        "measured best for the provider: see README).",
    )
    judge: JudgeKind = Field(
        default="auto",
        description="Verify citations with the LLM (P(Yes) to 'does the passage support the "
        "statement?') instead of word support: auto (on for openai and azure, off for the "
        "local model) | on (an error if the LLM gives no log-probabilities) | off.",
    )
    judge_cut: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="Citation judge: the P(Yes) at which a source supports a sentence.",
    )

    @model_validator(mode="after")
    def _overlap_below_size(self) -> Self:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(
                "CITEFLOW_CITATION_CHUNK_OVERLAP must be smaller than CITEFLOW_CITATION_CHUNK_SIZE"
            )
        return self


class TracingSettings(SettingsGroup):
    """What OpenTelemetry spans carry (``CITEFLOW_TRACE_*``)."""

    model_config = SettingsConfigDict(env_prefix="CITEFLOW_TRACE_")

    content: bool = Field(
        default=False,
        description="Debugging: OpenTelemetry spans also carry the sources' text and the answer "
        "(off: counts and the question only).",
    )
