"""The perfect-model harness: prompt parsing, the three authors, scoring, and the real workflow
answering with the author over HTTP (fake OpenAI server)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

import pytest
from llama_index.core.llms import ChatMessage
from llama_index.core.schema import Document, TextNode

from citeflow.citations.sources import Source, format_sources
from citeflow.evaluation.dataset import BeirDataset, CorpusDocument, Evidence
from citeflow.evaluation.perfect_answers import golds_of
from citeflow.evaluation.perfect_model import (
    AuthoredSentence,
    Gold,
    PerfectAuthor,
    PerfectModelLLM,
    PerfectScore,
    Variant,
    joins_clauses,
    paraphrase,
    parse_prompt,
    render_reply,
    score_answer,
)
from citeflow.knowledge_base import KnowledgeBase
from citeflow.prompts import CITATION_QA_TEMPLATE, CITATION_REFINE_TEMPLATE, NOT_COVERED_ANSWER
from citeflow.result import CitedResponse
from citeflow.settings import RetrievalSettings, Settings
from citeflow.store import Store
from citeflow.testing.embedding import HashEmbedding
from citeflow.testing.openai_server import FakeOpenAIServer
from citeflow.workflows.citation_query import CitationQueryWorkflow
from tests.settings_helpers import llm_settings

QUESTION = "Who bought Viaweb?"
#: the first sentences of the two passages
S1 = (
    "Viaweb, a company known as a pioneer of online stores, was founded in 1995 by Paul Graham "
    "and Robert Morris (two friends from college)."
)
S2 = "In 1998, Yahoo purchased Viaweb for about 49 million dollars."
P1 = f"{S1} It made software for building shops."
P2 = f"{S2} It became Yahoo Store."
DISTRACTOR = "Ducks are waterfowl birds. They live near ponds, rivers and lakes."
GOLD = Gold(QUESTION, (P1, P2), "Yahoo")


def _source(number: int, text: str, title: str | None = None) -> Source:
    metadata = {"title": title} if title else {}
    return Source(
        number, text, f"doc-{number}", TextNode(text=text, metadata=metadata), 0, len(text)
    )


def _messages(texts: Sequence[str], question: str = QUESTION) -> list[dict[str, str]]:
    """The synthesizer's messages for sources with ``texts`` (numbered from 1)."""
    sources = [_source(i, text, f"doc {i}") for i, text in enumerate(texts, start=1)]
    prompt = CITATION_QA_TEMPLATE.format(context_str=format_sources(sources), query_str=question)
    return [{"role": "system", "content": "Cite."}, {"role": "user", "content": prompt}]


#: the question asked over P1, a distractor and P2
MESSAGES = _messages([P1, DISTRACTOR, P2])
CHAT = [ChatMessage(role=m["role"], content=m["content"]) for m in MESSAGES]


# --- parse_prompt --------------------------------------------------------------------------------


def test_parse_prompt_reads_the_qa_template_without_its_worked_example() -> None:
    sources = [_source(1, P1, "Viaweb (company)"), _source(2, DISTRACTOR), _source(3, P2, "Yahoo")]
    context = format_sources(sources)
    prompt = CITATION_QA_TEMPLATE.format(context_str=context, query_str="  Who bought\tViaweb? ")
    question, parsed = parse_prompt(prompt)
    assert question == "Who bought\tViaweb?"
    assert parsed == [(1, P1), (2, DISTRACTOR), (3, P2)]
    assert "The sky is red" not in " ".join(text for _, text in parsed)


def test_parse_prompt_reads_the_refine_template_and_its_numbering() -> None:
    context = format_sources([_source(4, P2, "Yahoo"), _source(5, DISTRACTOR)], first_number=4)
    prompt = CITATION_REFINE_TEMPLATE.format(
        context_str=context,
        query_str="Who bought Viaweb,\nand when?",
        existing_answer="Viaweb was founded in 1995 [1].\n\nSources: none.",
    )
    question, parsed = parse_prompt(prompt)
    assert question == "Who bought Viaweb,\nand when?"
    assert parsed == [(4, P2), (5, DISTRACTOR)]
    assert parse_prompt("Just a question?") == ("", [])


# --- the authors ---------------------------------------------------------------------------------


