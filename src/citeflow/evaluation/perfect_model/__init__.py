"""A perfect-model harness: a fake LLM whose citations are known right, or known wrong.

citeflow checks every sentence's ``[N]`` markers against the sources and may keep, move, add or
remove them (`citeflow.citations.repair`). To measure that check apart from any real model's
mistakes, `PerfectAuthor` answers from gold evidence (`Gold`): one sentence per source that holds
gold evidence, cited with a source that truly holds it (``verbatim``, ``paraphrase``) or with one
that does not (``wrong``), and knows, per sentence, which sources are correct. `score_answer`
compares what it wrote with the answer citeflow returned: correct citations kept, wrong ones
fixed or removed, wrong ones added. `PerfectModelLLM` is the author as a LlamaIndex LLM, so the
real workflow can run with it in-process (``citeflow eval``).
"""

from citeflow.evaluation.perfect_model.author import (
    AuthoredSentence,
    Gold,
    PerfectAuthor,
    Variant,
    joins_clauses,
    render_reply,
)
from citeflow.evaluation.perfect_model.llm import PerfectModelLLM
from citeflow.evaluation.perfect_model.prompt import parse_prompt
from citeflow.evaluation.perfect_model.rewording import paraphrase
from citeflow.evaluation.perfect_model.scoring import PerfectScore, score_answer

__all__ = [
    "AuthoredSentence",
    "Gold",
    "PerfectAuthor",
    "PerfectModelLLM",
    "PerfectScore",
    "Variant",
    "joins_clauses",
    "paraphrase",
    "parse_prompt",
    "render_reply",
    "score_answer",
]
