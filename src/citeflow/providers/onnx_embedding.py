"""The local sentence-transformers embedder, run by ONNX Runtime instead of torch.

torch spends most of a short question's embedding on per-operator overhead, which ONNX Runtime
does not have: questions and long passages both embed a few times faster. The model directory is
the sentence-transformers directory the torch backend reads; it is exported to ONNX once (with
torch, on first use, about a second) into ``CITEFLOW_LOCAL_MODEL_DIR/onnx/`` and reused after that.

Only the shape of all-MiniLM-L6-v2 is supported, which covers the common sentence-transformers
models: a BERT-like transformer, mean pooling, and optionally L2 normalisation (``modules.json``).
`onnx_supported` says whether a directory has that shape; other models stay on torch. The
vectors equal sentence-transformers' own (to ~1e-7, tested), so a knowledge base built with one
backend is searched with the other without re-embedding.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from pydantic import Field, PrivateAttr

from citeflow.errors import ModelError, first_line

__all__ = ["OnnxEmbedding", "export_onnx", "onnx_supported"]

log = logging.getLogger("citeflow.models")

#: Bumped when the export itself changes, so that older exports are not reused.
EXPORT_VERSION = 1
#: The ONNX opset of the export (supported by every recent onnxruntime).
OPSET = 17
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_MEAN = "pooling_mode_mean_tokens"
_OTHER_POOLING = (
    "pooling_mode_cls_token",
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
    "pooling_mode_lasttoken",
)


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _modules(model_dir: Path) -> list[str]:
    """The sentence-transformers module types of ``model_dir``, in order."""
    return [str(module.get("type", "")) for module in _read_json(model_dir / "modules.json")]


def onnx_supported(model_dir: Path) -> bool:
    """Whether ``model_dir`` is a transformer + mean pooling (+ normalisation) model with a fast
    tokenizer, the shape `OnnxEmbedding` computes."""
    try:
        types = _modules(model_dir)
        pooling = _read_json(model_dir / "1_Pooling" / "config.json")
    except (OSError, ValueError):
        return False
    shape_ok = types[:2] == [
        "sentence_transformers.models.Transformer",
        "sentence_transformers.models.Pooling",
    ] and all(t == "sentence_transformers.models.Normalize" for t in types[2:])
    mean_only = bool(pooling.get(_MEAN)) and not any(pooling.get(key) for key in _OTHER_POOLING)
    return shape_ok and mean_only and (model_dir / "tokenizer.json").is_file()


def _max_length(model_dir: Path) -> int:
    """Tokens per text, as sentence-transformers truncates: ``max_seq_length``, else the
    model's position limit."""
    config = _read_json(model_dir / "config.json")
    limit = int(config.get("max_position_embeddings", 512))
    path = model_dir / "sentence_bert_config.json"
    if path.is_file():
        length = _read_json(path).get("max_seq_length")
        if length:
            return min(int(length), limit)
    return limit