def test_verbatim_author_copies_the_first_evidence_sentence_of_each_supporting_source() -> None:
    author = PerfectAuthor([GOLD], "verbatim")
    assert author.reply(MESSAGES) == (
        "Viaweb, a company known as a pioneer of online stores, was founded in 1995 by Paul "
        "Graham and Robert Morris (two friends from college) [1]. In 1998, Yahoo purchased "
        "Viaweb for about 49 million dollars [3]. The answer is Yahoo [3]."
    )
    assert author.authored(MESSAGES) == [
        AuthoredSentence(S1, frozenset({1}), (1,)),
        AuthoredSentence(S2, frozenset({3}), (3,)),
        AuthoredSentence("The answer is Yahoo.", frozenset({3}), (3,)),
    ]
    # a ChatMessage conversation is read the same way
    assert author.reply(CHAT) == author.reply(MESSAGES)


def test_paraphrase_author_rewords_but_keeps_the_facts_and_the_citations() -> None:
    author = PerfectAuthor([GOLD], "paraphrase")
    assert author.reply(MESSAGES) == (
        "Viaweb, a company called a pioneer of online stores, was established in 1995 by Paul "
        "Graham and Robert Morris [1]. Yahoo bought Viaweb for about 49 million dollars in "
        "1998 [3]. The answer is Yahoo [3]."
    )
    authored = author.authored(MESSAGES)
    assert [(s.correct, s.written) for s in authored] == [
        (frozenset({1}), (1,)),
        (frozenset({3}), (3,)),
        (frozenset({3}), (3,)),
    ]
    assert authored[1].text == "Yahoo bought Viaweb for about 49 million dollars in 1998."


def test_paraphrase_drops_a_connective_and_cuts_a_long_sentence_at_a_clause() -> None:
    long = (
        "However, the museum, which opened in 1950, received approximately 20,000 visitors in "
        "its first year, and it later became the largest museum in the region by floor area."
    )
    assert paraphrase(long) == (
        "The museum, which opened in 1950, got about 20,000 visitors in its first year."
    )
    assert paraphrase("It was built in 1871") == "It was constructed in 1871."


def test_wrong_author_cites_the_next_source_that_supports_nothing() -> None:
    author = PerfectAuthor([GOLD], "wrong")
    authored = author.authored(MESSAGES)
    assert [s.text for s in authored] == [S1, S2, "The answer is Yahoo."]
    assert [(s.correct, s.written) for s in authored] == [
        (frozenset({1}), (2,)),
        (frozenset({3}), (2,)),
        (frozenset({3}), (2,)),
    ]
    assert author.reply(MESSAGES).endswith("49 million dollars [2]. The answer is Yahoo [2].")
    # every source supports: the wrong marker points past the last source
    everything = author.authored(_messages([P1, P2]))
    assert [s.written for s in everything] == [(3,), (3,), (3,)]
    assert [s.correct for s in everything] == [frozenset({1}), frozenset({2}), frozenset({2})]


def test_overlapping_sources_share_a_sentence_which_is_written_once() -> None:
    author = PerfectAuthor([Gold(QUESTION, (P1, P2), "yes")], "verbatim")
    overlap = S1 + " " + S2  # the next chunk repeats the first one's opening sentence
    authored = author.authored(_messages([P1, overlap]))
    assert authored == [
        AuthoredSentence(S1, frozenset({1, 2}), (1,)),
        AuthoredSentence(S2, frozenset({2}), (2,)),
        AuthoredSentence("The answer is yes.", frozenset({1, 2}), (1,)),
    ]


def test_single_sentence_evidence_supports_even_when_short() -> None:
    ducks = "Ducks are birds. Ducks eat seeds. They swim well."
    scifact = Gold("Is it true that ducks eat seeds?", ("Ducks eat seeds.",), "yes")
    author = PerfectAuthor([scifact], "verbatim")
    reply = author.reply(_messages([DISTRACTOR, ducks], scifact.question))
    assert reply == "Ducks eat seeds [2]. The answer is yes [2]."
    # in a paragraph of evidence, a sentence under six words makes no source supporting
    paragraph = Gold(scifact.question, ("Ducks eat seeds. They swim well in ponds and lakes.",))
    author = PerfectAuthor([paragraph], "verbatim")
    assert author.reply(_messages(["Ducks eat seeds."], scifact.question)) == NOT_COVERED_ANSWER


