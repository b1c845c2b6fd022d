"""Recorded answers on disk, keyed by what they depend on.

`AnswerCache` keeps one JSON file per question under ``<cache>/answers/<dataset>-<key>/``, where
``key`` hashes `generation_facts`: the corpus index, the LLM (for the local model, also the
llama.cpp build), the prompts and the settings that change what the model sees. An interrupted
run resumes and a re-run costs nothing; settings that change only how answers are *checked* keep
the key, and the records are re-checked instead.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from citeflow.settings import Settings

RECORD_FORMAT = 1
#: the settings that change what the model is shown or how it is asked (not how it is checked)
GENERATION_SETTINGS = tuple(
    """
    llm_provider llm_model llm_temperature llm_max_tokens local_model_path local_context_window
    top_k retrieval rrf_k hybrid_candidates grader relevance_threshold relevance_coverage
    max_rounds on_no_relevant citation_chunk_size citation_chunk_overlap max_sources
    context_budget fusion dense_weight chunk_size chunk_overlap feedback_chunks feedback_weight
    """.split()
)


class AnswerCache:
    """One JSON file per question under ``directory``; written atomically, read defensively."""

    def __init__(self, directory: Path, facts: Mapping[str, Any]) -> None:
        self.directory = directory
        self.facts = dict(facts)

    @classmethod
    def under(cls, root: Path, name: str, facts: Mapping[str, Any]) -> AnswerCache:
        blob = json.dumps(facts, sort_keys=True, default=str).encode()
        return cls(root / f"{name}-{hashlib.sha256(blob).hexdigest()[:16]}", facts)

    def _path(self, query_id: str) -> Path:
        cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", query_id)[:80]
        digest = hashlib.sha256(query_id.encode()).hexdigest()[:8]
        return self.directory / f"{cleaned}-{digest}.json"

    def get(self, query_id: str, question: str) -> dict[str, Any] | None:
        """The recorded answer, or None (missing, unreadable, or for another question)."""
        data = read_json_object(self._path(query_id))
        ok = (
            data.get("format") == RECORD_FORMAT
            and data.get("question") == question
            and isinstance(data.get("raw_text"), str)
        )
        return data if ok else None

    def put(self, record: Mapping[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "config.json"
        if not config.exists():
            write_json(config, self.facts)
        write_json(self._path(str(record["query_id"])), record)


def read_json_object(source: Path) -> dict[str, Any]:
    """The JSON object at ``source``; empty when it is missing, unreadable or not an object."""
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_json(target: Path, data: Any, *, indent: int = 1, sort_keys: bool = False) -> None:
    """``data`` as JSON at ``target``, whole or not at all (written beside it, then renamed)."""
    tmp = target.with_suffix(".tmp")
    text = json.dumps(data, indent=indent, sort_keys=sort_keys, default=str)
    tmp.write_text(text + "\n", encoding="utf-8")
    tmp.replace(target)


def generation_facts(settings: Settings, *, index_key: str, llm: str) -> dict[str, Any]:
    """What a recorded answer depends on: the corpus index, the LLM, the prompts, the settings
    that change what the model sees."""
    from citeflow import prompts
    from citeflow.citations.sources import SELECTION_VERSION
    from citeflow.query.synthesis import citation_mode_of
    from citeflow.settings import RetrievalSettings, values_by_variable

    mode = citation_mode_of(settings)
    structured = mode == "structured"
    texts = [
        v if isinstance(v, str) else v.get_template()
        for k, v in sorted(vars(prompts).items())
        if k.isupper()
        and (isinstance(v, str) or hasattr(v, "get_template"))  # the prompts
        and (structured or not k.startswith("CITATION_JSON_"))
    ]
    dumped = {
        name.removeprefix("CITEFLOW_").lower(): value
        for name, value in values_by_variable(settings).items()
    }
    fallback = settings.retrieval.fallback_chunks
    return {
        "format": RECORD_FORMAT,
        "index": index_key,
        "sources": SELECTION_VERSION,
        "llm": llm,
        "prompts": hashlib.sha256("\0".join(texts).encode()).hexdigest()[:16],
        "settings": {k: dumped[k] for k in GENERATION_SETTINGS if k in dumped},
        **({"citation_mode": mode} if mode != "markers" else {}),
        **(
            {"fallback_chunks": fallback}
            if fallback != RetrievalSettings.model_fields["fallback_chunks"].default
            else {}
        ),
    }
