"""Does grading earn its cost? The graders and the retry round, measured on BEIR SciFact.

Each test claim is searched as the workflow searches (hybrid, top_k chunks, scored by cosine
relevance); then every grader configuration judges the same hits: none, the score grader at
thresholds 0.10 to 0.50 and the default ("0.25 or cov 0.6": it also keeps a chunk holding
``CITEFLOW_RELEVANCE_COVERAGE`` of the question's words), and the LLM grader with the local model
on an evenly spaced sample of claims. A chunk is relevant when its abstract is judged relevant in
the qrels. Per configuration:

    kept/q      chunks kept per claim
    kept P      precision of the kept chunks (all claims pooled)
    kept R      share of the relevant retrieved chunks that were kept
    none kept   claims where grading kept nothing (the workflow retries, then falls back)
    rej|miss    the same, among the claims whose hits hold no relevant abstract (a useful retry)
    rej|hit     the same, among the claims whose hits hold one (a wasted retry)
    rej|off     the same, when the claim is searched in an unrelated corpus (Paul Graham's essay,
                `data/`): what a threshold is for, answering "not covered" instead of guessing
    src P       precision of the Source N pieces that reach the LLM (`make_sources` on the kept
                chunks, or on the best `fallback_nodes` hits when nothing was kept)
    rel src     claims where at least one relevant source reaches the LLM
    ms/call     wall time of one grading call

Retry: for the claims a grader rejects, the workflow's round 2 runs (`reformulate`: keywords from
the local LLM, then retrieval and grading of the new query); it reports how often the new search
finds a relevant abstract round 1 did not have, how often a relevant source then reaches the LLM
(against the fallback without a retry), and the seconds it costs.

LLM replies are cached by prompt in a JSON file (``--llm-cache``), so a re-run costs no model
time; the model is loaded only when a reply is missing. ``--llm-sample 0`` skips the LLM grader
and ``--no-retry`` the retries (then nothing needs the model).

    .venv/bin/python bench/grading_value.py [--llm-sample 25] [--cache-dir DIR]

About 400 lines: one experiment (graders, then retries on the same hits), read top to bottom.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import time
import warnings
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from llama_index.core.llms import LLM, ChatMessage, ChatResponse
from llama_index.core.schema import NodeWithScore

from citeflow.citations.sources import make_sources
from citeflow.evaluation.answer_cache import read_json_object, write_json
from citeflow.evaluation.dataset import load_beir
from citeflow.evaluation.dense import default_cache_dir, doc_id_of
from citeflow.evaluation.runner import EvalContext, corpus_index
from citeflow.query.grading import Grader, KeepAllGrader, LLMGrader, ScoreGrader, keep_best
from citeflow.query.retrieval import Retriever
from citeflow.query.rewriting import reformulate
from citeflow.settings import Settings
from citeflow.store import Store
from common import SCIFACT, essay_kb

THRESHOLDS = (0.10, 0.15, 0.20, 0.25, 0.30, 0.35, 0.40, 0.45, 0.50)


class ReplyCache:
    """The local LLM behind a JSON cache of its replies by prompt (loaded on the first miss).

    Quacks like an `LLM` for `LLMGrader` and `reformulate` (both only call ``achat``).
    """

    def __init__(self, path: Path, settings: Settings) -> None:
        self.path = path
        self.settings = settings
        self.data: dict[str, dict[str, Any]] = read_json_object(path)
        self._llm: LLM | None = None
        self.last_seconds = 0.0
        self.misses = 0

    def as_llm(self) -> LLM:
        return cast(LLM, self)

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        prompt = "\n".join(f"{m.role.value}: {m.content or ''}" for m in messages)
        key = hashlib.sha256(prompt.encode()).hexdigest()[:24]
        entry = self.data.get(key)
        if entry is None:
            if self._llm is None:
                from citeflow.providers.llm import build_llm

                self._llm = build_llm(self.settings)
            started = time.perf_counter()
            reply = await self._llm.achat(list(messages), **kwargs)
            entry = {"reply": reply.message.content or "", "seconds": time.perf_counter() - started}
            self.data[key] = entry
            self.misses += 1
            write_json(self.path, self.data, sort_keys=True)
        self.last_seconds = float(entry["seconds"])
        return ChatResponse(message=ChatMessage(role="assistant", content=str(entry["reply"])))


@dataclass
class Claim:
    text: str
    relevant: set[str]
    hits: list[NodeWithScore] = field(default_factory=list)
    off_hits: list[NodeWithScore] = field(default_factory=list)
    """the same claim searched in an unrelated corpus (the essay): nothing there is relevant"""

    def relevant_in(self, hits: Sequence[NodeWithScore]) -> int:
        """How many of ``hits`` are cut from an abstract judged relevant to the claim."""
        return sum(doc_id_of(hit) in self.relevant for hit in hits)


@dataclass
class Graded:
    """One grader on one claim: what it kept, what reaches the LLM, and the call's time."""

    kept: list[NodeWithScore]
    sources: list[NodeWithScore]
    seconds: float