def test_unknown_question_or_no_supporting_source_is_not_covered() -> None:
    author = PerfectAuthor([GOLD], "verbatim")
    assert author.reply(_messages([P1, P2], "Who sold Viaweb?")) == NOT_COVERED_ANSWER
    assert author.authored(_messages([P1, P2], "Who sold Viaweb?")) == []
    assert author.reply(_messages([DISTRACTOR])) == NOT_COVERED_ANSWER
    # the question matches after whitespace normalisation, and the answer sentence is left out
    # when no supporting source holds the answer
    author = PerfectAuthor([Gold(" Who  bought Viaweb? ", (P1,), "Yahoo")], "verbatim")
    assert author.reply(_messages([P1])) == f"{S1[:-1]} [1]."


# --- scoring -------------------------------------------------------------------------------------

AUTHORED = [
    AuthoredSentence("Viaweb was founded in 1995.", frozenset({1}), (1,)),
    AuthoredSentence("In 1998, Yahoo bought Viaweb.", frozenset({3, 4}), (3,)),
    AuthoredSentence("The answer is Yahoo.", frozenset({3, 4}), (3,)),
]


def test_score_counts_correct_markers_kept_moved_and_removed() -> None:
    final = (
        "Viaweb was founded in 1995 [1]. In 1998, Yahoo bought Viaweb [3]. The answer is Yahoo [3]."
    )
    same = score_answer(AUTHORED, final)
    assert (same.sentences, same.correct_written, same.correct_kept, same.unaligned) == (3, 3, 3, 0)
    assert same.kept_rate == 1.0 and same.fixed_or_removed_rate is None
    # punctuation and spacing tidied, a marker moved inside its sentence, one after the period,
    # one moved to the other correct source
    edited = (
        "Viaweb [1] was founded in 1995 . In 1998,Yahoo bought Viaweb [4].\n"
        "The answer is Yahoo. [3]"
    )
    score = score_answer(AUTHORED, edited)
    assert (score.correct_written, score.correct_kept, score.unaligned) == (3, 2, 0)
    assert score.wrong_added == 0  # [4] is correct too
    assert score.kept_rate == 2 / 3
    # one removed
    removed = score_answer(AUTHORED, final.replace(" [1]", "", 1))
    assert (removed.correct_kept, removed.unaligned) == (2, 0)
    # a sentence ending in a word that had a removed marker as its object (tidied away with it)
    cut = [AuthoredSentence("It grew into cells or.", frozenset({1}), (1,))]
    assert score_answer(cut, "It grew into cells or [1].").unaligned == 0
    assert score_answer(cut, "It grew into cells.").unaligned == 0


def test_score_counts_wrong_markers_fixed_removed_kept_and_added() -> None:
    wrong = [AuthoredSentence(s.text, s.correct, (2,)) for s in AUTHORED]
    final = "Viaweb was founded in 1995 [1]. In 1998, Yahoo bought Viaweb [4]. The answer is Yahoo."
    score = score_answer(wrong, final)
    fates = (score.wrong_fixed, score.wrong_removed, score.wrong_kept)
    assert score.wrong_written == 3 and fates == (2, 1, 0)
    assert score.wrong_added == 0
    assert score.correct_written == 0 and score.kept_rate is None
    assert score.fixed_or_removed_rate == 1.0
    # kept, with a number added that is neither written nor correct
    final = "Viaweb was founded in 1995 [2][5]. In 1998, Yahoo bought Viaweb. The answer is Yahoo."
    score = score_answer(wrong, final)
    fates = (score.wrong_fixed, score.wrong_removed, score.wrong_kept)
    assert fates == (0, 2, 1) and score.wrong_added == 1
    assert score.fixed_or_removed_rate == 2 / 3


def test_the_clauses_author_writes_two_to_a_sentence_and_is_scored_clause_by_clause() -> None:
    reply = render_reply(AUTHORED, clauses=True)
    assert reply == (
        "Viaweb was founded in 1995 [1]; In 1998, Yahoo bought Viaweb [3]. The answer is Yahoo [3]."
    )
    # each clause keeps only the numbers on its own words
    final = (
        "Viaweb was founded in 1995 [3]; In 1998, Yahoo bought Viaweb [1]. The answer is Yahoo [3]."
    )
    score = score_answer(AUTHORED, final, clauses=True)
    assert (score.unaligned, score.correct_kept, score.wrong_added) == (0, 1, 2)
    assert score_answer(AUTHORED, reply, clauses=True).kept_rate == 1.0
    # a copied sentence's own semicolons are no joints: only where an authored sentence opens
    stats = [
        AuthoredSentence(
            "OR was 1.49; P was 0.03; CI was 1.05; HR was 0.97; N was 40.", frozenset({2}), (2,)
        ),
        AuthoredSentence("Abstinence rose at 12 weeks.", frozenset({1}), (1,)),
    ]
    reply = render_reply(stats, clauses=True)
    assert reply == (
        "OR was 1.49; P was 0.03; CI was 1.05; HR was 0.97; N was 40 [2]; "
        "Abstinence rose at 12 weeks [1]."
    )
    score = score_answer(stats, reply, clauses=True)
    assert (score.unaligned, score.correct_kept) == (0, 2)


