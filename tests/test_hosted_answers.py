"""Forms a hosted model writes that the local one seldom does, checked as the contract says.

Hosted models cite clause by clause ("X [1], and Y [3]."): held to the whole sentence, the source
of the shorter clause supported too little of it and its correct marker was removed, so a marker
is checked against the clause it closes. They name sources in prose ("Per Source 1, X"), which is
no part of what the sentence states; and they answer in tables, whose first row names columns.
"""

from __future__ import annotations

import pytest

from citeflow.citations.answer import check_text
from citeflow.citations.clauses import split_at_conjunctions
from citeflow.citations.repair import CitationPolicy

SOURCES = [
    "Aspirin lowers fever in adults within an hour of a single dose.",
    "Ibuprofen is sold over the counter in most countries.",
    "Paracetamol was discovered in 1877 by Harmon Northrop Morse.",
]
QUESTION = "What lowers fever, and when was paracetamol discovered?"


async def _check(sentence: str) -> tuple[str, list[tuple[int, str]], bool]:
    checker = CitationPolicy().checker(SOURCES, QUESTION)
    out = await checker.check(sentence)
    return out.text, [(c.number, c.origin) for c in out.citations], out.unsupported


@pytest.mark.parametrize(
    ("sentence", "expected", "cited"),
    [
        (  # each clause's own source, though the first clause holds more of the sentence
            "Aspirin lowers fever in adults [1], and paracetamol was discovered in 1877 [3].",
            "Aspirin lowers fever in adults [1], and paracetamol was discovered in 1877 [3].",
            [(1, "model"), (3, "model")],
        ),
        (
            "Aspirin lowers fever [1], ibuprofen is sold over the counter [2], and paracetamol "
            "was discovered in 1877 [3].",
            "Aspirin lowers fever [1], ibuprofen is sold over the counter [2], and paracetamol "
            "was discovered in 1877 [3].",
            [(1, "model"), (2, "model"), (3, "model")],
        ),
        (  # a clause's wrong marker is moved to the source that says that clause
            "Aspirin lowers fever in adults [2], and paracetamol was discovered in 1877 [3].",
            "Aspirin lowers fever in adults [1], and paracetamol was discovered in 1877 [3].",
            [(1, "moved"), (3, "model")],
        ),
        (  # two markers on each other's clause are both moved
            "Aspirin lowers fever in adults [3], and paracetamol was discovered in 1877 [1].",
            "Aspirin lowers fever in adults [1], and paracetamol was discovered in 1877 [3].",
            [(1, "moved"), (3, "moved")],
        ),
        (  # a marker before the last clause holds only what it closes: the rest is cited too
            "Paracetamol was discovered in 1877 [3], while aspirin lowers fever.",
            "Paracetamol was discovered in 1877 [3], while aspirin lowers fever [1].",
            [(1, "added"), (3, "model")],
        ),
        (  # a marker in brackets closes its clause with them
            "Aspirin lowers fever (see [3]), and paracetamol was discovered in 1877 [3].",
            "Aspirin lowers fever (see [1]), and paracetamol was discovered in 1877 [3].",
            [(1, "moved"), (3, "model")],
        ),
        (  # markers side by side close one clause: one moved, the other gone
            "Aspirin lowers fever in adults [2] and [3], while paracetamol was discovered in "
            "1877 [1].",
            "Aspirin lowers fever in adults [1], while paracetamol was discovered in 1877 [3].",
            [(1, "moved"), (3, "moved")],
        ),
        (  # a marker that is a word's object says where, and is left to the sentence
            "This is supported by the study conducted in [3], which found that aspirin lowers "
            "fever in adults.",
            "This is supported by the study conducted in [1], which found that aspirin lowers "
            "fever in adults.",
            [(1, "moved")],
        ),
        (  # a clause closed by a number no source has is cited like one with none
            "Aspirin lowers fever in adults [7], and paracetamol was discovered in 1877 [3].",
            "Aspirin lowers fever in adults [1], and paracetamol was discovered in 1877 [3].",
            [(1, "added"), (3, "model")],
        ),
        (  # one number on two clauses its source says both stays on both
            "Aspirin lowers fever in adults [1], and it works within an hour of a single dose [1].",
            "Aspirin lowers fever in adults [1], and it works within an hour of a single dose [1].",
            [(1, "model")],
        ),
        (  # a marker inside a quotation closes its clause with the quotation
            'Aspirin is said to "lower fever in adults within an hour [2]"; paracetamol was '
            "discovered in 1877 by Morse [2].",
            'Aspirin is said to "lower fever in adults within an hour [1]"; paracetamol was '
            "discovered in 1877 by Morse [3].",
            [(1, "moved"), (3, "moved")],
        ),
        (  # one number written on two clauses goes two ways
            "Aspirin lowers fever in adults [2], and paracetamol was discovered in 1877 [2].",
            "Aspirin lowers fever in adults [1], and paracetamol was discovered in 1877 [3].",
            [(1, "moved"), (3, "moved")],
        ),
    ],
)
async def test_a_marker_is_held_to_the_clause_it_closes(
    sentence: str, expected: str, cited: list[tuple[int, str]]
) -> None:
    text, citations, unsupported = await _check(sentence)
    assert (text, sorted(citations), unsupported) == (expected, cited, False)