@dataclass
class Row:
    name: str
    outcomes: list[tuple[Claim, Graded]] = field(default_factory=list)
    off_rejected: list[bool] = field(default_factory=list)

    def figures(self) -> dict[str, float]:
        n = len(self.outcomes)
        kept = sum(len(g.kept) for _, g in self.outcomes)
        kept_rel = sum(c.relevant_in(g.kept) for c, g in self.outcomes)
        retrieved_rel = sum(c.relevant_in(c.hits) for c, _ in self.outcomes)
        sources = sum(len(g.sources) for _, g in self.outcomes)
        sources_rel = sum(c.relevant_in(g.sources) for c, g in self.outcomes)
        reached = sum(c.relevant_in(g.sources) > 0 for c, g in self.outcomes)
        missed = [g for c, g in self.outcomes if not c.relevant_in(c.hits)]
        found = [g for c, g in self.outcomes if c.relevant_in(c.hits)]
        return {
            "kept/q": kept / n,
            "kept P": kept_rel / kept if kept else 0.0,
            "kept R": kept_rel / retrieved_rel if retrieved_rel else 0.0,
            "none kept": sum(not g.kept for _, g in self.outcomes) / n,
            "rej|miss": sum(not g.kept for g in missed) / len(missed) if missed else 0.0,
            "rej|hit": sum(not g.kept for g in found) / len(found) if found else 0.0,
            "rej|off": statistics.mean(self.off_rejected) if self.off_rejected else -1.0,
            "src P": sources_rel / sources if sources else 0.0,
            "rel src": reached / n,
            "ms/call": 1000 * statistics.mean(g.seconds for _, g in self.outcomes),
        }