def test_a_reworded_sentence_is_unaligned_and_keeps_nothing() -> None:
    final = "Viaweb started in 1995 [1]. In 1998, Yahoo bought Viaweb [3]. The answer is Yahoo [3]."
    score = score_answer(AUTHORED, final)
    assert (score.unaligned, score.correct_written, score.correct_kept) == (1, 3, 2)


def test_sentences_align_in_order() -> None:
    twice = [
        AuthoredSentence("It rained.", frozenset({1}), (1,)),
        AuthoredSentence("It rained.", frozenset({2}), (2,)),
    ]
    score = score_answer(twice, "It rained [1]. It rained [2].")
    assert (score.unaligned, score.correct_kept) == (0, 2)
    # one left: it is the first authored sentence's, whose correct source is not [2]
    once = score_answer(twice, "It rained [2].")
    assert (once.unaligned, once.correct_kept, once.wrong_added) == (1, 0, 1)


def test_scores_merge_field_by_field() -> None:
    a = score_answer(AUTHORED, "Viaweb was founded in 1995 [1].")
    b = score_answer(AUTHORED[1:], "In 1998, Yahoo bought Viaweb [9]. The answer is Yahoo [3].")
    total = PerfectScore.total([a, b])
    assert total == a.merge(b)
    for field in fields(PerfectScore):
        assert getattr(total, field.name) == getattr(a, field.name) + getattr(b, field.name)
    assert (total.sentences, total.unaligned, total.correct_kept, total.wrong_added) == (5, 2, 2, 1)
    assert a.merge(PerfectScore()) == a


# --- golds from a dataset -------------------------------------------------------------------------


def test_golds_of_reads_rationales_else_relevant_documents_and_the_answers() -> None:
    texts = {"d1": P1, "d2": P2, "d3": DISTRACTOR}
    dataset = BeirDataset(
        path=Path("mini"),
        split="test",
        corpus={d: CorpusDocument(d, d, text) for d, text in texts.items()},
        queries={"q1": "Viaweb was founded in 1995.", "q2": "Who  bought Viaweb?", "q3": "Ducks?"},
        qrels={"q1": {"d1": 1}, "q2": {"d2": 1, "d1": 0}, "q3": {"d3": 2}},
        evidence={"q1": [Evidence("d1", "SUPPORT", (0,))]},
        sentences={"d1": [S1, "It made software for building shops."]},
        answers={"q2": ["Yahoo", "Yahoo!"], "q3": {"decision": "maybe", "long_answer": "Ponds."}},
    )
    assert golds_of(dataset, list(dataset.queries), "Is it true that {claim}?") == [
        Gold("Is it true that Viaweb was founded in 1995?", (S1,), None),
        Gold("Who bought Viaweb?", (P2,), "Yahoo"),
        Gold("Ducks?", (DISTRACTOR,), "maybe"),
    ]


# --- the LLM and the workflow ---------------------------------------------------------------------


async def test_perfect_model_llm_streams_the_reply_word_by_word() -> None:
    author = PerfectAuthor([GOLD], "verbatim")
    llm = PerfectModelLLM(author)
    deltas = [r.delta async for r in await llm.astream_chat(CHAT) if r.delta]
    assert "".join(deltas) == author.reply(MESSAGES)
    assert len(deltas) == len(author.reply(MESSAGES).split())
    assert (await llm.achat(CHAT)).message.content == author.reply(MESSAGES)
    assert llm.complete(MESSAGES[1]["content"]).text == author.reply(MESSAGES)
    assert llm.authored_for(QUESTION) == author.authored(MESSAGES)
    assert llm.authored_for("Never asked?") == []
    assert llm.metadata.context_window >= 32768 and llm.metadata.is_chat_model