@pytest.mark.parametrize(
    ("sentence", "expected", "cited"),
    [
        (  # no marker closes a clause of its own: the sentence's rule (the best source, and
            # those within `relative` of it) decides
            "Aspirin lowers fever in adults and paracetamol was discovered in 1877 [1][3].",
            "Aspirin lowers fever in adults and paracetamol was discovered in 1877 [1].",
            [(1, "model")],
        ),
        (  # "the study [2] which found": the marker names the study, and the claim is what it
            # found: the marker is checked against the whole sentence
            "This is shown by the study [2] which found that aspirin lowers fever in adults.",
            "This is shown by the study [1] which found that aspirin lowers fever in adults.",
            [(1, "moved")],
        ),
        (  # a marker after words that only say where closes no clause
            "According to [3], aspirin lowers fever in adults.",
            "According to [1], aspirin lowers fever in adults.",
            [(1, "moved")],
        ),
    ],
)
async def test_markers_that_close_no_clause_of_their_own_are_held_to_the_sentence(
    sentence: str, expected: str, cited: list[tuple[int, str]]
) -> None:
    text, citations, _ = await _check(sentence)
    assert (text, citations) == (expected, cited)


@pytest.mark.parametrize(
    "sentence",
    [
        "Per Source 1, aspirin lowers fever in adults.",
        "As Source 1 notes, aspirin lowers fever in adults.",
        "In Source 1, aspirin is said to lower fever in adults.",
        "Aspirin lowers fever in adults, according to Source 1.",
        "Aspirin lowers fever in adults (as Document 1 says).",
    ],
)
async def test_a_source_named_in_prose_is_not_what_the_sentence_states(sentence: str) -> None:
    text, citations, unsupported = await _check(sentence)
    assert (citations, unsupported) == ([(1, "added")], False)
    assert text.startswith(sentence[:-1].rstrip(".")) and text.endswith("[1].")


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        (  # the source the sentence names is not the one that says it: both name Source 1
            "Per Source 2, aspirin lowers fever in adults.",
            "Per Source 1, aspirin lowers fever in adults [1].",
        ),
        (
            "As Document 2 shows, aspirin lowers fever in adults [2].",
            "As Document 1 shows, aspirin lowers fever in adults [1].",
        ),
        (  # a number the check drops leaves the list, and the verb agrees with one source
            "Aspirin lowers fever in adults (as Documents 1 and 2 say).",
            "Aspirin lowers fever in adults (as Document 1 says) [1].",
        ),
        (
            "Sources 2 and 3 show that aspirin lowers fever in adults [2][3].",
            "Source 1 shows that aspirin lowers fever in adults [1].",
        ),
        (
            "Source 2 and Source 3 both say that aspirin lowers fever in adults [1][3].",
            "Source 1 says that aspirin lowers fever in adults [1].",
        ),
        (  # each clause names the source its own marker cites
            "Per Source 3, aspirin lowers fever in adults, and Source 1 notes that paracetamol "
            "was discovered in 1877.",
            "Per Source 1, aspirin lowers fever in adults [1], and Source 3 notes that "
            "paracetamol was discovered in 1877 [3].",
        ),
        (  # "(Source 2)" is a marker, moved as one, not a source named in prose
            "Aspirin lowers fever in adults (Source 2), and paracetamol was discovered in 1877 "
            "(Source 1).",
            "Aspirin lowers fever in adults [1], and paracetamol was discovered in 1877 [3].",
        ),
        (  # a number that is no source's is what the sentence says, not where it is from
            "Document 7 says aspirin lowers fever in adults [2].",
            "Document 7 says aspirin lowers fever in adults [1].",
        ),
        (  # no source says it: reported as written
            "Per Source 2, warfarin thins the blood of cats.",
            "Per Source 2, warfarin thins the blood of cats.",
        ),
    ],
)
async def test_a_source_named_in_prose_names_the_source_its_marker_cites(
    sentence: str, expected: str
) -> None:
    text, _, unsupported = await _check(sentence)
    assert (text, unsupported) == (expected, "warfarin" in sentence)


