"""Citation evaluation against gold evidence: matching, metrics, cache and resume, calibration."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.schema import NodeWithScore

from citeflow.citations.judge import JudgeCheck
from citeflow.citations.markers import strip_markers
from citeflow.citations.repair import Citation, CitationRepairer, RepairPolicy, repair_text
from citeflow.citations.support import LexicalSupport
from citeflow.errors import InvalidRequestError, UpstreamError
from citeflow.evaluation import cli as eval_cli
from citeflow.evaluation.citations import (
    DEFAULT_QUESTION,
    MIN_KEPT,
    TARGET_PRECISION,
    CalibrationRow,
    CitationCheck,
    GenerationCache,
    GoldEvidence,
    Scored,
    SourceRecord,
    Split,
    aggregate,
    areplay,
    calibrate,
    choose_threshold,
    denies,
    evaluate_citations,
    evidence_level,
    evidence_queries,
    expand_record,
    judged_queries,
    question_for,
    repair_policy,
    restates,
    score_answer,
    score_records,
    split_of,
    stance_conflict,
    workflow_sources,
)
from citeflow.evaluation.dataset import BeirDataset, load_beir
from citeflow.evaluation.dense import DenseIndex
from citeflow.evaluation.judging import CachedJudge
from citeflow.query.synthesis import CitationSynthesizer
from citeflow.settings import Settings
from citeflow.workflows.citation_query import CitationQueryWorkflow
from tests.conftest import REPO, SHARED_DATA
from tests.fakes.embedding import HashEmbedding
from tests.fakes.llm import ScriptedLLM

MINI = REPO / "tests" / "data" / "beir_mini"
#: the mini dataset's repair: a low threshold (its toy answers share few words with the sources)
LOOSE = RepairPolicy(threshold=0.35)
STRICT = RepairPolicy(threshold=1.0)
DUCKS = "Ducks are waterfowl birds that live near ponds, rivers and lakes [1]."
PLANTS = "Photosynthesis lets plants turn light into chemical energy [1]."


@pytest.fixture
def mini() -> BeirDataset:
    return load_beir(MINI)


def _citation(number: int, quote: str, source: str) -> Citation:
    start = source.index(quote)
    return Citation(number, "s", quote, start, start + len(quote), 1.0, "model")


# --- claims, halves, questions ------------------------------------------------------------------
def test_question_for_phrases_a_claim_as_a_question() -> None:
    assert (
        question_for("Aspirin reduces stroke risk.")
        == "Is it true that aspirin reduces stroke risk?"
    )
    assert question_for("A high count raises risk") == "Is it true that a high count raises risk?"
    # acronyms, numbers and names with capitals inside keep their case
    assert question_for("BRCA1 mutations  cause cancer.").endswith(
        "that BRCA1 mutations cause cancer?"
    )
    assert question_for("1/2000 in UK have PrP.") == "Is it true that 1/2000 in UK have PrP?"
    assert question_for("Which birds live near ponds?") == "Which birds live near ponds?"
    assert question_for("X causes Y.", "{claim}") == "X causes Y"
    with pytest.raises(InvalidRequestError, match="claim"):
        question_for("X causes Y.", "Is it true?")
    assert eval_cli.DEFAULT_QUESTION == DEFAULT_QUESTION


def test_halves_are_fixed_and_disjoint(mini: BeirDataset) -> None:
    assert [split_of(q) for q in ("q1", "q2", "q3")] == ["evaluation", "calibration", "calibration"]
    assert evidence_queries(mini) == ["q1", "q2"]  # q3's evidence list is empty
    assert evidence_queries(mini, "evaluation") == ["q1"]
    assert evidence_queries(mini, "calibration") == ["q2"]


# --- gold evidence and the metrics ----------------------------------------------------------------
def test_quotes_map_to_the_datasets_sentences(mini: BeirDataset) -> None:
    gold = GoldEvidence(mini)
    text = mini.corpus["d1"].text
    assert gold.gold("q1") == {"d1": frozenset({0, 1})}
    assert gold.gold("q2") == {"d3": frozenset({0}), "d4": frozenset({1})}
    spans = gold.spans("d1")
    assert [text[a:b] for a, b in spans] == mini.sentences["d1"]
    second = text.index("They live")
    assert gold.sentences_in("d1", second, second + 10) == {1}  # a part of one sentence
    assert gold.sentences_in("d1", 0, len(text)) == {0, 1, 2}
    assert gold.sentences_in("d1", 3, 3) == set()
    assert gold.contained("d1", 0, second + 5) == {0}
    assert gold.locate("d1", "They live near ponds") == second
    assert gold.locate("d1", "not in it") == -1


def test_score_answer_counts_correct_strict_and_broken(mini: BeirDataset) -> None:
    gold = GoldEvidence(mini)
    d1, d2, d5 = (mini.corpus[d].text for d in ("d1", "d2", "d5"))
    sources = [SourceRecord("d1", d1), SourceRecord("d2", d2), SourceRecord("d5", d5)]
    citations = [
        _citation(1, "They live near ponds, rivers and lakes.", d1),  # gold: correct, strict
        _citation(1, d1[d1.index("They") :], d1),  # gold + non-gold: correct, not strict
        _citation(2, "Many geese migrate south in autumn and nest near lakes.", d2),  # relevant
        _citation(3, d5.split(". ")[0], d5),  # not relevant
    ]
    answer = "Ducks live near lakes [1]. Geese too [2]. Volcanoes [3]. Nothing [7]."
    score = score_answer(gold, "q1", sources, answer, citations)
    assert (score["citations"], score["correct"], score["strict"], score["relevant"]) == (
        4,
        2,
        1,
        3,
    )
    assert (score["gold"], score["covered"], score["shown"]) == (2, 1, 2)
    assert score["broken_markers"] == 1
    empty = score_answer(gold, "q1", [], "The documents do not cover this question.", [])
    metrics = aggregate([score, empty])
    assert metrics["precision"] == pytest.approx(2 / 4)
    assert metrics["precision_strict"] == pytest.approx(1 / 4)
    assert metrics["doc_precision"] == pytest.approx(3 / 4)
    assert metrics["recall"] == pytest.approx(1 / 4)
    assert metrics["recall_ceiling"] == pytest.approx(2 / 4)
    assert metrics["no_citation_rate"] == 0.5
    assert metrics["broken_rate"] == 0.5
    assert metrics["citations_per_answer"] == 2.0


def test_without_gold_sentences_citations_are_checked_at_document_level(
    mini: BeirDataset,
) -> None:
    plain = load_beir(MINI, evidence=False)
    assert (evidence_level(mini), evidence_level(plain)) == ("sentence", "document")
    assert judged_queries(plain) == ["q1", "q2", "q3", "q4"]  # q3 has no gold sentences
    assert judged_queries(plain, "calibration") == ["q2", "q3"]
    assert judged_queries(mini) == evidence_queries(mini)
    gold = GoldEvidence(plain)
    d1, d2, d5 = (plain.corpus[d].text for d in ("d1", "d2", "d5"))
    sources = [SourceRecord("d1", d1), SourceRecord("d2", d2), SourceRecord("d5", d5)]
    citations = [
        _citation(1, "Ducks are waterfowl birds.", d1),
        _citation(2, "Many geese migrate south in autumn and nest near lakes.", d2),  # relevant
        _citation(3, d5.split(". ")[0], d5),  # not relevant
    ]
    score = score_answer(gold, "q1", sources, "Ducks [1]. Geese [2]. Volcanoes [3].", citations)
    assert (score["citations"], score["correct"], score["strict"], score["relevant"]) == (
        3,
        2,
        2,
        2,
    )
    # the relevant documents (d1, d2) are the gold: both cited, both among the sources
    assert (score["gold"], score["covered"], score["shown"]) == (2, 2, 2)
    alone = score_answer(gold, "q1", sources[2:], "Volcanoes [1].", citations[2:])
    assert (alone["correct"], alone["gold"], alone["covered"], alone["shown"]) == (0, 2, 0, 0)


def test_stance_of_a_sentence_on_the_claim() -> None:
    claim = "Dexamethasone decreases risk of postoperative bleeding."
    assert not denies("Yes, dexamethasone decreases risk of postoperative bleeding.", claim)
    assert denies("No, dexamethasone does not decrease the risk of bleeding.", claim)
    assert denies("No, it is not true that dexamethasone decreases bleeding.", claim)
    assert denies("No, dexamethasone decreases risk of postoperative bleeding.", claim)
    negative = "CHEK2 is not associated with breast cancer."
    # the statement's own negation says what the claim says, whatever the framing
    assert not denies("No, CHEK2 is not associated with breast cancer.", negative)
    assert denies("CHEK2 is associated with breast cancer risk.", negative)
    # the opposite direction about the same thing denies too (SciFact claim 216's evidence)
    impairs = "CX3CR1 on the Th2 cells impairs T cell survival"
    assert denies("This is because CX3CR1 signaling promotes T(H)2 survival in the lungs.", impairs)
    assert not denies("Yes, CX3CR1 impairs the survival of T cells.", impairs)
    assert not denies("CX3CR1 promotes asthma; it impairs T cell survival.", impairs)
    # each of the claim's direction words meets the sentence's nearest: here both go both ways
    enhances = "cSMAC formation enhances weak ligand signalling."
    both = (
        "This is supported by experiments that showed that enhancing cSMAC formation reduced "
        "stimulatory capacity of the weak peptide."
    )
    assert not denies(both, enhances)
    assert restates("Yes, dexamethasone decreases the risk of postoperative bleeding.", claim)
    assert not restates("This is because steroids reduce nausea in children.", claim)


def test_a_correct_citation_that_takes_the_other_side_is_a_stance_conflict() -> None:
    claim = "Ultrasound guidance raises the number of traumatic procedures."
    gold_contra = CitationCheck(1, "d", True, (3,), True, True, "CONTRADICT")
    affirm = "Yes, ultrasound guidance raises the number of traumatic procedures."
    deny = "No, ultrasound guidance does not raise the number of traumatic procedures."
    assert stance_conflict(gold_contra, affirm, claim)
    assert not stance_conflict(gold_contra, deny, claim)
    gold_support = CitationCheck(1, "d", True, (3,), True, True, "SUPPORT")
    assert not stance_conflict(gold_support, affirm, claim)
    assert stance_conflict(gold_support, deny, claim)
    # only correct citations, with a label, on sentences about the claim itself, are judged
    wrong = CitationCheck(1, "d", True, (2,), False, False, "CONTRADICT")
    assert not stance_conflict(wrong, affirm, claim)
    assert not stance_conflict(CitationCheck(1, "d", True, (3,), True, True), affirm, claim)
    assert not stance_conflict(gold_contra, "Needles were inserted by trained nurses.", claim)


def test_stance_precision_counts_conflicts_as_wrong(mini: BeirDataset) -> None:
    gold = GoldEvidence(mini)
    assert (gold.label("q1", "d1"), gold.label("q1", "d2")) == ("SUPPORT", "")
    d1 = mini.corpus["d1"].text
    sources = [SourceRecord("d1", d1)]
    quote = "They live near ponds, rivers and lakes."
    start = d1.index(quote)

    def cite(sentence: str) -> Citation:
        return Citation(1, sentence, quote, start, start + len(quote), 1.0, "model")

    agree = cite("Ducks live near ponds and lakes.")
    disagree = cite("No, ducks do not live near ponds and lakes.")
    score = score_answer(gold, "q1", sources, "x [1]. y [1].", [agree, disagree])
    assert (score["correct"], score["stance_conflicts"]) == (2, 1)
    metrics = aggregate([score])
    assert metrics["precision"] == 1.0
    assert metrics["precision_stance"] == 0.5


def test_choose_threshold_wants_precision_on_enough_pairs() -> None:
    rows = [
        CalibrationRow(0.2, 100, 0.5, 0.9, 0.8),
        CalibrationRow(0.4, 50, 0.91, 0.5, 0.95),
        CalibrationRow(0.6, 10, 1.0, 0.1, 1.0),
    ]
    assert choose_threshold(rows) == rows[1]
    assert choose_threshold(rows, target=0.95) is None  # 0.6 keeps too few pairs
    assert choose_threshold(rows, target=0.95, metric="doc_precision") == rows[1]


# --- replay: repairing a recorded reply gives what the workflow returned ------------------------
SOURCES = [
    "Viaweb was a company that made software for building online stores. Yahoo bought it in 1998.",
    "The author wrote short stories before college. The stories were awful.",
    "Ducks are waterfowl. They live near ponds.",
]


@pytest.mark.parametrize(
    "reply",
    [
        "Yahoo bought Viaweb in 1998 [3]. The author wrote short stories [2][9].\nDucks live near "
        "ponds. Is that all? [1]",
        "  The documents do not cover this question.",
        "Yahoo bought Viaweb in 1998. [3][1] The stories were awful (Source 2).",
    ],
)
async def test_repair_text_replays_the_streaming_synthesis(reply: str) -> None:
    from llama_index.core.schema import NodeWithScore, TextNode

    sources = [
        NodeWithScore(node=TextNode(text=f"Source {i}:\n{t}"), score=1.0)
        for i, t in enumerate(SOURCES, start=1)
    ]
    synthesizer = CitationSynthesizer(
        ScriptedLLM([reply], chunk_words=2), context_budget=900, policy=RepairPolicy(threshold=0.35)
    )
    live = await synthesizer.synthesize("q", sources)
    replayed = repair_text(CitationRepairer(LexicalSupport(SOURCES), threshold=0.35), reply)
    assert live.raw_text == reply
    assert replayed == (live.text, live.citations)


# --- the evaluation, its cache and its resume -----------------------------------------------------
@pytest.fixture
def index(mini: BeirDataset, settings: Settings, tmp_path: Path) -> Iterator[DenseIndex]:
    with DenseIndex.open(
        mini,
        embed_model=HashEmbedding(),
        embedder="hash",
        cache_dir=tmp_path / "index",
        settings=settings,
        progress=False,
    ) as opened:
        yield opened


def _factory(index: DenseIndex, llm: ScriptedLLM) -> Callable[[], CitationQueryWorkflow]:
    return lambda: index.kb.workflow(llm)


def test_evaluation_caches_each_answer_and_resumes(
    mini: BeirDataset, index: DenseIndex, tmp_path: Path
) -> None:
    cache = GenerationCache.for_facts(tmp_path / "gen", "beir_mini", {"llm": "scripted"})
    ids = ["q1", "q2"]
    broken = ScriptedLLM([DUCKS, RuntimeError("the model went away")])
    with pytest.raises(UpstreamError):
        evaluate_citations(
            mini, ids, cache, workflow=_factory(index, broken), policy=LOOSE, progress=False
        )
    assert cache.get("q1", question_for(mini.queries["q1"])) is not None  # kept before the failure
    assert cache.get("q2", question_for(mini.queries["q2"])) is None

    llm = ScriptedLLM(["Photosynthesis lets plants turn light into chemical energy [1]."])
    result = evaluate_citations(
        mini, ids, cache, workflow=_factory(index, llm), policy=LOOSE, progress=False
    )
    assert len(llm.prompts) == 1  # only q2 was generated
    assert (result.queries, result.generated) == (2, 1)
    assert result.info["replay_mismatches"] == 0
    assert result.metrics["broken_rate"] == 0.0
    assert result.metrics["precision"] == 1.0  # both quote gold sentences of relevant documents
    q1 = result.per_query["q1"]
    assert q1["answer"] == DUCKS
    assert q1["citations_checked"][0]["quote"].startswith("Ducks are waterfowl birds.")
    assert q1["citations_checked"][0]["correct"] is True

    # everything cached: no workflow needed, and another threshold is only a replay
    again = evaluate_citations(mini, ids, cache, workflow=None, policy=LOOSE, progress=False)
    assert again.generated == 0 and again.metrics == result.metrics
    strict = evaluate_citations(mini, ids, cache, workflow=None, policy=STRICT, progress=False)
    assert strict.metrics["citations"] <= result.metrics["citations"]

    # a damaged cache file is generated again, not trusted
    cache.path("q1").write_text("{not json")
    llm = ScriptedLLM([DUCKS])
    fixed = evaluate_citations(
        mini, ids, cache, workflow=_factory(index, llm), policy=LOOSE, progress=False
    )
    assert fixed.generated == 1 and fixed.metrics == result.metrics
    assert json.loads((cache.directory / "config.json").read_text()) == {"llm": "scripted"}


def test_the_citation_judge_is_evaluated_and_its_answers_cached(
    mini: BeirDataset, index: DenseIndex, tmp_path: Path
) -> None:
    """With the judge on, the evaluation scores what the workflow answered (the judge's
    rejections included), and a re-run asks the judge nothing."""
    asked: list[str] = []

    class QuoteJudge:  # says No to the duck quote
        async def support(self, sentence: str, quote: str) -> float | None:
            asked.append(quote)
            return 0.1 if quote.startswith("Ducks") else 0.9

    judges = tmp_path / "judge"
    check = JudgeCheck(CachedJudge(judges, "scripted", QuoteJudge))

    def judged_workflow() -> CitationQueryWorkflow:
        workflow = index.kb.workflow(ScriptedLLM([DUCKS, PLANTS]))
        workflow.synthesizer.check = check
        return workflow

    cache = GenerationCache.for_facts(tmp_path / "gen", "beir_mini", {})
    ids = ["q1", "q2"]
    result = evaluate_citations(
        mini, ids, cache, workflow=judged_workflow, policy=LOOSE, progress=False, check=check
    )
    assert result.per_query["q1"]["answer"] == strip_markers(DUCKS)
    assert result.per_query["q2"]["answer"] == PLANTS
    assert result.metrics["citations"] == 1 and result.metrics["precision"] == 1.0
    assert result.info["citation_judge_cut"] == 0.5
    assert result.info["replay_mismatches"] == 0  # the replay judged as the workflow did
    assert len(asked) == 2  # the replay found the workflow's questions in the cache
    record = cache.get("q1", question_for(mini.queries["q1"]))
    assert record is not None and record["citation_judge_cut"] == 0.5

    def no_judge() -> QuoteJudge:
        raise AssertionError("everything is cached: the judge is not built")

    check.judge.save()  # type: ignore[attr-defined]
    again = evaluate_citations(
        mini,
        ids,
        cache,
        workflow=None,
        policy=LOOSE,
        progress=False,
        check=JudgeCheck(CachedJudge(judges, "scripted", no_judge)),
    )
    assert again.metrics == result.metrics and len(asked) == 2
    # without the judge, the same answers keep both citations
    plain = evaluate_citations(mini, ids, cache, workflow=None, policy=LOOSE, progress=False)
    assert plain.metrics["citations"] == 2
    assert plain.info["citation_judge_cut"] is None


def test_cached_answers_without_scores_get_them_from_the_retriever(
    mini: BeirDataset, index: DenseIndex, settings: Settings, tmp_path: Path
) -> None:
    cache = GenerationCache.for_facts(tmp_path / "gen", "beir_mini", {})
    llm = ScriptedLLM([DUCKS])
    first = evaluate_citations(
        mini, ["q1"], cache, workflow=_factory(index, llm), policy=LOOSE, progress=False
    )
    question = question_for(mini.queries["q1"])
    record = cache.get("q1", question)
    assert record is not None
    scores = [s["score"] for s in record["sources"]]
    assert scores and all(isinstance(x, float) for x in scores)  # recorded with the answer

    retriever = index.kb.retriever()

    async def rescore(q: str) -> list[NodeWithScore]:
        return await workflow_sources(retriever, settings, q)

    for source in record["sources"]:  # as cached before scores were recorded
        del source["score"]
    cache.put(record)
    again = evaluate_citations(
        mini, ["q1"], cache, workflow=None, policy=LOOSE, progress=False, rescore=rescore
    )
    backfilled = cache.get("q1", question)
    assert backfilled is not None
    assert [s["score"] for s in backfilled["sources"]] == pytest.approx(scores)
    assert again.metrics == first.metrics

    # sources that are not the retriever's (another index, say) are left without scores
    for source in backfilled["sources"]:
        del source["score"]
    backfilled["sources"][0]["text"] += " (edited)"
    cache.put(backfilled)
    evaluate_citations(
        mini, ["q1"], cache, workflow=None, policy=LOOSE, progress=False, rescore=rescore
    )
    left = cache.get("q1", question)
    assert left is not None and all("score" not in s for s in left["sources"])


def test_model_metrics_show_what_the_repair_fixed(
    mini: BeirDataset, index: DenseIndex, tmp_path: Path
) -> None:
    cache = GenerationCache.for_facts(tmp_path / "gen", "beir_mini", {})
    llm = ScriptedLLM(["Ducks are waterfowl birds [4][9]. They eat insects [1]."])
    result = evaluate_citations(
        mini, ["q1"], cache, workflow=_factory(index, llm), policy=LOOSE, progress=False
    )
    assert result.model_metrics["broken_rate"] == 1.0  # [9] names no source
    assert result.metrics["broken_rate"] == 0.0
    assert "[9]" not in result.per_query["q1"]["answer"]


def test_command_prints_calibration_and_citations(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.json"
    argv = [str(MINI), "--retrievers", "none", "--citations", "5", "--calibrate"]
    argv += ["--cache-dir", str(tmp_path / "cache"), "--out", str(out), "-q"]
    llm = ScriptedLLM([DUCKS])
    embed = HashEmbedding()
    args = eval_cli.build_parser().parse_args(argv)
    assert eval_cli.run(args, settings=settings, embed_model=embed, embedder_name="h", llm=llm) == 0
    printed = capsys.readouterr().out
    assert "support calibration: 1 claims" in printed
    assert "citations: 1 claims with gold evidence" in printed
    assert "model (raw)" in printed and "citeflow" in printed
    assert "nDCG" not in printed  # no retriever asked for
    data = json.loads(out.read_text())
    assert data["retrieval"] == {}
    assert data["citations"]["queries"] == 1
    assert data["calibration"]["rows"][0]["threshold"] == 0.1

    # a re-run needs neither the model nor the index: a model that fails proves it
    failing = ScriptedLLM([RuntimeError("no model")])
    assert (
        eval_cli.run(args, settings=settings, embed_model=embed, embedder_name="h", llm=failing)
        == 0
    )
    again = json.loads(out.read_text())
    assert again["citations"]["generated"] == 0
    assert again["citations"]["metrics"] == data["citations"]["metrics"]
    assert again["calibration"]["rows"] == data["calibration"]["rows"]

    bad = eval_cli.build_parser().parse_args([str(MINI), "--retrievers", "none", "-q"])
    with pytest.raises(InvalidRequestError, match="unknown retriever"):
        eval_cli.run(bad, settings=settings, embed_model=embed, embedder_name="h")


def test_calibration_claims_are_counted_apart_from_evaluation_claims(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--calibration-claims N answers calibration claims without answering evaluation ones."""
    out = tmp_path / "report.json"
    argv = [str(MINI), "--retrievers", "none", "--calibrate", "--calibration-claims", "3"]
    argv += ["--cache-dir", str(tmp_path / "cache"), "--out", str(out), "-q"]
    args = eval_cli.build_parser().parse_args(argv)
    llm = ScriptedLLM([DUCKS])
    assert (
        eval_cli.run(
            args, settings=settings, embed_model=HashEmbedding(), embedder_name="h", llm=llm
        )
        == 0
    )
    data = json.loads(out.read_text())
    assert data["calibration"]["answer_claims"] == 1  # the mini dataset's one calibration claim
    assert data["calibration"]["answers"]
    assert "citations" not in data  # no evaluation-half claim answered
    assert "citations: " not in capsys.readouterr().out


