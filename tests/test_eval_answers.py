"""``citeflow eval --answers``: answers recorded from the workflow, re-checked, scored."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from citeflow.errors import InvalidRequestError
from citeflow.evaluation.answers import answer_cache, question_of
from citeflow.evaluation.cli import build_parser, run
from citeflow.evaluation.dataset import load_beir
from citeflow.evaluation.scoring import (
    broken_sentences,
    correct_answer,
    decision_of,
    normalise,
    score_record,
)
from citeflow.settings import Settings
from citeflow.testing.embedding import HashEmbedding
from citeflow.testing.llm import ScriptedLLM
from tests.conftest import MINI, REPO

ESSAY = REPO / "tests" / "data" / "essay_qa"


def test_broken_sentences_are_found_and_clean_ones_pass() -> None:
    broken = [
        "Erika Jayne was born on 10 July 1971, which is.",
        "The Agronomist was created first,.",
        "It won awards for photography .",
        "It was sold [] in 1998.",
        "Twice..",
        "This is supported by the meta-analysis conducted in.",
        "It is stated in [2] and.",
        "further confirms that iron is toxic.",
        "It is supported by Rrp6p. further confirms that iron is toxic.",
        "According to, aspirin works.",
        "Aspirin works, as stated in Source.",
        "Aspirin works, and according to, it is cheap.",
        "Aspirin works, while, as notes, it is cheap.",
    ]
    for sentence in broken:
        assert broken_sentences(sentence) == [sentence], sentence
    # a marker put inside a name: "J. M. Barrie", "Washington, D.C."
    name = "Edward Albee lived a longer life than J [1]."
    assert broken_sentences(f"{name} M. Barrie was born in 1860.") == [name]
    assert broken_sentences("It serves Washington, D.C [1]. Not Boston.") == [
        "It serves Washington, D.C [1]."
    ]
    assert broken_sentences("Hey Pa [1]! There's a Goat on the Roof [1].") == ["Hey Pa [1]!"]
    assert broken_sentences("Rostker v [1]. Goldberg held it [1].") == ["Rostker v [1]."]
    assert broken_sentences("I loved it [1]! It was fun [2].") == []
    # the end of a sentence cut off at an abbreviation's stop, left with no word
    assert broken_sentences("Both reached World No [2]. 2 [2].") == ["2 [2]."]
    assert broken_sentences("It was 458.31 ml [2]. 75 patients died.") == []
    assert broken_sentences("It was founded in 1998 [1].") == []
    assert broken_sentences("It spoke (Arab, Malay...) [2].") == []  # a marker after an ellipsis
    assert broken_sentences("Some say X: others say Y [2].") == []  # the answer's last word
    clean = 'Yahoo bought Viaweb in 1998 [1]. He said "go." It cost $49.5 million... Really?'
    clean += " H. pylori has urease, e.g. the mRNA of iPhone users. Based on a True Story... is it."
    clean += " It works, and according to the label, it is cheap. As shown in Table 2, it works."
    assert broken_sentences(clean) == []


def test_answers_are_read_as_datasets_give_them() -> None:
    assert normalise("The Kansas Song!") == "kansas song"
    assert correct_answer("It is the Kansas Song [2].", ["Kansas song"]) is True
    assert correct_answer("It is the Kansas anthem.", ["Kansas song"]) is False
    assert correct_answer("Yes, they were both born in Ohio [1].", ["yes"]) is True
    assert decision_of("Yes, it does [1].") == "yes"
    assert decision_of("Maybe: the results were mixed.") == "maybe"
    assert decision_of("Statins improve outcome after stroke [2].") == "yes"
    assert decision_of("Statins do not improve outcome [2]. They help.") == "no"
    assert correct_answer("Statins do not help [1].", {"decision": "no"}) is True
    assert correct_answer("Anything.", None) is None


def test_a_question_without_its_mark_is_asked_as_a_question_and_a_claim_as_a_claim() -> None:
    assert question_of("Who was born first, Erika Jayne or Marco Da Silva") == (
        "Who was born first, Erika Jayne or Marco Da Silva?"
    )
    assert question_of("which  came out first, A or B ") == "which came out first, A or B?"
    assert question_of("Who wrote it?") == "Who wrote it?"
    assert question_of('Who recorded "Old and in the Way?"') == 'Who recorded "Old and in the Way?"'
    assert (
        question_of("Whole-genome studies find X.")
        == "Is it true that Whole-genome studies find X?"
    )
    assert question_of("The drug lowers risk.", "Claim: {claim}") == "Claim: The drug lowers risk"


def test_a_record_scores_citations_against_relevant_documents() -> None:
    dataset = load_beir(MINI)
    qid = next(iter(dataset.queries))
    relevant = sorted(dataset.relevant(qid))[0]
    record = {
        "query_id": qid,
        "sources": [{"doc_id": relevant, "text": "x"}, {"doc_id": "elsewhere", "text": "y"}],
        "answer": "Right [1]. Wrong [2]. Past the end [7]. Uncited.",
        "citations": [],
        "unsupported": ["Uncited."],
        "seconds": 2.0,
    }
    score = score_record(record, dataset)
    counts = (score.citations, score.doc_correct, score.with_gold, score.cited_with_gold)
    assert counts == (2, 1, 1, 1)
    assert score.unsupported == 1 and score.figures()["doc_precision"] == 0.5
    # an answer whose sources hold no relevant document: its citation is a retrieval miss
    missed = {**record, "sources": [{"doc_id": "elsewhere", "text": "y"}], "answer": "No [1]."}
    score.add(score_record(missed, dataset))
    figures = score.figures()
    assert figures["doc_precision"] == 0.333 and figures["doc_precision_gold_retrieved"] == 0.5


def _copying_model() -> ScriptedLLM:
    """Answers with the first sentence of Source 1, cited, then a sentence no source holds."""

    def reply(prompt: str) -> str:
        sources = prompt.split("Sources:", 1)[-1]
        first = re.search(r"\[1\][^\n]*\n([^\n]+)", sources)
        sentence = re.split(r"(?<=[.!?])\s", first.group(1))[0] if first else "Nothing."
        return f"{sentence.rstrip('.')} [1]. Penguins compose symphonies on distant moons [1]."

    return ScriptedLLM([reply])


def _eval_answers(settings: Settings, tmp_path: Path, llm: ScriptedLLM, *options: str) -> int:
    """``citeflow eval --retrievers none -q`` of the mini dataset with ``options``, its cache and
    its report (``report.json``) in ``tmp_path``, ``llm`` answering."""
    argv = [str(MINI), "--retrievers", "none", "-q", "--cache-dir", str(tmp_path / "cache")]
    args = build_parser().parse_args([*argv, "--out", str(tmp_path / "report.json"), *options])
    return run(args, settings=settings, embed_model=HashEmbedding(), llm=llm)


def test_eval_answers_records_rechecks_and_prints_the_figures(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.json"
    llm = _copying_model()
    assert _eval_answers(settings, tmp_path, llm, "--answers", "3") == 0
    printed = capsys.readouterr().out
    assert "beir_mini: model's own markers" in printed and "beir_mini: citeflow" in printed
    section = json.loads(out.read_text())["answers"]
    assert section["answered_now"] == 3
    checked = section["rows"]["beir_mini: citeflow"]
    raw = section["rows"]["beir_mini: model's own markers"]
    assert checked["answers"] == raw["answers"] == 3
    # the penguin sentence loses its marker and is reported; the copied one keeps its citation
    assert raw["citations_per_answer"] == 2.0
    assert checked["citations_per_answer"] == 1.0
    assert checked["unsupported_per_answer"] == 1.0
    assert checked["broken_sentences"] == 0
    records = [
        json.loads(p.read_text())
        for p in (tmp_path / "cache" / "answers").glob("*/*.json")
        if p.name != "config.json"
    ]
    assert len(records) == 3
    assert all(
        r["unsupported"] == ["Penguins compose symphonies on distant moons."] for r in records
    )
    # a re-run answers from the recordings: the model is not asked again
    asked = len(llm.prompts)
    assert _eval_answers(settings, tmp_path, llm, "--answers", "3") == 0
    assert len(llm.prompts) == asked
    assert json.loads(out.read_text())["answers"]["answered_now"] == 0


def test_skip_answers_a_later_slice_of_the_questions(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    llm = _copying_model()
    assert _eval_answers(settings, tmp_path, llm, "--skip", "1", "--answers", "2") == 0
    assert "questions 2-3" in capsys.readouterr().out
    asked = [load_beir(MINI).queries[q] for q in list(load_beir(MINI).queries)[1:3]]
    assert len(llm.prompts) == 2 and all(q in p for q, p in zip(asked, llm.prompts, strict=True))
    with pytest.raises(InvalidRequestError, match="--skip 99 leaves no question"):
        _eval_answers(settings, tmp_path, llm, "--skip", "99", "--answers", "1")


def test_the_local_models_answers_key_on_the_llamacpp_build(
    settings: Settings, tmp_path: Path
) -> None:
    """Another llama.cpp build may decode a greedy answer differently: its answers are recorded
    apart. A given LLM (here a scripted one) keys on its name alone."""
    from contextlib import ExitStack

    from citeflow.evaluation.runner import EvalContext
    from citeflow.providers.cpu_build import installed_runtime
    from citeflow.providers.llm import describe_llm

    local = settings.updated(llm={"provider": "local"})
    with ExitStack() as stack:
        context = EvalContext(local, tmp_path, stack, embedder_name="hash")
        dataset = load_beir(MINI)
        configured = answer_cache(dataset, context, describe_llm(local))
        scripted = answer_cache(dataset, context, "ScriptedLLM")
    version, features = installed_runtime()
    assert configured.facts["runtime"] == f"xllamacpp {version} " + "+".join(sorted(features))
    assert "runtime" not in scripted.facts
    assert configured.directory != scripted.directory


def test_the_essay_questions_are_a_dataset() -> None:
    essay = load_beir(ESSAY)
    assert len(essay.queries) == 12
    assert all(essay.relevant(qid) for qid in essay.queries)
    assert all(doc.text for doc in essay.corpus.values())