@dataclass
class Bench:
    settings: Settings
    retriever: Retriever
    off_retriever: Retriever
    llm: ReplyCache

    def fallback(self, hits: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        """The workflow's fallback: the ``fallback_chunks`` hits of highest relevance (one per
        chunk)."""
        pool: dict[str, NodeWithScore] = {}
        keep_best(pool, hits, key=lambda hit: hit.node.node_id)
        best = sorted(pool.values(), key=lambda h: -(h.score or 0.0))
        return best[: self.settings.retrieval.fallback_chunks]

    def sources(self, kept: Sequence[NodeWithScore], query: str) -> list[NodeWithScore]:
        sources = make_sources(
            kept,
            query,
            chunk_tokens=self.settings.citations.chunk_size,
            overlap_tokens=self.settings.citations.chunk_overlap,
            max_sources=self.settings.citations.max_sources,
        )
        return [source.with_score() for source in sources]

    async def grade(self, grader: Grader, claim: Claim) -> Graded:
        started = time.perf_counter()
        kept = await grader.grade(claim.text, claim.hits)
        seconds = time.perf_counter() - started
        if isinstance(grader, LLMGrader):
            seconds = self.llm.last_seconds  # the model's time when the call was made, not cached
        chosen = kept or self.fallback(claim.hits)
        return Graded(kept, self.sources(chosen, claim.text), seconds)

    async def row(
        self, name: str, grader: Grader, claims: Sequence[Claim], offtopic: int | None = None
    ) -> Row:
        """``grader`` on ``claims``, and on the off-topic searches of the first ``offtopic``."""
        row = Row(name)
        for claim in claims:
            row.outcomes.append((claim, await self.grade(grader, claim)))
        for claim in claims[:offtopic]:
            row.off_rejected.append(not await grader.grade(claim.text, claim.off_hits))
        return row

    async def retry(
        self, grader: Grader, row: Row, offtopic: Sequence[Claim] = ()
    ) -> dict[str, float] | None:
        """Round 2 for the claims ``row``'s grader kept nothing for, as the workflow runs it.

        With ``offtopic``, round 2 for those claims searched in the unrelated corpus instead.
        """
        retriever = self.retriever
        if offtopic:
            retriever = self.off_retriever
            off = [Claim(claim.text, claim.relevant, claim.off_hits) for claim in offtopic]
            row = await self.row("off-topic", grader, off)
        rejected = [(c, g) for c, g in row.outcomes if not g.kept]
        if not rejected:
            return None
        found_new = kept2 = rel_before = rel_after = 0
        seconds: list[float] = []
        for claim, graded in rejected:
            query = await reformulate(self.llm.as_llm(), claim.text, claim.text, 2)
            llm_seconds = self.llm.last_seconds
            retrieved = time.perf_counter()
            hits = await retriever.aretrieve(query)
            graded_at = time.perf_counter()
            kept = await grader.grade(query, hits)  # the workflow grades the round's query
            grade_seconds = time.perf_counter() - graded_at
            if isinstance(grader, LLMGrader):
                grade_seconds = self.llm.last_seconds
            seconds.append(llm_seconds + (graded_at - retrieved) + grade_seconds)
            before = {doc_id_of(h) for h in claim.hits}
            found_new += any(doc_id_of(h) in claim.relevant - before for h in hits)
            kept2 += bool(kept)
            after = self.sources(kept or self.fallback([*claim.hits, *hits]), claim.text)
            rel_before += claim.relevant_in(graded.sources) > 0
            rel_after += claim.relevant_in(after) > 0
        n = len(rejected)
        return {
            "rejected": n,
            "new rel": found_new / n,
            "kept r2": kept2 / n,
            "rel src r1": rel_before / n,
            "rel src r2": rel_after / n,
            "s/retry": statistics.mean(seconds),
        }


def print_rows(title: str, rows: Sequence[Row]) -> None:
    print(title)
    names: tuple[str, ...] = ("kept/q", "kept P", "kept R", "none kept", "rej|miss", "rej|hit")
    names += ("rej|off", "src P", "rel src")
    print(f"{'grader':18s}" + "".join(f"{n:>10s}" for n in (*names, "ms/call")))
    for row in rows:
        f = row.figures()
        cells = [f"{f['kept/q']:10.2f}"]
        cells += [f"{f[n]:10.1%}" if f[n] >= 0 else f"{'-':>10s}" for n in names[1:]]
        ms = f["ms/call"]
        cells.append(f"{ms:10.0f}" if ms >= 100 else f"{ms:10.3f}")
        print(f"{row.name:18s}" + "".join(cells))
    print()


def print_retries(title: str, retries: Sequence[tuple[str, dict[str, float] | None]]) -> None:
    print(title)
    names = ("rejected", "new rel", "kept r2", "rel src r1", "rel src r2", "s/retry")
    print(f"{'grader':18s}" + "".join(f"{n:>11s}" for n in names))
    for name, r in retries:
        if r is None:
            print(f"{name:18s}{0:11d}")
            continue
        cells = [f"{int(r['rejected']):11d}"]
        cells += [f"{r[n]:11.1%}" for n in names[1:5]]
        cells.append(f"{r['s/retry']:11.1f}")
        print(f"{name:18s}" + "".join(cells))
    print()


def score_name(t: float) -> str:
    return f"score >= {t:.2f}"


async def run(args: argparse.Namespace, stack: ExitStack) -> None:
    settings = Settings(_env_file=None)
    dataset = load_beir(args.dataset, split="test", limit=args.limit, evidence=False)
    context = EvalContext(settings=settings, cache_dir=args.cache_dir, stack=stack)
    index = corpus_index(dataset, context)
    if not index.info.reused:
        print(f"note: the index was built or finished now ({index.info.embedded_chunks} chunks)")
    retriever = index.retriever(mode="hybrid").retriever
    llm = ReplyCache(args.llm_cache, settings)

    claims: list[Claim] = []
    searched = time.perf_counter()
    for qid, text in dataset.queries.items():
        claims.append(Claim(text, dataset.relevant(qid), await retriever.aretrieve(text)))
    search_ms = 1000 * (time.perf_counter() - searched) / len(claims)
    store = Store.open_path(":memory:")
    essay = essay_kb(settings, store, index.kb.embed_model, {"title": "essay"})
    off_retriever = essay.retriever()
    bench = Bench(settings, retriever, off_retriever, llm)
    for claim in claims:
        claim.off_hits = await off_retriever.aretrieve(claim.text)
    any_rel = sum(c.relevant_in(c.hits) > 0 for c in claims) / len(claims)
    search = settings.retrieval
    default = search.relevance_threshold

    print(
        f"BEIR SciFact test: {len(claims)} claims, {index.info.chunks} chunks "
        f"(chunk {index.info.chunk_size}/{index.info.chunk_overlap}), hybrid ({search.fusion}, "
        f"{search.candidates} per side) top {search.top_k}"
        f" ({search_ms:.0f} ms per search); a relevant abstract in the top {search.top_k}: "
        f"{any_rel:.1%} of claims; sources to the LLM: {settings.citations.max_sources} "
        f"(fallback: best {search.fallback_chunks} hits)"
    )
    print()
    rows = [await bench.row("none", KeepAllGrader(), claims)]
    for t in THRESHOLDS:
        rows.append(await bench.row(score_name(t), ScoreGrader(t), claims))
    coverage = search.relevance_coverage
    if coverage:  # the default: or the chunk holds that much of the question's words
        name = f"{default:.2f} or cov {coverage:g}"
        rows.append(await bench.row(name, ScoreGrader(default, coverage), claims))
    print_rows(f"all {len(claims)} claims", rows)

    retries: list[tuple[str, dict[str, float] | None]] = []
    if not args.no_retry:
        for t in args.retry_at or [default]:
            row = await bench.row(score_name(t), ScoreGrader(t), claims)
            retries.append((score_name(t), await bench.retry(ScoreGrader(t), row)))

    if args.llm_sample > 0:
        step = max(1, len(claims) // args.llm_sample)
        sample = claims[::step][: args.llm_sample]
        sample_rows = [await bench.row("none", KeepAllGrader(), sample, args.llm_offtopic)]
        for t in sorted({default, *(args.retry_at or [])}):
            sample_rows.append(
                await bench.row(score_name(t), ScoreGrader(t), sample, args.llm_offtopic)
            )
        grader = LLMGrader(llm.as_llm())
        llm_row = await bench.row("llm (local 1.5B)", grader, sample, args.llm_offtopic)
        sample_rows.append(llm_row)
        print_rows(f"LLM grader sample: every {step}th claim, {len(sample)} claims", sample_rows)
        empty = sum(not g.kept for _, g in llm_row.outcomes)
        print(f"llm grader: {empty} of {len(sample)} replies kept nothing")
        print()
        if not args.no_retry:
            retries.append(("llm (sample)", await bench.retry(grader, llm_row)))
            off = sample[: args.llm_offtopic]
            score = ScoreGrader(default)
            retries.append(
                (f"{score_name(default)}, off", await bench.retry(score, llm_row, offtopic=off))
            )

    if retries:
        print_retries(
            "retry: round 2 (keywords from the local LLM) for the claims a grader kept nothing"
            " for;\nnew rel = the new search found a relevant abstract round 1 had not; kept r2 ="
            " round 2 kept\nsomething; rel src = a relevant source reaches the LLM without (r1,"
            " fallback) and with (r2)\nthe retry; off = sample claims searched in the essay"
            " (nothing there is relevant)",
            retries,
        )
    if llm.misses:
        print(f"({llm.misses} new LLM calls, cached in {args.llm_cache})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", type=Path, default=SCIFACT)
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir())
    parser.add_argument("--limit", type=int, default=None, help="first N claims only")
    parser.add_argument("--llm-sample", type=int, default=25, help="claims for the LLM grader")
    parser.add_argument(
        "--llm-offtopic", type=int, default=10, help="sample claims the LLM also grades off-topic"
    )
    parser.add_argument(
        "--llm-cache",
        type=Path,
        default=default_cache_dir().parent / "bench" / "grading_value.json",
    )
    parser.add_argument(
        "--retry-at",
        type=float,
        action="append",
        help="score thresholds whose rejects get a retry (default: the settings' threshold)",
    )
    parser.add_argument("--no-retry", action="store_true", help="skip the retry round")
    args = parser.parse_args()
    args.llm_cache.parent.mkdir(parents=True, exist_ok=True)
    warnings.filterwarnings("ignore")
    with ExitStack() as stack:  # closes the corpus index
        asyncio.run(run(args, stack))


if __name__ == "__main__":
    main()