async def test_a_table_s_header_states_nothing_and_a_row_s_marker_stays_in_its_last_cell() -> None:
    table = (
        "| Drug | Fact |\n"
        "|---|---|\n"
        "| Aspirin | lowers fever in adults within an hour |\n"
        "| Paracetamol | discovered in 1877 [2] |"
    )
    checked = await check_text(CitationPolicy().checker(SOURCES, QUESTION), table)
    assert checked.text == (
        "| Drug | Fact |\n"
        "|---|---|\n"
        "| Aspirin | lowers fever in adults within an hour [1] |\n"
        "| Paracetamol | discovered in 1877 [3] |"
    )
    assert checked.unsupported == []
    # a row no source supports is still reported: only the first row of a table is its header
    row = "| Drug | Fact |\n|---|---|\n| Warfarin | thins the blood of cats |"
    checked = await check_text(CitationPolicy().checker(SOURCES, QUESTION), row)
    assert [s.strip() for s in checked.unsupported] == ["| Warfarin | thins the blood of cats |"]


@pytest.mark.parametrize(
    "listing",
    [
        "Sources:\n[1] aspirin.txt\n[3] paracetamol history.pdf",
        "**Sources**\n- [1] aspirin.txt\n- [3] Paracetamol history, page 2",
        "## References\n1. aspirin.txt\n2. ibuprofen.txt",
    ],
)
async def test_a_list_of_sources_closing_the_answer_is_kept_as_written(listing: str) -> None:
    answer = f"Aspirin lowers fever in adults [1].\n\n{listing}"
    checked = await check_text(CitationPolicy().checker(SOURCES, QUESTION), answer)
    assert (checked.text, checked.unsupported) == (answer, [])
    assert [c.number for c in checked.citations] == [1]  # a listed source is not a citation
    # a number no source has is dropped from the list as anywhere else
    checked = await check_text(
        CitationPolicy().checker(SOURCES, QUESTION), f"{answer}\n[9] a document it never saw"
    )
    assert checked.text.endswith("\na document it never saw")


async def test_a_line_that_opens_with_a_marker_outside_a_list_of_sources_is_checked() -> None:
    checked = await check_text(
        CitationPolicy().checker(SOURCES, QUESTION),
        "Aspirin lowers fever in adults [1].\n[2] Paracetamol was discovered in 1877.",
    )
    assert (
        checked.text
        == "Aspirin lowers fever in adults [1].\nParacetamol was discovered in 1877 [3]."
    )


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        (  # no source says both clauses: each keeps the number of the source that says it
            "Aspirin lowers fever in adults, and paracetamol was discovered in 1877 [1][3].",
            "Aspirin lowers fever in adults [1], and paracetamol was discovered in 1877 [3].",
        ),
        (  # sources named in prose, no marker: each clause cited on its own
            "According to Source 1, aspirin lowers fever in adults within an hour, and Source 3 "
            "notes that paracetamol was discovered in 1877.",
            "According to Source 1, aspirin lowers fever in adults within an hour [1], and Source "
            "3 notes that paracetamol was discovered in 1877 [3].",
        ),
        (  # a marker that opens its clause: the whole sentence kept [1] on the clause Source 3
            # says, and removed [2]; each clause finds its own source for the marker it has
            "Source [2] shows that aspirin lowers fever in adults, while Source [1] reports that "
            "paracetamol was discovered in 1877.",
            "Source [1] shows that aspirin lowers fever in adults, while Source [3] reports that "
            "paracetamol was discovered in 1877.",
        ),
        (  # the same with bare markers: the opening one closes the first clause
            "[2] shows that aspirin lowers fever in adults, and [1] says paracetamol was "
            "discovered in 1877.",
            "Source 1 shows that aspirin lowers fever in adults [1], and [3] says paracetamol was "
            "discovered in 1877.",
        ),
        (  # a dash joins two clauses as a semicolon does: each keeps its own source
            "Aspirin lowers fever in adults [1] — and paracetamol was discovered in 1877 [3].",
            "Aspirin lowers fever in adults [1] — and paracetamol was discovered in 1877 [3].",
        ),
        (
            "Aspirin lowers fever in adults [2]—paracetamol was discovered in 1877 [1].",
            "Aspirin lowers fever in adults [1]—paracetamol was discovered in 1877 [3].",
        ),
        (  # an aside between dashes keeps its marker, moved
            "Aspirin lowers fever in adults—see [2]—and paracetamol was discovered in 1877 [3].",
            "Aspirin lowers fever in adults—see [1]—and paracetamol was discovered in 1877 [3].",
        ),
        (  # the words that only said where go with a marker removed inside the sentence
            "According to [1], aspirin lowers fever in adults, and according to [2], paracetamol "
            "was discovered in 1877.",
            "According to [1], aspirin lowers fever in adults, and paracetamol was discovered in "
            "1877 [3].",
        ),
        (
            "Aspirin lowers fever in adults (Source 1), while, as Source [2] notes, paracetamol "
            "was discovered in 1877.",
            "Aspirin lowers fever in adults [1], while, as Source [3] notes, paracetamol was "
            "discovered in 1877.",
        ),
        (  # one source says it all: the sentence's own check, unchanged
            "Aspirin lowers fever in adults, and it works within an hour of a single dose [1].",
            "Aspirin lowers fever in adults, and it works within an hour of a single dose [1].",
        ),
    ],
)
async def test_a_sentence_no_source_says_whole_is_checked_clause_by_clause(
    sentence: str, expected: str
) -> None:
    text, _, unsupported = await _check(sentence)
    assert (text, unsupported) == (expected, False)