DOCS = {
    "lighthouse": (
        "The Old Harbor Lighthouse was built in 1871 on a rocky point north of the town. It was "
        "designed by the engineer Martha Greene, who also planned the harbor walls. The light "
        "was automated in 1962 and the keeper's house became a small museum."
    ),
    "bridge": (
        "The Iron Creek Bridge was completed in 1903 to carry the railway over the gorge. Its "
        "central span is 140 meters long and was the longest in the region for decades. The "
        "bridge closed to trains in 1988 and now carries walkers and cyclists."
    ),
    "orchard": (
        "Halden Orchard grows more than forty kinds of apples on the hills above the river. The "
        "orchard was founded by the Lind family in 1923 after they left the coast. Every autumn "
        "it holds a cider festival that draws visitors from nearby villages."
    ),
    "ducks": (
        "Ducks are waterfowl birds that live near ponds, rivers and lakes. They eat plants, "
        "seeds and small insects found in shallow water near the shore."
    ),
}
GOLDS = [
    Gold("Who designed the Old Harbor Lighthouse?", (DOCS["lighthouse"],), "Martha Greene"),
    Gold("How long is the central span of the Iron Creek Bridge?", (DOCS["bridge"],), "140 meters"),
    Gold(
        "Was Halden Orchard founded before the Iron Creek Bridge closed to trains?",
        (DOCS["orchard"], DOCS["bridge"]),
        "yes",
    ),
    Gold(
        "When was the Old Harbor Lighthouse automated?",
        ("The light was automated in 1962 and the keeper's house became a small museum.",),
    ),
]


@pytest.mark.parametrize("over_http", [False, True])
@pytest.mark.parametrize("variant", ["verbatim", "paraphrase", "wrong", "clauses", "wrong-clauses"])
async def test_the_workflow_answering_with_the_author_is_scored_from_its_real_answers(
    settings: Settings, store: Store, upstream: FakeOpenAIServer, variant: Variant, over_http: bool
) -> None:
    """Each gold question through the real workflow (top 3 chunks, score-graded at 0.2) over
    `DOCS`, its LLM the author: in process, or behind the fake OpenAI server (the author writing
    for the prompt the server received)."""
    from citeflow.providers.llm import build_llm

    kb = KnowledgeBase(settings, store=store, embed_model=HashEmbedding(), collection="kb")
    kb.add_documents([Document(id_=k, text=v, metadata={"title": k}) for k, v in DOCS.items()])
    author = PerfectAuthor(GOLDS, variant)
    upstream.script(lambda request: author.reply(request.json["messages"]))
    in_process = PerfectModelLLM(author)
    llm = build_llm(llm_settings(upstream), max_retries=0) if over_http else in_process
    retrieval = RetrievalSettings.defaults(relevance_threshold=0.2)
    workflow = CitationQueryWorkflow(retriever=kb.retriever(top_k=3), llm=llm, retrieval=retrieval)
    scores = []
    for gold in GOLDS:
        result: object = await workflow.run(query=gold.question)
        assert isinstance(result, CitedResponse)
        if over_http:
            request = upstream.last_request
            assert request is not None and request.stream
            assert gold.question in request.json["messages"][-1]["content"]
            authored = author.authored(request.json["messages"])
        else:
            authored = in_process.authored_for(gold.question)
        # the streamed reply reached citeflow whole and unchanged (stream_text over astream_chat)
        assert result.raw_response == author.render(authored)
        # every authored sentence found, every written marker counted once, every wrong one given
        # a fate, whatever the variant
        assert authored, f"{variant}: the author found no gold evidence in the sources"
        score = score_answer(authored, str(result), clauses=joins_clauses(variant))
        assert score.sentences == len(authored) and score.unaligned == 0
        assert score.correct_written + score.wrong_written == sum(len(s.written) for s in authored)
        assert score.wrong_kept + score.wrong_fixed + score.wrong_removed == score.wrong_written
        assert 0 <= score.correct_kept <= score.correct_written
        scores.append(score)
    # the right authors wrote only correct markers, the wrong one only wrong ones
    total = PerfectScore.total(scores)
    if not variant.startswith("wrong"):
        assert total.correct_written > 0 and total.wrong_written == 0
        assert total.kept_rate is not None
    else:
        assert total.wrong_written > 0 and total.correct_written == 0
        assert total.fixed_or_removed_rate is not None
