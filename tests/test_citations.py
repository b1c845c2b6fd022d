"""The citation check: word support and the repair of each sentence's markers."""

from __future__ import annotations

import asyncio

import pytest

from citeflow.citations.answer import RepairedAnswer, check_text
from citeflow.citations.repair import Citation, CitationPolicy
from citeflow.citations.support import LexicalSupport
from citeflow.citations.text import content_terms, needs_citation
from tests.conftest import STATIN_QUESTION, STATIN_SOURCES


def _check(
    sources: list[str], sentence: str, *, question: str | None = None, **policy: float | bool
) -> tuple[str, list[Citation], bool]:
    """One sentence through the citation check: its text, citations, and whether it is reported
    unsupported."""
    checker = CitationPolicy().with_(**policy).checker(sources, question)
    out = asyncio.run(checker.check(sentence))
    return out.text, out.citations, out.unsupported


async def _check_answer(
    sources: list[str], text: str, question: str | None = None, **policy: float | bool
) -> RepairedAnswer:
    """A whole answer through the citation check, as the workflow checks it while streaming."""
    return await check_text(CitationPolicy().with_(**policy).checker(sources, question), text)


SOURCES = [
    "Viaweb was a company that made software for building online stores. Yahoo bought it in 1998.",
    "The author wrote short stories before college. The stories were awful.",
    "Ducks are waterfowl. They live near ponds.",
]


async def test_a_repeated_sentence_is_left_out_and_a_second_repeat_ends_the_answer() -> None:
    """A model going round in a loop: a sentence it already wrote (markers aside) is left out,
    and after two such repeats the rest of its text is too (the workflow stops reading)."""
    viaweb, stories, ducks = (
        "Yahoo bought Viaweb in 1998 [1].",
        "The author wrote short stories [2].",
        "Ducks live near ponds [3].",
    )
    once = await _check_answer(SOURCES, f"{viaweb} {stories} Yahoo bought Viaweb in 1998. {ducks}")
    assert once.text == f"{viaweb} {stories} {ducks}"
    assert once.repeats == 1 and not once.looping
    assert len(once.citations) == 3
    loop = await _check_answer(SOURCES, f"{viaweb} {stories} {stories} {viaweb} {ducks}")
    assert loop.text == f"{viaweb} {stories}"
    assert loop.looping


def test_support_picks_the_right_source_and_quote() -> None:
    support = LexicalSupport(SOURCES)
    best = support.rank("Yahoo bought Viaweb in 1998.")[0]
    assert best.number == 1
    # "it" needs the sentence before it to name Viaweb: the quote spans both
    assert best.quote.endswith("Yahoo bought it in 1998.")
    assert best.score > 0.9
    assert SOURCES[0][best.quote_start : best.quote_end] == best.quote
    single = support.rank("Yahoo bought it in 1998.")[0]
    assert single.quote == "Yahoo bought it in 1998."
    assert support.score("Yahoo bought Viaweb in 1998.", 3).score < 0.2


def test_a_statement_drawn_from_across_a_source_quotes_only_the_sentences_it_needs() -> None:
    source = (
        "Viaweb made software for online stores. It was based in Cambridge. "
        "Yahoo bought Viaweb in 1998. The price was about 49 million dollars. "
        "Later it became Yahoo Store."
    )
    best = LexicalSupport([source]).rank(
        "Viaweb made store software; Yahoo bought it, and the price was 49 million dollars."
    )
    assert best[0].score > 0.9
    assert best[0].quote == source[: source.index(" Later")]  # not the last sentence


def test_equal_support_ranks_the_source_holding_the_phrase_first() -> None:
    sources = [
        "The rivalry is played in Oregon, between the Ducks and the Beavers, at football games.",
        "The Oregon Ducks football program is the team of the University of Oregon.",
    ]
    ranked = LexicalSupport(sources).rank("Oregon Ducks football")
    assert ranked[0].score == ranked[1].score  # every word in both
    assert [s.number for s in ranked] == [2, 1]
    # with the phrase nowhere, equal support keeps source order
    assert [s.number for s in LexicalSupport(sources[::-1]).rank("football Oregon")] == [1, 2]