async def test_a_clause_no_source_says_leaves_its_sentence_reported_unsupported() -> None:
    text, citations, unsupported = await _check(
        "Aspirin lowers fever in adults, and warfarin thins the blood of cats."
    )
    assert (text, citations, unsupported) == (
        "Aspirin lowers fever in adults [1], and warfarin thins the blood of cats.",
        [(1, "added")],
        True,
    )


async def test_footnote_definitions_and_a_line_leading_into_a_list_state_nothing() -> None:
    answer = (
        "Two drugs are relevant:\n"
        "- Aspirin lowers fever in adults within an hour.[^1]\n"
        "- Paracetamol was discovered in 1877.[^3]\n\n"
        "[^1]: aspirin.txt\n"
        "[^3]: paracetamol.txt"
    )
    checked = await check_text(CitationPolicy().checker(SOURCES, QUESTION), answer)
    assert checked.unsupported == []
    assert checked.text == (
        "Two drugs are relevant:\n"
        "- Aspirin lowers fever in adults within an hour [1].\n"
        "- Paracetamol was discovered in 1877 [3].\n\n"
        "[^1]: aspirin.txt\n"
        "[^3]: paracetamol.txt"
    )


def test_the_and_that_closes_a_list_opens_no_clause() -> None:
    assert split_at_conjunctions("It treats fever, pain, and swelling in adults.") == []
    pieces = split_at_conjunctions("It treats fever in adults, and Morse found it in 1877.")
    assert [p.text for p in pieces] == [
        "It treats fever in adults",
        ", and Morse found it in 1877.",
    ]
    # nor is a quotation's own ", and"
    quoted = 'It aims "to teach players economics, and the ways the government works" [2].'
    assert split_at_conjunctions(quoted) == []
    # a predicate of the sentence's subject is no clause of its own
    assert split_at_conjunctions("It is a drink made of gin and honey, and served hot.") == []


async def test_a_decision_in_a_clause_rests_on_the_clauses_before_it() -> None:
    sources = [
        "Local H is an American rock band formed in Zion, Illinois in 1987.",
        "Local H is a band from the United States of America.",
        "Ducks are waterfowl.",
    ]
    checker = CitationPolicy().checker(sources, "Is Local H from the United States?")
    sentence = (
        "Local H is an American rock band formed in Zion, Illinois in 1987 [1]; the answer is "
        "yes [1]."
    )
    checked = await checker.check(sentence)
    # the decision is cited to the evidence its own sentence's first clause cites, as it would
    # be to an earlier sentence's
    assert checked.text == sentence
    assert [(c.number, c.origin) for c in checked.citations] == [(1, "model")]


async def test_a_bare_yes_answers_nothing_in_a_question_that_asks_for_a_thing() -> None:
    answer = "Yes. Aspirin lowers fever in adults within an hour of a single dose [1]."
    checked = await check_text(CitationPolicy().checker(SOURCES, QUESTION), answer)
    assert (checked.text, checked.unsupported) == (answer, [])  # "What lowers fever, …?"
    # under a yes/no question it says the question's claim, and is cited to its source
    asked = CitationPolicy().checker(SOURCES, "Does aspirin lower fever in adults?")
    checked = await check_text(asked, answer)
    assert checked.text.startswith("Yes [1].") and checked.unsupported == []