def test_command_checks_citations_at_document_level_without_gold_sentences(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dataset with qrels only (a team's own): citations are checked against its documents."""
    plain = tmp_path / "plain"
    plain.mkdir()
    for name in ("corpus.jsonl", "queries.jsonl", "qrels"):
        source = MINI / name
        if source.is_dir():
            (plain / name).mkdir()
            for f in source.iterdir():
                (plain / name / f.name).write_bytes(f.read_bytes())
        else:
            (plain / name).write_bytes(source.read_bytes())
    out = tmp_path / "report.json"
    argv = [str(plain), "--retrievers", "none", "--citations", "5"]
    argv += ["--cache-dir", str(tmp_path / "cache"), "--out", str(out), "-q"]
    args = eval_cli.build_parser().parse_args(argv)
    llm = ScriptedLLM([DUCKS])
    embed = HashEmbedding()
    assert eval_cli.run(args, settings=settings, embed_model=embed, embedder_name="h", llm=llm) == 0
    assert "judged claims, checked at document level" in capsys.readouterr().out
    data = json.loads(out.read_text())["citations"]
    assert data["info"]["level"] == "document"
    assert list(data["per_query"]) == judged_queries(load_beir(plain), "evaluation")
    q1 = data["per_query"]["q1"]
    assert [c["doc_id"] for c in q1["citations_checked"]] == ["d1"]
    assert q1["citations_checked"][0]["correct"] is True  # d1 is judged relevant to q1

    # --half calibration: the other half's claims (none of them answered above)
    other = eval_cli.build_parser().parse_args([*argv, "--half", "calibration"])
    assert (
        eval_cli.run(other, settings=settings, embed_model=embed, embedder_name="h", llm=llm) == 0
    )
    assert "(calibration half)" in capsys.readouterr().out
    answered = json.loads(out.read_text())["citations"]
    assert answered["info"]["split"] == "calibration"
    assert list(answered["per_query"]) == judged_queries(load_beir(plain), "calibration")
    assert answered["queries"] == 2  # q2 and q3
    assert not set(answered["per_query"]) & set(data["per_query"])

    calibrate = eval_cli.build_parser().parse_args([*argv, "--calibrate"])
    with pytest.raises(InvalidRequestError, match="gold evidence"):
        eval_cli.run(calibrate, settings=settings, embed_model=embed, embedder_name="h", llm=llm)


@pytest.mark.skipif(not (SHARED_DATA / "scifact").is_dir(), reason="SciFact not present")
def test_scifact_halves_split_the_claims_with_evidence() -> None:
    dataset = load_beir(SHARED_DATA / "scifact")
    calibration = evidence_queries(dataset, "calibration")
    evaluation = evidence_queries(dataset, "evaluation")
    assert len(calibration) + len(evaluation) == 188
    assert not set(calibration) & set(evaluation)
    assert 80 <= len(evaluation) <= 108
    gold = GoldEvidence(dataset)
    for qid in calibration + evaluation:  # every gold sentence is found in its abstract
        for doc, sentences in gold.gold(qid).items():
            spans = gold.spans(doc)
            assert all(spans[i][0] >= 0 for i in sentences)


# --- regression slice: frozen SciFact sources and local-model answers, no model needed ----------
FIXTURES = REPO / "tests" / "data" / "scifact_citations"


def _fixture(name: str) -> list[dict[str, Any]]:
    lines = (FIXTURES / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _scifact(split: str = "test") -> BeirDataset:
    if not (SHARED_DATA / "scifact").is_dir():
        pytest.skip("SciFact not present")
    return load_beir(SHARED_DATA / "scifact", split=split)


@pytest.fixture(scope="module")
def scifact() -> BeirDataset:
    return _scifact()


def _default_threshold() -> float:
    return Settings(_env_file=None).support_threshold  # type: ignore[call-arg]


def _default_relevance() -> float:
    return Settings(_env_file=None).citation_relevance  # type: ignore[call-arg]


def _calibration_answers(scifact: BeirDataset) -> dict[str, dict[str, Any]]:
    """The frozen answers of `citeflow eval --calibrate --calibration-claims 101`: every
    calibration-half claim with gold evidence (the first 80 until stop 13)."""
    records = {
        r["query_id"]: expand_record(r, scifact) for r in _fixture("calibration_answers.jsonl")
    }
    assert len(records) == 101 and all(split_of(qid) == "calibration" for qid in records)
    assert list(records) == evidence_queries(scifact, "calibration")
    return records


def _keyword_below() -> float:
    return Settings(_env_file=None).relevance_threshold  # type: ignore[call-arg]


def _default_score_gap() -> float:
    return Settings(_env_file=None).citation_score_gap  # type: ignore[call-arg]


def _answer_precision(
    scifact: BeirDataset,
    records: dict[str, dict[str, Any]],
    threshold: float,
    relevance: float,
    score_gap: float | None = None,
) -> tuple[float, float]:
    if score_gap is None:
        score_gap = _default_score_gap()
    policy = RepairPolicy(threshold, relevance, score_gap, keyword_below=_keyword_below())
    m = score_records(scifact, records, policy, details=False).metrics
    return m["precision"], m["citations"]


def _at_defaults(
    dataset: BeirDataset,
    records: dict[str, dict[str, Any]],
    *,
    score_gap: float | None = None,
    details: bool = True,
) -> Scored:
    """Recorded answers replayed through the repair at the default settings (``score_gap``:
    another gap; 2.0 lets every move through)."""
    policy = repair_policy(Settings(_env_file=None))  # type: ignore[call-arg]
    if score_gap is not None:
        policy = replace(policy, score_gap=score_gap)
    return score_records(dataset, records, policy, details=details)


def test_default_threshold_is_what_the_calibration_chooses(scifact: BeirDataset) -> None:
    """At the default relevance, the default threshold is one of those whose calibration answers
    (frozen, 101) have the best precision on enough citations. 0.40-0.60 keep the same
    citations there, so the answers cannot choose among them (see Settings); above, precision
    falls."""
    records = _calibration_answers(scifact)
    relevance = _default_relevance()
    scores = {
        t: _answer_precision(scifact, records, t, relevance)
        for t in (0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75)
    }
    enough = {t: p for t, (p, n) in scores.items() if n >= MIN_KEPT}
    best = max(enough.values())
    assert enough[_default_threshold()] == best >= TARGET_PRECISION
    assert all(p < best for t, (p, _) in scores.items() if t > 0.6)


def test_default_relevance_is_what_the_calibration_chooses(scifact: BeirDataset) -> None:
    """At the default threshold, the lowest citation relevance with the best precision of the
    calibration answers on enough citations; the values well below it fall short."""
    records = _calibration_answers(scifact)
    threshold = _default_threshold()
    scores = {
        r: _answer_precision(scifact, records, threshold, r)
        for r in (0.0, 0.1, 0.2, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7)
    }
    enough = {r: p for r, (p, n) in scores.items() if n >= MIN_KEPT}
    assert max(enough, key=lambda r: (enough[r], -r)) == _default_relevance()
    assert scores[0.3][0] < 0.75  # the default until stop 10
    assert scores[0.5][0] < scores[0.6][0]  # the default until stop 13


def test_default_score_gap_is_what_the_calibration_chooses(scifact: BeirDataset) -> None:
    """The smallest gap (steps of 0.01) that loses none of the calibration answers' citations
    (frozen, 101): moves to sources the retriever ranks well below the best are the wrong ones."""
    records = _calibration_answers(scifact)
    threshold, relevance = _default_threshold(), _default_relevance()
    unlimited = _answer_precision(scifact, records, threshold, relevance, score_gap=2.0)
    keeps_all = [
        gap / 100
        for gap in range(0, 11)
        if _answer_precision(scifact, records, threshold, relevance, gap / 100) == unlimited
    ]
    assert min(keeps_all) == _default_score_gap()
    narrower = round(_default_score_gap() - 0.01, 2)
    assert _answer_precision(scifact, records, threshold, relevance, narrower)[1] < unlimited[1]


def test_support_scorer_on_calibration_claims(scifact: BeirDataset) -> None:
    """Claim-level precision/recall of the support threshold (frozen sources, 101 claims)."""
    rows = _fixture("calibration_sources.jsonl")
    known = {
        r["question"]: [SourceRecord(d, scifact.corpus[d].text[a:b]) for d, a, b in r["sources"]]
        for r in rows
    }

    async def sources_for(question: str) -> list[SourceRecord]:
        return known[question]

    report = calibrate(
        scifact, sources_for, query_ids=[r["query_id"] for r in rows], progress=False
    )
    at = {round(r.threshold, 2): r for r in report.rows}[_default_threshold()]
    assert (report.claims, report.pairs) == (101, 403)
    assert at.precision >= CLAIMS_PRECISION
    assert at.recall >= CLAIMS_RECALL
    assert at.doc_precision >= CLAIMS_DOC_PRECISION


# measured at the default threshold 0.55: precision 0.692, recall 0.161, doc precision 0.885 on
# 26 pairs kept. Before the direction rule (support.DIRECTION_PENALTY): 0.733, 0.196, 0.900 on 29;
# the 3 pairs it dropped are claims whose gold sentence contradicts them ("PD-1 triggering reduces
# IL-10 production" against "... induced IL-10 production"), which this label-blind table counts
# as correct. (Sources chosen by question coverage since; before, at 0.60: 0.824, 0.212, 0.882,
# with a gold sentence in 81 of the sources instead of 112.)
CLAIMS_PRECISION = 0.67
CLAIMS_RECALL = 0.15
CLAIMS_DOC_PRECISION = 0.86


def test_local_model_answers_keep_their_citation_quality(scifact: BeirDataset) -> None:
    """40 answers of the local model (evaluation half) replayed through today's repair."""
    records = {r["query_id"]: expand_record(r, scifact) for r in _fixture("answers.jsonl")}
    assert len(records) == 40 and all(split_of(q) == "evaluation" for q in records)
    scored = _at_defaults(scifact, records)
    final, model = scored.metrics, scored.model_metrics
    unlimited = _at_defaults(scifact, records, score_gap=2.0, details=False).metrics
    assert final["precision"] > unlimited["precision"] + 0.1  # what the score gap adds
    assert final["broken_rate"] == 0.0
    assert final["precision"] >= ANSWERS_PRECISION
    assert final["precision_stance"] >= ANSWERS_STANCE
    assert final["doc_precision"] >= ANSWERS_DOC_PRECISION
    assert final["recall"] >= ANSWERS_RECALL
    assert final["no_citation_rate"] <= ANSWERS_NO_CITATION
    # the repair is what makes them better than the model's own markers
    assert final["precision"] > model["precision"] + 0.4
    assert final["doc_precision"] > model["doc_precision"] + 0.05


# measured at the stop-13 defaults (threshold 0.55, citation relevance 0.6, score gap 0.05):
# precision 1.000 on 8 citations, stance ok 1.000, doc precision 1.000, recall 0.087, no citation
# 0.850, broken 0; without the score gap 0.750 on 12. Before (relevance 0.5, gap 0.04,
# Qwen2.5-Coder-1.5B Q4_K_M): precision 1.000 on 12 citations, stance ok 0.833 (2 conflicts: "male
# prisoners ten times female" quoting "female ten times male", which no word rule sees, and one the
# heuristic flags wrongly), doc precision 1.000, recall 0.138 (ceiling 0.725), no citation 0.750,
# broken 0 (the model's own markers: 0.373, 0.784, 0.225). Before the direction rule: 1.000 on 13,
# stance ok 0.769 ("dexamethasone decreases risk of postoperative bleeding" quoted "... an increased
# risk of postoperative bleeding"). Without the score gap: 0.824 on 17.
ANSWERS_PRECISION = 0.92
ANSWERS_STANCE = 0.9
ANSWERS_DOC_PRECISION = 0.92
ANSWERS_RECALL = 0.08
ANSWERS_NO_CITATION = 0.87


@pytest.fixture(scope="module")
def scifact_train() -> BeirDataset:
    return _scifact("train")


def _train_answers(
    scifact_train: BeirDataset, name: str, half: Split, claims: int
) -> dict[str, dict[str, Any]]:
    """A frozen file of answers to SciFact train claims: the first ``claims`` of ``half``."""
    records = {r["query_id"]: expand_record(r, scifact_train) for r in _fixture(name)}
    assert len(records) == claims
    assert list(records) == judged_queries(scifact_train, half)[:claims]
    return records


# measured on the 373 train claims of the evaluation half (document level) at the stop-13 defaults:
# precision 0.881 on 59 citations, recall 0.111, no citation 0.855; without the score gap 0.846 on
# 65. At the stop-12 defaults (relevance 0.5, gap 0.04): precision 0.841 on 88 (kept model markers
# 0.807 on 57, moved 0.833 on 18, added 1.000 on 13), recall 0.146 (ceiling 0.664), no citation
# 0.799, broken 0; the model's own markers 0.558; without the score gap 0.800 on 100. Of the 14
# "wrong", 5 quote a sentence stating the claim from an abstract the qrels do not judge.
TRAIN_CLAIMS = 373
TRAIN_CITATIONS = 55
TRAIN_PRECISION = 0.87


def test_local_model_answers_to_untouched_claims_at_document_level(
    scifact_train: BeirDataset,
) -> None:
    """The local model's answers to SciFact train claims (evaluation half), which no setting was
    chosen on, replayed through today's repair and checked against the train qrels."""
    records = _train_answers(scifact_train, "train_answers.jsonl", "evaluation", TRAIN_CLAIMS)
    scored = _at_defaults(scifact_train, records)
    final, model = scored.metrics, scored.model_metrics
    assert final["citations"] >= TRAIN_CITATIONS
    assert final["precision"] >= TRAIN_PRECISION
    assert final["precision"] > model["precision"] + 0.2  # what the repair adds
    assert final["broken_rate"] == 0.0
    unlimited = _at_defaults(scifact_train, records, score_gap=2.0, details=False).metrics
    assert final["precision"] > unlimited["precision"]  # the score gap holds on fresh claims


# measured on the 436 train claims of the calibration half (document level), answered after the
# stop-13 defaults were fixed and never used to choose anything: precision 0.866 on 67 citations,
# recall 0.107 (ceiling 0.631), no citation 0.865, broken 0; the model's own markers 0.560. The
# first 220: 0.879 on 33 (kept model markers 0.909 on 22, moved 0.750 on 8, added 1.000 on 3;
# stop-12 defaults 0.870 on 46); the other 216: 0.853 on 34 (stop-12 defaults 0.800 on 55).
FRESH_CLAIMS = 436
FRESH_CITATIONS = 60
FRESH_PRECISION = 0.85


def test_local_model_answers_to_a_second_untouched_set(scifact_train: BeirDataset) -> None:
    """The local model's answers to SciFact train claims of the calibration half (nothing was
    calibrated on train: it has no gold sentences), answered once the defaults were fixed."""
    records = _train_answers(
        scifact_train, "train_calibration_answers.jsonl", "calibration", FRESH_CLAIMS
    )
    scored = _at_defaults(scifact_train, records)
    final, model = scored.metrics, scored.model_metrics
    assert final["citations"] >= FRESH_CITATIONS
    assert final["precision"] >= FRESH_PRECISION
    assert final["precision"] > model["precision"] + 0.2  # what the repair adds
    assert final["broken_rate"] == 0.0


def test_calibration_answers_keep_no_citation_that_takes_the_other_side(
    scifact: BeirDataset,
) -> None:
    """The 101 frozen calibration answers: every correct citation's sentence agrees with its
    evidence's label (on the first 80 before the direction rule, 2 of 23 quoted the gold sentence
    contradicting "Yes, X"; the rule dropped them and nothing else)."""
    metrics = _at_defaults(scifact, _calibration_answers(scifact), details=False).metrics
    assert metrics["stance_conflicts"] == 0
    assert metrics["citations"] >= 20  # measured 21 (101 answers, stop-13 defaults)
    assert metrics["precision"] >= 0.9  # measured 0.905


class FrozenJudge:
    """The local judge's verdicts on the frozen answers' citations (``judge_verdicts.json``)."""

    def __init__(self) -> None:
        self.verdicts = json.loads((FIXTURES / "judge_verdicts.json").read_text(encoding="utf-8"))

    async def support(self, sentence: str, quote: str) -> float | None:
        key = CachedJudge.key(sentence, quote)
        assert key in self.verdicts, "a citation no verdict was frozen for: run freeze.py"
        verdict: float | None = self.verdicts[key]
        return verdict


async def _judged(dataset: BeirDataset, records: dict[str, dict[str, Any]]) -> dict[str, float]:
    """The frozen answers as the default workflow answers: the repair, then the local judge."""
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    check = JudgeCheck(FrozenJudge(), cut=settings.citation_judge_cut)
    policy = repair_policy(settings)
    replayed = {q: await areplay(r, policy, check) for q, r in records.items()}
    return score_records(dataset, records, policy, replayed=replayed, details=False).metrics


async def test_the_local_judge_makes_the_untouched_citations_more_precise(
    scifact: BeirDataset, scifact_train: BeirDataset
) -> None:
    """The default judge (local model, P(Yes) 0.5) over every frozen answer: all 809 SciFact
    train claims (document level) and the 101 calibration claims (sentence level)."""
    train = {
        **_train_answers(scifact_train, "train_answers.jsonl", "evaluation", TRAIN_CLAIMS),
        **_train_answers(
            scifact_train, "train_calibration_answers.jsonl", "calibration", FRESH_CLAIMS
        ),
    }
    judged = await _judged(scifact_train, train)
    unjudged = _at_defaults(scifact_train, train, details=False).metrics
    assert judged["precision"] > unjudged["precision"]
    assert judged["citations"] >= JUDGED_TRAIN_CITATIONS
    assert judged["precision"] >= JUDGED_TRAIN_PRECISION
    records = {
        r["query_id"]: expand_record(r, scifact) for r in _fixture("calibration_answers.jsonl")
    }
    calibration = await _judged(scifact, records)
    assert calibration["citations"] >= JUDGED_CALIBRATION_CITATIONS
    assert calibration["precision"] >= JUDGED_CALIBRATION_PRECISION


# measured (stop 14): all 809 train claims, 0.901 on 101 citations (without the judge 0.873 on
# 126); the 101 calibration claims at sentence level, 0.944 on 18 (without: 0.905 on 21)
JUDGED_TRAIN_CITATIONS = 95
JUDGED_TRAIN_PRECISION = 0.89
JUDGED_CALIBRATION_CITATIONS = 16
JUDGED_CALIBRATION_PRECISION = 0.92