def test_equal_phrases_rank_the_source_saying_the_sentence_word_for_word_first() -> None:
    """Two sources hold every word of the sentence in the same order; the one that says it word
    for word ("was a") ranks before the one that says it in another frame."""
    sources = [
        "These are the records of Blue Lantern, a folk band that formed in Leeds in 2001.",
        "Blue Lantern was a folk band that formed in Leeds in 2001.",
    ]
    sentence = "Blue Lantern was a folk band that formed in Leeds in 2001."
    ranked = LexicalSupport(sources).rank(sentence)
    assert ranked[0].score == ranked[1].score
    assert ranked[0].phrase[0] == ranked[1].phrase[0]  # the same content words in order
    assert [s.number for s in ranked] == [2, 1]


async def test_a_marker_moved_among_equals_goes_to_the_evidence_the_answer_cites() -> None:
    """A sentence two sources support equally: its wrong marker moves to the one the answer's
    earlier sentences are cited to; with no such sentence, to the first of them."""
    q = "Which genus has more species, Salvia or Arachis?"
    sources = [
        "Salvia is a genus of plants.",
        "Arachis is a genus of about 70 species.",
        "Salvia has nearly 1000 species of shrubs.",
    ]
    evidence = "Salvia has nearly 1000 species [3]. Arachis has about 70 species [2]. "
    answer = await _check_answer(sources, evidence + "It is Salvia [2].", q)
    assert answer.text == f"{evidence}It is Salvia [3]."
    alone = await _check_answer(sources, "It is Salvia [2].", q)
    assert alone.text == "It is Salvia [1]."


#: the word support at which the model's marker stays, and at which one is moved or added
LOOSE: dict[str, float | bool] = {"support_keep": 0.21, "support_threshold": 0.35}


@pytest.mark.parametrize(
    ("sentence", "expected", "cited"),
    [
        (  # supported: kept
            "The author wrote awful short stories [2].",
            "The author wrote awful short stories [2].",
            [(2, "model")],
        ),
        ("Yahoo bought Viaweb in 1998 [3].", "Yahoo bought Viaweb in 1998 [1].", [(1, "moved")]),
        (  # out of range and unsupported: dropped
            "Quantum chromodynamics explains gluon confinement [7][3].",
            "Quantum chromodynamics explains gluon confinement.",
            [],
        ),
        (  # missing: added
            "Ducks are waterfowl that live near ponds.",
            "Ducks are waterfowl that live near ponds [3].",
            [(3, "added")],
        ),
        (  # a marker written after the stop goes before it, and after a closing quote
            'Yahoo bought Viaweb in "1998." [1]',
            'Yahoo bought Viaweb in "1998" [1].',
            [(1, "model")],
        ),
        (  # the supported marker kept when a sibling is wrong, before the stop
            "Yahoo bought Viaweb in 1998. [3][1]",
            "Yahoo bought Viaweb in 1998 [1].",
            [(1, "model")],
        ),
        (  # and so does one written between two stops
            "Yahoo bought Viaweb in 1998. (Source 1).",
            "Yahoo bought Viaweb in 1998 [1].",
            [(1, "model")],
        ),
        (  # a number written before and after the sentence is cited once, at its end
            "[1] Yahoo bought Viaweb in 1998. [1]",
            "Yahoo bought Viaweb in 1998 [1].",
            [(1, "model")],
        ),
        (  # an abbreviation's stop stays with it, the marker after it
            "Yahoo bought Viaweb in 1998 in the U.S. [1]",
            "Yahoo bought Viaweb in 1998 in the U.S. [1].",
            [(1, "model")],
        ),
        (  # the words that say where are no part of what is checked, and stay with the marker
            "According to Source [3], Yahoo bought Viaweb in 1998.",
            "According to Source [1], Yahoo bought Viaweb in 1998.",
            [(1, "moved")],
        ),
        (
            "Yahoo bought Viaweb in 1998, as stated in Source [3].",
            "Yahoo bought Viaweb in 1998, as stated in Source [1].",
            [(1, "moved")],
        ),
    ],
)
def test_repair(sentence: str, expected: str, cited: list[tuple[int, str]]) -> None:
    text, cits, _ = _check(SOURCES, sentence, **LOOSE)
    assert text == expected
    assert [(c.number, c.origin) for c in cits] == cited
    for c in cits:  # the quote is a passage of the cited source
        assert c.quote and SOURCES[c.number - 1][c.quote_start : c.quote_end] == c.quote


