"""The citation query workflow: rewrite → retrieve → grade (→ reformulate → retrieve) → cite →
synthesize. One step per stage; each stage's output is a typed event from `citeflow.events`.

    w = CitationQueryWorkflow.from_settings(settings)
    result = await w.run(query="What did the author work on?")
    print(result); result.source_nodes[0].node.get_text()
"""

from __future__ import annotations

import time
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from workflows import Context, Workflow, step
from workflows.events import StopEvent
from workflows.handler import WorkflowHandler

from citeflow.citations.answer import citation_actions
from citeflow.citations.judge import build_judge
from citeflow.citations.repair import CitationPolicy
from citeflow.citations.sources import make_sources
from citeflow.errors import EmptyQueryError
from citeflow.events import (
    AnswerDeltaEvent,
    CitationSourcesEvent,
    QueryStartEvent,
    RelevantNodesEvent,
    RetrievedEvent,
    RetrieveEvent,
    RetryEvent,
    Stage,
    StatusEvent,
)
from citeflow.names import check_collection_name
from citeflow.prompts import NOT_COVERED_ANSWER
from citeflow.providers.embeddings import build_embed_model
from citeflow.providers.llm import build_llm
from citeflow.query.grading import Grader, ScoreGrader, build_grader, fallback_hits, keep_best
from citeflow.query.retrieval import Retriever
from citeflow.query.rewriting import condense, reformulate
from citeflow.query.synthesis import (
    CitationMode,
    CitationSynthesizer,
    Synthesis,
    citation_mode_of,
)
from citeflow.result import CitedResponse
from citeflow.settings import RetrievalSettings, Settings
from citeflow.speedups import with_step_cache
from citeflow.store import Store
from citeflow.tracing import annotate, span
from citeflow.workflows.answer_span import run_in_answer_span
from citeflow.workflows.run_trace import RunTrace
from citeflow.workflows.upstream import upstream


