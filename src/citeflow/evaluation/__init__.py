"""Evaluation on BEIR-format datasets: retrieval metrics and citation metrics.

* `dataset`: `load_beir` reads corpus, queries, qrels and (SciFact) gold evidence; `DatasetError`
  names the file and line of any bad input.
* `metrics`: nDCG@k, Recall@k, MRR@k as BEIR reports them, computed by trec_eval (pytrec_eval).
* `dense`: citeflow's dense retrieval over a cached embedded-Qdrant index of the corpus.
* `runner`: `evaluate_retrieval` runs `RetrieverLike`s and builds an `EvalReport` (table, JSON).
* `answers`, `answer_cache`, `scoring`: the whole workflow's answers (``--answers``), recorded per
  question, re-checked and scored (answers cited, citation precision, broken sentences, accuracy).
* `perfect_model`, `perfect_answers`: a fake LLM whose citations are known right or wrong, and
  what citeflow's check does with them (``--perfect-model``).
* `cli`: ``python -m citeflow.evaluation`` (and ``citeflow eval``).

Only the light modules are imported here; the others load on use.
"""

from citeflow.evaluation.dataset import (
    BeirDataset,
    CorpusDocument,
    DatasetError,
    Evidence,
    load_beir,
)
from citeflow.evaluation.metrics import evaluate, mrr_at_k, ndcg_at_k, recall_at_k
from citeflow.evaluation.runner import (
    RETRIEVERS,
    EvalReport,
    RetrieverLike,
    RetrieverResult,
    aevaluate_retrieval,
    evaluate_retrieval,
)

__all__ = [
    "RETRIEVERS",
    "BeirDataset",
    "CorpusDocument",
    "DatasetError",
    "EvalReport",
    "Evidence",
    "RetrieverLike",
    "RetrieverResult",
    "aevaluate_retrieval",
    "evaluate",
    "evaluate_retrieval",
    "load_beir",
    "mrr_at_k",
    "ndcg_at_k",
    "recall_at_k",
]