async def test_a_name_with_initials_gets_one_marker_after_the_name() -> None:
    sources = ["Poleconomy was invented by Bruce E. Hatherley and first published in 1980."]
    answer = "Poleconomy was invented by Bruce E. Hatherley in 1980."
    checked = await _check_answer(sources, answer, **LOOSE)
    assert checked.text == "Poleconomy was invented by Bruce E. Hatherley in 1980 [1]."


async def test_a_name_s_exclamation_mark_or_v_gets_no_marker_inside_the_name() -> None:
    sources = [
        "Hey Pa! There's a Goat on the Roof was a children's board game issued by Parker "
        "Brothers in 1966.",
        "Rostker v. Goldberg, 453 U.S. 57 (1981), held that the practice of requiring only men "
        "to register for the draft was constitutional.",
    ]
    answer = (
        "Hey Pa! There's a Goat on the Roof was first published in 1966 [1]. Rostker v. "
        "Goldberg held that requiring only men to register for the draft was constitutional."
    )
    checked = await _check_answer(sources, answer, **LOOSE)
    assert checked.text == (
        "Hey Pa! There's a Goat on the Roof was first published in 1966 [1]. Rostker v. "
        "Goldberg held that requiring only men to register for the draft was constitutional [2]."
    )


async def test_a_ranking_gets_one_marker_after_its_number() -> None:
    sources = ["Manuel Orantes reached a career-high singles ranking of World No. 2 in 1973."]
    answer = "Orantes reached a career-high singles ranking of World No. 2 [1]."
    checked = await _check_answer(sources, answer, **LOOSE)
    assert checked.text == answer


def test_repair_leaves_refusals_and_questions_alone() -> None:
    assert not needs_citation("The documents do not cover Viaweb's stores.")
    assert not needs_citation("I could not find Viaweb's stores in the provided sources.")
    assert needs_citation("The study could not find a link between Viaweb and Yahoo.")  # a finding
    refusal = _check(SOURCES, "The documents do not cover Viaweb stores.", **LOOSE)
    assert refusal[0].endswith("stores.") and not refusal[2]  # not reported unsupported
    question = _check(SOURCES, "What about ducks near ponds?", **LOOSE)
    assert question[1] == [] and not question[2]


def test_repair_disabled_only_validates_numbers() -> None:
    text, cits, unsupported = _check(SOURCES, "Yahoo bought Viaweb [3][8].", **LOOSE, repair=False)
    assert text == "Yahoo bought Viaweb [3]."  # [8] names no source; [3] is not second-guessed
    assert cits == [] and not unsupported


def test_support_backs_what_the_sentence_adds_to_the_question() -> None:
    """The answer's own word ("Fortran") decides the citation, not the question's words the
    sentence repeats ("IBM 1401", which the other source says more of)."""
    sources = [
        "The first programs I tried writing were on the IBM 1401 that our school district used.",
        "I was puzzled by the 1401. The language we used was an early version of Fortran.",
    ]
    question = "What language did the author use on the IBM 1401?"
    answer = "The author used Fortran on the IBM 1401 [1]."
    text, cits, _ = _check(
        sources, answer, question=question, support_keep=0.36, support_threshold=0.6, relative=0.8
    )
    assert text == "The author used Fortran on the IBM 1401 [2]."
    assert [(c.number, c.origin) for c in cits] == [(2, "moved")]
    assert "Fortran" in cits[0].quote
    # weighing the question's words like the others keeps the wrong source
    even = LexicalSupport(sources, question=question, asked_weight=1.0)
    assert even.rank("The author used Fortran on the IBM 1401.")[0].number == 1