class CitationQueryWorkflow(Workflow):
    """Answers a question over one knowledge base with numbered, checked citations."""

    def __init__(
        self,
        *,
        retriever: Retriever,
        llm: LLM,
        grader: Grader | None = None,
        retrieval: RetrievalSettings | None = None,
        policy: CitationPolicy | None = None,
        citation_mode: CitationMode = "markers",
        trace_content: bool = False,
        timeout: float | None = 600.0,
        **kwargs: Any,
    ) -> None:
        """``retrieval``: the rounds, grading and fallback (the defaults when omitted);
        ``policy``: how sources are given and citations checked (its `CitationSettings` and
        judge); ``citation_mode``: resolved, see `citation_mode_of`; ``trace_content``: spans
        carry the sources' text and the answer (``CITEFLOW_TRACE_CONTENT``)."""
        super().__init__(timeout=timeout, **kwargs)
        self.retriever = retriever
        self.llm = llm
        self.retrieval = retrieval or RetrievalSettings.defaults()
        self.policy = policy or CitationPolicy()
        self.trace_content = trace_content
        self.grader = grader or ScoreGrader.of(self.retrieval)
        self.synthesizer = CitationSynthesizer(llm, policy=self.policy, mode=citation_mode)

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        store: Store | None = None,
        llm: LLM | None = None,
        embed_model: BaseEmbedding | None = None,
        collection: str | None = None,
        **kwargs: Any,
    ) -> CitationQueryWorkflow:
        """Build the workflow and its providers from settings; pass any part to reuse it.

        Raises:
            InvalidCollectionNameError: ``collection`` breaks the rule of `citeflow.names`.
        """
        if collection is not None:
            check_collection_name(collection)
        retriever = Retriever.from_settings(
            settings,
            store or Store.open(settings.store),
            embed_model or build_embed_model(settings),
            collection=collection,
        )
        return cls.from_retriever(retriever, settings, llm, **kwargs)

    @classmethod
    def from_retriever(
        cls, retriever: Retriever, settings: Settings, llm: LLM | None = None, **kwargs: Any
    ) -> CitationQueryWorkflow:
        """The workflow over ``retriever``, its LLM (unless given), grader, citation policy and
        timeout from ``settings`` (with `citeflow.speedups.with_step_cache` when they ask)."""
        llm = llm or build_llm(settings)
        policy = CitationPolicy(
            settings.citations,
            judge=build_judge(settings, llm),
            judge_timeout=settings.llm.timeout,
        )
        build = with_step_cache(cls) if settings.server.step_cache else cls
        return build(
            retriever=retriever,
            llm=llm,
            grader=build_grader(settings, llm),
            retrieval=settings.retrieval,
            policy=policy,
            citation_mode=citation_mode_of(settings),
            trace_content=settings.tracing.content,
            timeout=settings.retrieval.workflow_timeout,
            **kwargs,
        )

    def run(
        self, ctx: Context | None = None, start_event: Any = None, **kwargs: Any
    ) -> WorkflowHandler:
        """`Workflow.run` inside a ``citeflow.answer`` span (`run_in_answer_span`)."""
        return run_in_answer_span(
            lambda: super(CitationQueryWorkflow, self).run(ctx, start_event, **kwargs),
            collection=self.retriever.collection,
            query=kwargs.get("query"),
        )

    # --- helpers -------------------------------------------------------------------------------
    @staticmethod
    def _status(ctx: Context, stage: Stage, description: str, round_: int = 1) -> None:
        ctx.write_event_to_stream(
            StatusEvent(stage=stage, description=description, round=round_, done=stage == "done")
        )

    @staticmethod
    async def _trace(ctx: Context) -> RunTrace:
        trace: RunTrace = await ctx.store.get("trace")
        return trace

    # --- steps ---------------------------------------------------------------------------------
    @step
    async def rewrite(self, ctx: Context, ev: QueryStartEvent) -> RetrieveEvent:
        """Validate the question and, given chat history, condense it into a standalone query."""
        started = time.perf_counter()
        query = " ".join((ev.query or "").split())
        if not query:
            raise EmptyQueryError("the question is empty; ask something about your documents")
        trace = RunTrace(query=query, search_query=query)
        await ctx.store.set("trace", trace)
        if ev.history:
            self._status(ctx, "rewriting", "Rewriting the question")
            waited = time.perf_counter()
            with span("rewrite", turns=len(ev.history)) as current, upstream("LLM"):
                trace.search_query = await condense(self.llm, query, ev.history)
                annotate(current, search_query=trace.search_query)
            trace.timed("llm", waited)
        trace.timed("rewrite", started)
        return RetrieveEvent(query=trace.search_query, round=1)

    @step
    async def retrieve(self, ctx: Context, ev: RetrieveEvent) -> RetrievedEvent:
        """Top-k search of the knowledge base."""
        started = time.perf_counter()
        self._status(ctx, "searching", f"Searching the documents for “{ev.query}”", ev.round)
        with span("retrieve", round=ev.round, query=ev.query) as current, upstream("embedding"):
            ranking = await self.retriever.asearch(ev.query)
            nodes = ranking.scored_by_relevance()
            annotate(current, passages=len(nodes))
        if not nodes and ev.round == 1:
            await self.retriever.check()  # a missing or empty collection: one clear error
        trace = await self._trace(ctx)
        trace.timed("retrieve", started)
        trace.timings["embed"] = trace.timings.get("embed", 0.0) + ranking.embed_seconds
        return RetrievedEvent(query=ev.query, round=ev.round, nodes=nodes)

    @step
    async def grade(self, ctx: Context, ev: RetrievedEvent) -> RelevantNodesEvent | RetryEvent:
        """Keep the relevant hits; when there are none, retry with a new query or fall back."""
        started = time.perf_counter()
        self._status(ctx, "grading", f"Checking {len(ev.nodes)} passages", ev.round)
        with span("grade", round=ev.round, passages=len(ev.nodes)) as current, upstream("LLM"):
            relevant = await self.grader.grade(ev.query, ev.nodes)
            annotate(current, relevant=len(relevant))
        trace = await self._trace(ctx)
        query = trace.query
        keep_best(trace.pool, ev.nodes, key=lambda hit: hit.node.node_id)
        trace.rounds = ev.round
        trace.timed("grade", started)
        if relevant:
            return RelevantNodesEvent(query=query, nodes=relevant, graded_relevant=True)
        if ev.round < self.retrieval.max_rounds:
            return RetryEvent(original_query=query, failed_query=ev.query, round=ev.round + 1)
        best = fallback_hits(trace.pool.values(), self.retrieval)
        return RelevantNodesEvent(query=query, nodes=best, graded_relevant=False)

    @step
    async def reformulate(self, ctx: Context, ev: RetryEvent) -> RetrieveEvent:
        """Word the query differently for the next retrieval round."""
        started = time.perf_counter()
        self._status(ctx, "retrying", f"Nothing relevant yet; retry {ev.round - 1}", ev.round)
        with span("reformulate", round=ev.round) as current, upstream("LLM"):
            query = await reformulate(self.llm, ev.original_query, ev.failed_query, ev.round)
            annotate(current, query=query)
        trace = await self._trace(ctx)
        trace.timed("reformulate", started)
        trace.timed("llm", started)  # the whole step is the LLM call
        return RetrieveEvent(query=query, round=ev.round)

    @step
    async def cite(self, ctx: Context, ev: RelevantNodesEvent) -> CitationSourcesEvent:
        """Split the relevant chunks into numbered sources (also streamed)."""
        started = time.perf_counter()
        self._status(ctx, "citing", f"Preparing sources from {len(ev.nodes)} passages")
        with span("cite", passages=len(ev.nodes), grounded=ev.graded_relevant) as current:
            sources = make_sources(
                ev.nodes,
                ev.query,
                chunk_tokens=self.policy.settings.chunk_size,
                overlap_tokens=self.policy.settings.chunk_overlap,
                max_sources=self.policy.settings.max_sources,
            )
            annotate(current, sources=len(sources))
        trace = await self._trace(ctx)
        trace.grounded = ev.graded_relevant
        trace.timed("cite", started)
        numbered = CitationSourcesEvent(query=ev.query, sources=sources)
        ctx.write_event_to_stream(numbered)  # callers learn the sources before the text cites them
        return numbered

    @step
    async def synthesize(self, ctx: Context, ev: CitationSourcesEvent) -> StopEvent:
        """Write the answer (compact mode, streamed), checking each sentence's citations."""
        started = time.perf_counter()
        trace = await self._trace(ctx)
        if not ev.sources:
            ctx.write_event_to_stream(AnswerDeltaEvent(text=NOT_COVERED_ANSWER))
            synthesis = Synthesis(NOT_COVERED_ANSWER, raw_text=NOT_COVERED_ANSWER)
        else:
            self._status(ctx, "writing", f"Writing the answer from {len(ev.sources)} sources")
            with span("synthesize", sources=len(ev.sources)) as current, upstream("LLM"):
                synthesis = await self.synthesizer.synthesize(
                    ev.query,
                    ev.sources,
                    on_delta=lambda piece: ctx.write_event_to_stream(
                        AnswerDeltaEvent(text=piece.text, citations=list(piece.citations))
                    ),
                )
                if current.is_recording():  # counting the actions re-reads the answer
                    actions = citation_actions(synthesis.citations, synthesis.raw_text)
                    annotate(
                        current,
                        cited=len(synthesis.cited),
                        unsupported=len(synthesis.unsupported),
                        **{f"citations.{action}": count for action, count in actions.items()},
                    )
                if self.trace_content:
                    annotate(
                        current,
                        answer=synthesis.text,
                        **{f"source.{s.number}": s.text for s in ev.sources},
                    )
            trace.timings["llm"] = trace.timings.get("llm", 0.0) + synthesis.llm_seconds
            if synthesis.judge_verdicts:
                trace.timings["judge"] = synthesis.judge_seconds
        trace.timed("synthesize", started)
        self._status(ctx, "done", "Done")
        return StopEvent(
            result=CitedResponse(
                response=synthesis.text,
                source_nodes=[source.with_score() for source in ev.sources],
                sources=list(ev.sources),
                metadata={"collection": self.retriever.collection},
                query=ev.query,
                search_query=trace.search_query,
                cited=synthesis.cited,
                citations=synthesis.citations,
                unsupported=synthesis.unsupported,
                raw_response=synthesis.raw_text,
                grounded=trace.grounded,
                rounds=trace.rounds,
                timings=dict(trace.timings),
                judge_verdicts=synthesis.judge_verdicts,
            )
        )
