"""``citeflow eval`` / ``python -m citeflow.evaluation``: score retrievers on a BEIR dataset.

    python -m citeflow.evaluation /work/shared/data/scifact --split test --out scifact.json

prints the dataset, how the dense index was obtained (built, resumed or reused from the cache)
and a table (one row per retriever) on stdout, and writes the full JSON report. `add_arguments`
and `run` let the ``citeflow`` command mount the same options as a subcommand.

    citeflow eval ../shared/data/hotpotqa --retrievers none --answers 40

answers the first 40 questions through the whole workflow (`citeflow.evaluation.answers`) and
prints the citation figures of the model's own markers and of citeflow's checked answers (answers
cited, precision, citations per answer, unsupported and broken sentences, accuracy, seconds).
Answers are cached per question: an interrupted run resumes, a re-run only re-checks them.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from citeflow.errors import CiteflowError, InvalidRequestError

DEFAULT_QUESTION = "Is it true that {claim}?"  # answers.CLAIM_QUESTION, without the import

if TYPE_CHECKING:
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.llms import LLM

    from citeflow.evaluation.dataset import BeirDataset
    from citeflow.evaluation.runner import EvalContext, EvalReport
    from citeflow.settings import Settings

__all__ = ["add_arguments", "build_parser", "main", "run"]


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _k_values(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not ks or min(ks) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return ks


def _positive(text: str) -> int:
    value = _not_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _not_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer of 0 or more, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``citeflow eval`` (also those of ``python -m citeflow.evaluation``)."""
    parser.add_argument(
        "dataset", type=Path, help="BEIR dataset folder (corpus.jsonl, queries.jsonl, qrels/)"
    )
    parser.add_argument("--split", default="test", help="qrels/<split>.tsv to use (default: test)")
    parser.add_argument(
        "--limit", type=_positive, help="only the first N queries of the split (a fast slice)"
    )
    parser.add_argument(
        "--corpus-limit",
        type=_positive,
        help="index only N documents (the judged ones first); for smoke tests, not comparable",
    )
    parser.add_argument(
        "--retrievers",
        default="dense,bm25,hybrid",
        help="comma-separated retrievers to evaluate (default: dense,bm25,hybrid; "
        "none: only --answers)",
    )
    parser.add_argument(
        "-k",
        "--k-values",
        type=_k_values,
        default=(10, 100),
        help="cut-offs, comma-separated (default: 10,100)",
    )
    parser.add_argument(
        "--out", type=Path, help="JSON report path (default: <cache-dir>/reports/...json)"
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        help="where indexes are kept (default: $XDG_CACHE_HOME/citeflow/eval)",
    )
    parser.add_argument("--chunk-size", type=_positive, help="default: CITEFLOW_CHUNK_SIZE")
    parser.add_argument("--chunk-overlap", type=int, help="default: CITEFLOW_CHUNK_OVERLAP")
    parser.add_argument(
        "--concurrency", type=_positive, default=8, help="queries in flight (default: 8)"
    )
    parser.add_argument(
        "--answers",
        type=_positive,
        metavar="N",
        help="answer the first N questions through the whole workflow and print, for the "
        "model's own markers and for citeflow's checked answer: answers cited, citation "
        "precision, citations per answer, broken sentences, accuracy, seconds per answer",
    )
    parser.add_argument(
        "--skip",
        type=_not_negative,
        default=0,
        metavar="K",
        help="with --answers: start after the first K questions (--skip 80 --answers 80: "
        "questions 81-160, a slice that chose no setting)",
    )
    parser.add_argument(
        "--perfect-model",
        choices=("verbatim", "paraphrase", "wrong", "clauses", "wrong-clauses"),
        help="with --answers: answer with the perfect-model fake instead of the LLM (it cites "
        "gold evidence correctly, paraphrased, with wrong numbers, or two clauses to a sentence "
        "each cited where it ends, rightly or wrongly) and print how many correct "
        "citations citeflow kept and how many wrong ones it fixed or removed",
    )
    parser.add_argument(
        "--question",
        default=DEFAULT_QUESTION,
        metavar="TEMPLATE",
        help=f"how a claim is asked (default: {DEFAULT_QUESTION!r})".replace("%", "%%"),
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars")


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m citeflow.evaluation``."""
    parser = argparse.ArgumentParser(
        prog="citeflow eval",
        description="Score citeflow's retrieval on a BEIR-format dataset (nDCG, Recall, MRR) "
        "and the citations of its answers (--answers).",
    )
    add_arguments(parser)
    return parser


def run(
    args: argparse.Namespace,
    *,
    settings: Settings | None = None,
    embed_model: BaseEmbedding | None = None,
    embedder_name: str | None = None,
    llm: LLM | None = None,
) -> int:
    """Run ``citeflow eval`` with parsed arguments; returns the exit status.

    ``settings`` default to the environment's; ``embed_model`` (with its ``embedder_name``)
    replaces the configured embedder, and ``llm`` the configured LLM (``--answers``), for
    tests and notebooks.

    Raises:
        CiteflowError: bad dataset, unknown retriever, locked cache, provider errors.
    """
    from citeflow.evaluation.dataset import load_beir
    from citeflow.evaluation.dense import default_cache_dir
    from citeflow.evaluation.runner import RETRIEVERS, EvalContext, evaluate_retrieval
    from citeflow.settings import load_settings

    names = [n.strip() for n in str(args.retrievers).split(",") if n.strip()]
    if names == ["none"] and args.answers:
        names = []  # answers only
    unknown = [n for n in names if n not in RETRIEVERS]
    if unknown or (not names and not args.answers):
        raise InvalidRequestError(
            f"unknown retriever {', '.join(unknown) or '(none)'}; "
            f"available: {', '.join(RETRIEVERS)}"
        )
    progress = not args.quiet
    cache_dir = (args.cache_dir or default_cache_dir()).expanduser()
    with ExitStack() as stack:
        stack.enter_context(warnings.catch_warnings())
        # llama-index asks embedded Qdrant for payload indexes it does not need: noise
        warnings.filterwarnings("ignore", message="Payload indexes have no effect")
        context = EvalContext(
            settings=settings or load_settings(),
            cache_dir=cache_dir,
            stack=stack,
            progress=progress,
            chunk_size=args.chunk_size,
            chunk_overlap=args.chunk_overlap,
            embed_model=embed_model,
            embedder_name=embedder_name,
        )
        size, overlap = context.chunking()
        if not 0 <= overlap < size:
            raise InvalidRequestError(
                f"--chunk-overlap ({overlap}) must be at least 0 and below --chunk-size ({size})"
            )
        dataset = load_beir(
            args.dataset, split=args.split, limit=args.limit, corpus_limit=args.corpus_limit
        )
        _say(dataset.summary())
        retrievers = {}
        for name in names:
            retrievers[name] = RETRIEVERS[name](dataset, context)
            for note in context.notes:
                _say(note)
            context.notes.clear()
        report = evaluate_retrieval(
            dataset,
            retrievers,
            args.k_values,
            progress=progress,
            concurrency=args.concurrency,
        )
        answers = _answers_table(args, dataset, context, report, llm)
    report.extra["options"] = {
        "retrievers": names,
        "limit": args.limit,
        "corpus_limit": args.corpus_limit,
        "chunk_size": size,
        "chunk_overlap": overlap,
        "concurrency": args.concurrency,
    }
    if names:
        print(report.table())
    if answers is not None:
        print(answers)
    stem = f"{dataset.name}-{dataset.split}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    out = args.out or new_report_path(cache_dir / "reports", stem)
    _say(f"report: {report.write_json(out)}")
    return 0


def new_report_path(folder: Path, stem: str) -> Path:
    """``folder/stem.json``, or ``stem-2.json``... when a run that ended in the same second has
    it: the name is taken by creating the file, so two runs never write one report."""
    folder.mkdir(parents=True, exist_ok=True)
    path, n = folder / f"{stem}.json", 1
    while True:
        try:
            path.open("x").close()
            return path
        except FileExistsError:
            n += 1
            path = folder / f"{stem}-{n}.json"


def _answers_table(
    args: argparse.Namespace,
    dataset: BeirDataset,
    context: EvalContext,
    report: EvalReport,
    llm: LLM | None,
) -> str | None:
    """``--answers N``: its table (None without the option); its section goes into ``report``."""
    if not args.answers:
        return None
    from citeflow.evaluation.answers import answers_section
    from citeflow.evaluation.perfect_answers import perfect_section

    template = args.question or DEFAULT_QUESTION
    ids = list(dataset.queries)[args.skip : args.skip + args.answers]
    if not ids:
        raise InvalidRequestError(
            f"--skip {args.skip} leaves no question: {dataset.name}/{dataset.split} has "
            f"{len(dataset.queries)}; skip fewer"
        )
    if args.perfect_model:
        shown, section = perfect_section(
            dataset, context, ids=ids, variant=args.perfect_model, template=template
        )
    else:
        shown, section = answers_section(dataset, context, ids=ids, template=template, llm=llm)
    report.extra["answers"] = section
    return shown


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m citeflow.evaluation``; returns the exit status."""
    from citeflow import logs

    args = build_parser().parse_args(argv)
    logs.configure("WARNING")
    try:
        return run(args)
    except CiteflowError as exc:
        _say(f"citeflow: error: {exc}")
        return 1
    except KeyboardInterrupt:
        _say(
            "citeflow: interrupted (an unfinished index and the answers not yet cached "
            "resume on the next run)"
        )
        return 130