def test_a_denial_is_not_supported_by_a_source_that_states_the_opposite() -> None:
    sources = [
        "In 2005 we started Y Combinator, and I worked on it for nine years.",
        "I did not like painting still lives. Jessica was in charge of marketing.",
    ]
    question = "What did the author do at Y Combinator?"
    support = LexicalSupport(sources, question=question)
    policy: dict[str, float | bool] = {"support_keep": 0.33, "support_threshold": 0.55}
    denial = "The author did not work at Y Combinator."
    # "not" is in no quote about Y Combinator: no marker, and reported as unsupported
    assert _check(sources, denial, question=question, **policy) == (denial, [], True)
    statement = "The author worked on Y Combinator for nine years."
    cited = _check(sources, statement, question=question, **policy)[1]
    assert [c.number for c in cited] == [1]
    affirmed = support.score("The author did work at Y Combinator.", 1).score
    assert abs(support.score(denial, 1).score - affirmed / 2) < 1e-9


def test_inflected_and_irregular_forms_meet_their_base() -> None:
    assert content_terms("He bought it") == content_terms("He buys it") == ["buy"]
    assert content_terms("wrote writing writes") == ["write"] * 3
    assert content_terms("programming programs") == ["program"] * 2
    # reporting words say who said it, not what: no source needs to hold them
    assert content_terms("they say, said and says it works") == ["work"]


def test_repair_moves_a_citation_far_below_the_best_source() -> None:
    sources = [
        "Ducks are birds. Geese migrate in autumn.",
        "Ducks are waterfowl birds that live near ponds and lakes.",
    ]
    sentence = "Ducks are waterfowl birds that live near ponds [1]."
    loose = _check(sources, sentence, **LOOSE, relative=0.0)
    assert loose[0] == sentence  # weak, but above the keep floor
    text, cits, _ = _check(sources, sentence, **LOOSE, relative=0.9)
    assert text == "Ducks are waterfowl birds that live near ponds [2]."
    assert [(c.number, c.origin) for c in cits] == [(2, "moved")]


def test_repair_checks_the_statement_and_drops_uncheckable_markers() -> None:
    from citeflow.citations.repair import statement_of

    assert statement_of("Yes, it is true that Yahoo bought Viaweb.") == "Yahoo bought Viaweb."
    assert statement_of("No, it is not true that ducks quack.") == "ducks quack."
    assert statement_of("No evidence links them.") == "No evidence links them."
    # how an answer points at its evidence is no claim of the sources either
    pointed = "This is supported by the results of the study, which found that ducks quack."
    assert statement_of(pointed) == "ducks quack."
    assert statement_of("That is evident from the data showing that ducks quack.") == "ducks quack."
    assert statement_of("Studies show that ducks quack.") == "ducks quack."
    assert statement_of("The sources also indicate that ducks quack.") == "ducks quack."
    assert statement_of("Source 2 found that ducks quack.") == "ducks quack."
    assert statement_of("Ducks show that they quack.") == "Ducks show that they quack."
    kept = "This is supported by no fewer than three trials showing that ducks quack."
    assert statement_of(kept) == kept  # a denial word in the pointer: not taken for framing
    text, cits, _ = _check(
        SOURCES, "Yes, it is true that Yahoo bought Viaweb in 1998 [1].", **LOOSE
    )
    assert text.endswith("[1].") and cits[0].score > 0.9  # "yes", "true" are no evidence
    assert cits[0].sentence.startswith("Yes, it is true")
    text, cits, _ = _check(SOURCES, "Studies show that Yahoo bought Viaweb [2].")
    assert text.endswith("Viaweb [1].") and [c.origin for c in cits] == ["moved"]
    assert _check(SOURCES, "[2].", **LOOSE) == ("", [], False)  # only a marker and its stop
    text, cits, unsupported = _check(SOURCES, "This is stated in [1] and [2].", **LOOSE)
    assert "[" not in text and cits == [] and not unsupported  # it states nothing


