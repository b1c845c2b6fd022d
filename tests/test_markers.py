"""Citation markers: every form models write is read, and removing one leaves clean text."""

from __future__ import annotations

import pytest

from citeflow.citations.markers import (
    cited_numbers,
    find_markers,
    remove_markers,
    renumber,
    strip_markers,
)
from citeflow.citations.stream import SentenceStream


@pytest.mark.parametrize(
    ("text", "numbers"),
    [
        ("A [1].", [(1,)]),
        ("A [1, 2].", [(1, 2)]),
        ("A [1,2][3].", [(1, 2), (3,)]),
        ("A [1-3].", [(1, 2, 3)]),
        ("A [2–4].", [(2, 3, 4)]),
        ("A [1-40].", [(1, 40)]),  # a range too long to mean itself: its two ends
        ("A [Source 2].", [(2,)]),
        ("A (Source 1).", [(1,)]),
        ("A (Sources 1, 2).", [(1, 2)]),
        ("A 【3】.", [(3,)]),
        ("A 【3†source】.", [(3,)]),
        ("A [^4].", [(4,)]),
        ("It was founded in 1998 (2).", [(2,)]),
        ('He said "go" (1), and left.', [(1,)]),
        ("[1] Opens a sentence.", [(1,)]),
    ],
)
def test_every_form_is_read(text: str, numbers: list[tuple[int, ...]]) -> None:
    assert [m.numbers for m in find_markers(text)] == numbers


@pytest.mark.parametrize(
    "text",
    [
        "In (2019) it rained.",
        "(1) first item",
        "Step (2): mix the flour.",
        "Do option (3).",
        "Compute f(x) = (2 + 3).",
    ],
)
def test_numbers_in_brackets_that_are_not_markers_stay(text: str) -> None:
    assert find_markers(text) == []
    assert strip_markers(text) == text


def test_removal_leaves_no_broken_sentence() -> None:
    assert strip_markers("Erika Jayne was born on 10 July 1971, which is [2].") == (
        "Erika Jayne was born on 10 July 1971."
    )
    assert strip_markers("The Agronomist was created first, [3].") == (
        "The Agronomist was created first."
    )
    assert strip_markers('It won prizes for photography." [2].') == (
        'It won prizes for photography."'
    )
    assert remove_markers("X [1], and Y [2].", [1]) == "X, and Y [2]."
    assert remove_markers("X [1][3] and Y [2-3].", [3]) == "X [1] and Y [2]."
    assert renumber("A [1]. B [2].", {2: 1}) == "A. B [1]."


def test_lists_and_tables_keep_their_shape() -> None:
    listed = "- Paris is big [1]\n- Rome is old [2]\n1. Oslo is cold [3]"
    assert strip_markers(listed) == "- Paris is big\n- Rome is old\n1. Oslo is cold"
    table = "| city | fact |\n| --- | --- |\n| Paris | capital [1] |\n| Rome | old [2] |"
    assert strip_markers(table) == (
        "| city | fact |\n| --- | --- |\n| Paris | capital |\n| Rome | old |"
    )
    assert cited_numbers(table) == [1, 2]


SENTENCES = [
    "Yahoo bought Viaweb in 1998 [1].",
    "Yahoo bought Viaweb in 1998 [1][2].",
    "Yahoo bought Viaweb [1], for about $49 million [2].",
    "The author wrote short stories [Source 2], which were awful.",
    "It cost 49.5 million dollars (Source 3).",
    "Ducks live near ponds 【1】 and rivers 【2†source】.",
    "He said it worked [^1]... or so he thought.",
    "The answer is yes [1][2][3].",
    "[1] The two main things were writing and programming.",
    "Was it founded in 1998 [2]?",
    "It was founded in 1998 (2), and sold in 2003 (3).",
    'The film was called "Alien" [4].',
    "They won, which is [2].",
    "It rose to 40% [1-3]; then it fell [4].",
    "Some say X [1]: others say Y [2].",
    "A list follows [1]:\n- one [2]\n- two [3]",
    "Bel is a spec [1] rather than an implementation [2].",
    "Results were mixed [1], [2].",
    "It is large, with 9,984 people [2].",
    "See the table [1] . It helps [2] .",
]


def test_no_removal_leaves_broken_text() -> None:
    for sentence in SENTENCES:
        for cleaned in (strip_markers(sentence), renumber(sentence, {})):
            for bad in (" .", " ,", ",.", " ;", "[]", "()", "【】", "  ", " \n"):
                assert bad not in cleaned, (sentence, cleaned, bad)
            assert ".." not in cleaned.replace("...", ""), (sentence, cleaned)


def test_a_fullwidth_marker_after_the_stop_stays_with_its_sentence() -> None:
    stream = SentenceStream()
    assert stream.feed("A is b. 【1】 C is d [2]. E") == ["A is b. 【1】 ", "C is d [2]. "]