def _export_key(model_dir: Path) -> str:
    """Names an export by what it was made from: the model's config and weights (size and
    modification time: hashing the weights would cost every start-up), and the export code."""
    digest = hashlib.sha256(f"v{EXPORT_VERSION}:opset{OPSET}".encode())
    digest.update((model_dir / "config.json").read_bytes())
    for weights in sorted(model_dir.glob("*.safetensors")) + sorted(model_dir.glob("*.bin")):
        stat = weights.stat()
        digest.update(f"{weights.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def export_onnx(model_dir: Path, cache_dir: Path) -> Path:
    """The ONNX export of ``model_dir``'s transformer, made on first use and cached.

    The export outputs the last hidden state for ``input_ids``, ``attention_mask`` and
    ``token_type_ids`` (dynamic batch and sequence axes); pooling is done by `OnnxEmbedding`.
    It is written to a temporary file and renamed, so concurrent processes never read half a
    file.

    Raises:
        ModelError: torch, transformers or onnx is missing, or the export fails.
    """
    target = cache_dir / f"{model_dir.name}-{_export_key(model_dir)}.onnx"
    if target.is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    log.info("exporting the local embedder %s to ONNX, once: %s", model_dir.name, target)
    partial = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's notes on shapes are not for users
            _export(model_dir, partial)
        partial.replace(target)
    except ImportError:
        raise ModelError(
            "exporting the local embedder to ONNX needs torch and transformers: "
            "pip install 'citeflow[local]', or set CITEFLOW_EMBED_BACKEND=torch"
        ) from None
    except Exception as exc:
        raise ModelError(
            f"cannot export the local embedder in {model_dir} to ONNX: {first_line(exc)} "
            "(CITEFLOW_EMBED_BACKEND=torch runs it without ONNX)"
        ) from exc
    finally:
        partial.unlink(missing_ok=True)
    return target


def _export(model_dir: Path, target: Path) -> None:
    """Export the transformer of ``model_dir`` (its last hidden state) to ``target``."""
    import torch
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    model = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()

    class LastHiddenState(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            output = self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            )
            return output.last_hidden_state

    example = torch.ones((2, 8), dtype=torch.long)
    dynamic = {name: {0: "batch", 1: "tokens"} for name in (*_INPUTS, "hidden")}
    with torch.inference_mode():
        torch.onnx.export(
            LastHiddenState(model),
            (example, example, torch.zeros_like(example)),
            str(target),
            input_names=list(_INPUTS),
            output_names=["hidden"],
            dynamic_axes=dynamic,
            opset_version=OPSET,
            dynamo=False,
        )


def _open_session(model_dir: Path, cache_dir: Path, options: Any) -> Any:
    """An ONNX Runtime session on the cached export; a damaged cache file is exported again,
    once."""
    import onnxruntime

    for attempt in (1, 2):
        onnx_file = export_onnx(model_dir, cache_dir)
        try:
            return onnxruntime.InferenceSession(
                str(onnx_file), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            onnx_file.unlink(missing_ok=True)
            if attempt == 2:
                raise ModelError(f"cannot load {onnx_file}: {first_line(exc)}") from exc
    raise AssertionError("unreachable")  # pragma: no cover


class OnnxEmbedding(BaseEmbedding):
    """A sentence-transformers model (transformer + mean pooling) run by ONNX Runtime.

    Args:
        model_dir: the sentence-transformers directory (``onnx_supported`` must hold).
        cache_dir: where the ONNX export is kept.
        threads: ONNX Runtime's intra-op threads; 0 lets it use one per core.
        embed_batch_size: texts per call when embedding many.

    Thread-safe: concurrent calls share one session (ONNX Runtime's ``run`` is thread-safe).
    """

    model_dir: str = Field(description="the sentence-transformers model directory")
    threads: int = Field(default=0, ge=0, description="intra-op threads (0: one per core)")
    max_length: int = Field(default=256, description="tokens per text, longer ones truncated")
    normalize: bool = Field(default=True, description="L2-normalise the vectors")

    _session: Any = PrivateAttr()
    _tokenizer: Any = PrivateAttr()

    def __init__(self, *, model_dir: Path, cache_dir: Path, threads: int = 0, **kwargs: Any):
        try:
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError:
            raise ModelError(
                "the ONNX backend of the local embedder needs onnxruntime: "
                "pip install 'citeflow[local]', or set CITEFLOW_EMBED_BACKEND=torch"
            ) from None
        if not onnx_supported(model_dir):
            raise ModelError(
                f"{model_dir} is not a transformer + mean-pooling sentence-transformers model; "
                "set CITEFLOW_EMBED_BACKEND=torch"
            )
        kwargs.setdefault("model_name", model_dir.name)
        kwargs.update(
            model_dir=str(model_dir),
            threads=threads,
            max_length=_max_length(model_dir),
            normalize="sentence_transformers.models.Normalize" in _modules(model_dir),
        )
        super().__init__(**kwargs)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session = _open_session(model_dir, cache_dir, options)
        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        tokenizer.enable_truncation(max_length=self.max_length)
        tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]") or 0)
        self._tokenizer = tokenizer

    @classmethod
    def class_name(cls) -> str:
        """Name used when serialising the model."""
        return "CiteflowOnnxEmbedding"

    def encode(self, texts: list[str]) -> list[list[float]]:
        """Embed ``texts`` in one run (padded to the longest), as sentence-transformers does."""
        if not texts:
            return []
        encodings = self._tokenizer.encode_batch([text.strip() for text in texts])
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        types = np.array([e.type_ids for e in encodings], dtype=np.int64)
        (hidden,) = self._session.run(
            None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        )
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        if self.normalize:
            pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        vectors: list[list[float]] = pooled.tolist()
        return vectors

    def embed_query_batch(self, queries: list[str]) -> list[list[float]]:
        """Embed several queries in one run (`citeflow.query.batching` uses it)."""
        return self.encode(queries)

    def _get_query_embedding(self, query: str) -> Embedding:
        return self.encode([query])[0]

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> Embedding:
        return self.encode([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self.encode(texts)