def test_markers_opening_a_sentence_move_to_its_end() -> None:
    """The local model sometimes opens a sentence with its marker ("[1] The two main ...")."""
    sources = [
        "Before college the two main things I worked on were writing and programming.",
        "Pet ducks eat leafy greens, peas and sweetcorn.",
    ]
    policy: dict[str, float | bool] = {"support_keep": 0.3, "support_threshold": 0.5}
    opened = "[1] Before college the two main things I worked on were writing and programming."
    text, cits, _ = _check(sources, opened, **policy)
    assert text == opened.removeprefix("[1] ").removesuffix(".") + " [1]."
    assert [(c.number, c.origin) for c in cits] == [(1, "model")]
    mixed = "[1], [2] Pet ducks eat leafy greens, peas and sweetcorn."
    text = _check(sources, mixed, **policy)[0]
    assert text == "Pet ducks eat leafy greens, peas and sweetcorn [2]."  # [1] does not support it
    assert _check(sources, "Pet ducks eat peas [2].", **policy)[0] == "Pet ducks eat peas [2]."
    both = [sources[1], "Pet ducks eat peas."]
    assert _check(both, "Pet ducks eat peas. [1] [2]", **policy)[0] == "Pet ducks eat peas [1][2]."
    # a marker that is the sentence's subject stays named in words
    subject = "[1] shows that before college the two main things were writing and programming."
    text = _check(sources, subject, **policy)[0]
    assert text == "Source 1 " + subject.removeprefix("[1] ").removesuffix(".") + " [1]."
    # on the wrong source, it is moved like any marker: the words that name it are not part of
    # what the sentence states, so they count against no source
    wrong = subject.replace("[1]", "[2]")
    text, cits, unsupported = _check(sources, wrong, **policy)
    assert text == "Source 1 " + subject.removeprefix("[1] ").removesuffix(".") + " [1]."
    assert [(c.number, c.origin) for c in cits] == [(1, "moved")] and not unsupported
    labelled = "Source [2] shows that before college the two main things were writing."
    assert _check(sources, labelled, **policy)[0] == labelled.replace("[2]", "[1]")
    plural = "Sources [2] and [3] say that before college the two main things were writing."
    text, cits, unsupported = _check(sources, plural, **policy)
    assert text == "Source [1] says that before college the two main things were writing."
    assert [(c.number, c.origin) for c in cits] == [(1, "moved")] and not unsupported


async def test_the_contract_over_a_whole_answer_streamed_in_any_chunks() -> None:
    """Every sentence stating something from the sources carries a marker to one that supports
    it; the sentence nothing supports keeps none and is reported; chunking changes nothing."""
    raw = (
        "Yahoo bought Viaweb in 1998 [3]. The author wrote awful short stories. "
        "Ducks are waterfowl [9]. Penguins compose symphonies on the moon [2]. Why? Because."
    )
    policy = CitationPolicy().with_(**LOOSE)
    whole = await check_text(policy.checker(SOURCES), raw)
    assert whole.text == (
        "Yahoo bought Viaweb in 1998 [1]. The author wrote awful short stories [2]. "
        "Ducks are waterfowl [3]. Penguins compose symphonies on the moon. Why? Because."
    )
    assert [(c.number, c.origin) for c in whole.citations] == [
        (1, "moved"),
        (2, "added"),
        (3, "added"),  # [9] names no source: dropped, and the sentence gets its source
    ]
    assert whole.unsupported == ["Penguins compose symphonies on the moon."]
    for size in (1, 3, 7, 40):
        answer = RepairedAnswer(policy.checker(SOURCES))
        streamed = []
        for i in range(0, len(raw), size):
            streamed += await answer.feed(raw[i : i + size])
        streamed += await answer.flush()
        assert "".join(piece.text for piece in streamed).rstrip() == whole.text == answer.text
        assert answer.unsupported == whole.unsupported


async def test_a_copy_of_the_prompt_s_worked_example_is_left_out() -> None:
    """A small model now and then copies the prompt's example into its answer; unless a source
    says it too, that sentence is dropped, not shown or reported as an unsupported claim."""
    copied = "That happens in the evening [1]. The sky is red in the evening and blue in the "
    copied += "morning. [2]"
    answer = await _check_answer(SOURCES, f"Yahoo bought Viaweb [1]. {copied}")
    assert answer.text == "Yahoo bought Viaweb [1]."
    assert answer.unsupported == []
    sky = ["The sky is red in the evening here.", *SOURCES]
    kept = await _check_answer(sky, "The sky is red in the evening [2].")
    assert kept.text == "The sky is red in the evening [1]."


@pytest.mark.parametrize(
    ("pointer", "left"),
    [
        ("This is stated in [2] and [3].", ""),  # only where it is said, and that was wrong
        ("See [3].", ""),
        ("It is shown in [1].", ""),  # even where it was right: "It is shown." says nothing
        ("It is Ducks [2].", " It is Ducks [3]."),  # the marker is no object: a short answer
        ("Ducks were reported in [2].", " Ducks were reported."),  # it says more than where
    ],
)
async def test_a_sentence_that_only_pointed_at_sources_is_left_out(pointer: str, left: str) -> None:
    answer = await _check_answer(SOURCES, f"Yahoo bought Viaweb [1]. {pointer}")
    assert answer.text == f"Yahoo bought Viaweb [1].{left}"


def test_a_bare_decision_is_checked_as_the_question_it_answers() -> None:
    """ "Yes [1]." states the question's claim: its citation is checked against that claim."""
    sources = ["Statins improve clinical outcome after stroke in treated patients.", "Ducks swim."]
    for yes in ("Yes [1].", "The answer is yes [1].", "Yes [2].", "The answer is maybe [1]."):
        text, cits, unsupported = _check(sources, yes, question=STATIN_QUESTION)
        assert [c.number for c in cits] == [1] and text.endswith("[1].") and not unsupported
    # the denial of what the only source affirms: no marker, reported
    assert _check(sources, "No.", question=STATIN_QUESTION) == ("No.", [], True)
    # without a question there is nothing to check a bare "Yes" against
    assert _check(sources, "Yes [1].") == ("Yes.", [], False)


async def test_a_decision_is_cited_to_the_evidence_its_answer_cited() -> None:
    """ "Yes." rests on what the answer said before it: its marker stays on a source the earlier
    sentences are cited to that supports the claim, or moves there, rather than to the
    best-ranked source; and with a judge checking sentences at once, a decision still waits for
    the sentences before it."""
    evidence = "Treated patients recovered sooner [2]. "
    for written, cited in (("Yes [2].", 2), ("Yes [3].", 2), ("Yes [1].", 1)):
        answer = await _check_answer(STATIN_SOURCES, evidence + written, STATIN_QUESTION)
        assert answer.text == f"{evidence}Yes [{cited}]."
    # no earlier citation: the best-ranked source that supports the claim, as before
    alone = await _check_answer(STATIN_SOURCES, "Yes [2].", STATIN_QUESTION)
    assert alone.text == "Yes [1]."


def test_the_question_s_claim_is_cited_to_the_best_ranked_source_that_restates_it() -> None:
    """Studies of the same question restate it alike: "Yes [2]." goes to the best-ranked source
    (Source 1 first) among those within ``decision_relative`` of the best-scoring one: to a
    source that restates it 0.74 as fully when that one ranks first, unless the band is 0.8."""
    q = STATIN_QUESTION
    full = "Statins improve clinical outcome after stroke in treated patients."
    partial = "Statins improve outcome after stroke in many patients."
    assert _check([partial, full], "Yes [2].", question=q)[0] == "Yes [1]."
    assert _check([partial, full], "Yes [2].", question=q, decision_relative=0.8)[0] == "Yes [2]."
    claim = "Pretreatment with statins improves clinical outcome after stroke [2]."
    assert _check([full, partial], claim, question=q)[0].endswith("stroke [1].")
    # part of the claim keeps its marker within the band; more than the claim is held to
    # ``relative`` and moved to the best-supported source
    part = "Statins improve outcome after stroke [2]."
    assert _check([full, partial], part, question=q)[0] == part
    added = full.replace(".", " [2].")
    assert _check([full, partial], added, question=q)[0].endswith("patients [1].")
