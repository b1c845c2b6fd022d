"""Citation markers: every form models write is read, nothing else is, and removing markers
leaves clean text with lists and tables intact."""

from __future__ import annotations

import re

import pytest

from citeflow.citations.markers import (
    cited_numbers,
    find_markers,
    remove_markers,
    render,
    renumber,
    strip_markers,
)
from citeflow.citations.sources import strip_footnotes
from citeflow.citations.stream import SentenceStream
from citeflow.evaluation.scoring import broken_sentences


@pytest.mark.parametrize(
    ("text", "numbers"),
    [
        ("A [1].", [(1,)]),
        ("A [1, 2].", [(1, 2)]),
        ("A [1][2].", [(1,), (2,)]),
        ("A [1,2][3].", [(1, 2), (3,)]),
        ("A [1-3].", [(1, 2, 3)]),
        ("A [2–4].", [(2, 3, 4)]),  # en dash
        ("A [1 - 3].", [(1, 2, 3)]),
        ("A [1-20].", [tuple(range(1, 21))]),  # twenty numbers: still a range
        ("A [1-21].", [(1, 21)]),  # longer: only its two ends
        ("A [3-1].", [(3, 1)]),  # reversed: only its two ends
        ("A [1-999].", [(1, 999)]),
        ("A [1]-[3].", [(1, 2, 3)]),
        ("A [2] – [4].", [(2, 3, 4)]),
        ("A [Source 2].", [(2,)]),
        ("A [Sources 1, 2].", [(1, 2)]),
        ("A (Source 1).", [(1,)]),
        ("A (Sources 1, 2).", [(1, 2)]),
        ("A (Source: 2).", [(2,)]),
        ("A (see Source 2).", [(2,)]),
        ("A (see also Sources 1, 3).", [(1, 3)]),
        ("A [Sources: 1, 3].", [(1, 3)]),
        ("A 【3】.", [(3,)]),
        ("A 【3†source】.", [(3,)]),
        ("A [^4].", [(4,)]),
        ("A [^1][^2].", [(1,), (2,)]),
        ("It was founded in 1998 (2).", [(2,)]),
        ("It was founded (1), and sold.", [(1,)]),
        ("It was founded (1, 2).", [(1, 2)]),
        ("It was founded (1)(2).", [(1, 2)]),
        ('He said "go" (1), and left.', [(1,)]),
        ("Was it sold (3)?", [(3,)]),
        ("[1] Opens a sentence.", [(1,)]),
        ("- Paris is big [1]\n1. Rome is old [2]", [(1,), (2,)]),
        ("| Paris | capital [1] |\n| Rome | old [2][3] |", [(1,), (2,), (3,)]),
        (
            "A [1]. B [2, 3]. C [4][5]. D (Source 6). E [Source 7]. F [^8].",
            [(1,), (2, 3), (4,), (5,), (6,), (7,), (8,)],
        ),
    ],
)
def test_every_form_is_read(text: str, numbers: list[tuple[int, ...]]) -> None:
    assert [m.numbers for m in find_markers(text)] == numbers


def test_a_marker_spans_exactly_its_text() -> None:
    text = "Yahoo bought Viaweb (2), then 【1†source】 ended [3-4]."
    assert [text[m.start : m.end] for m in find_markers(text)] == ["(2)", "【1†source】", "[3-4]"]
    assert cited_numbers(text) == [2, 1, 3, 4]


@pytest.mark.parametrize(
    "text",
    [
        "In (2019) it rained.",
        "It rained in Paris (2019).",  # a year is never a marker
        "(1) first item",
        "(1) first item\n(2) second item.",
        "- (1) first item",
        "Step (2): mix the flour.",
        "Then do step (2).",
        "As shown in Section 5 (2).",
        "See equation (3), then go on.",
        "The answers are: (2).",
        "Do option (3).",
        "You can choose (1) or (2).",  # after a function word: an item, not a source
        "Pick one of (1) and (2).",
        "As shown in (2).",
        "Compute f(x) = (2 + 3).",
        "It calls f(1).",
        "It is a 501(c)(3).",
        "It cost (1,000).",
        "It returned (0).",
        "Ingredients (3): flour, sugar.",
        "We need (1) flour, (2) sugar, and (3) eggs.",
        "Index it with `arr[1]` first.",
        "```python\nx = arr[1]\n```",
        "[1]: https://example.com",
        "[^1]: The note itself.",
        "See [1](https://example.com).",
    ],
)
def test_numbers_in_brackets_that_are_not_markers_stay(text: str) -> None:
    assert find_markers(text) == []
    assert strip_markers(text) == text


def test_document_footnotes_are_stripped_before_prompting() -> None:
    assert strip_footnotes("It was the largest lair [15]. It was") == (
        "It was the largest lair. It was"
    )
    assert strip_footnotes("lair. [2] It was") == "lair. It was"


def test_rewritten_markers_are_canonical() -> None:
    assert render([1, 3]) == "[1][3]"
    assert renumber("A [Source 1], B (Sources 2, 3).", {1: 1, 2: 2, 3: 3}) == "A [1], B [2][3]."
    assert renumber("A fever【2†source】. B[1].", {1: 1, 2: 2}) == "A fever [2]. B [1]."
    assert renumber("A fever [2†source]. B [1†a.pdf].", {1: 1, 2: 2}) == "A fever [2]. B [1]."
    assert renumber("A [3]. B [1][9]. C [1, 3].", {3: 1, 1: 2}) == "A [1]. B [2]. C [2][1]."
    assert strip_markers("He wrote [1]. Then [2, 3] left.") == "He wrote. Then left."


def test_each_marker_may_be_rewritten_its_own_way() -> None:
    # one mapping a marker, in order: the same number goes two ways, and a removed one is tidied
    # with the words on both sides of it
    text = "A is red (see [2]), and B is blue [2]; C is green [2]."
    assert (
        renumber(text, [{2: 1}, {2: 3}, {}]) == "A is red (see [1]), and B is blue [3]; C is green."
    )
    assert renumber(text, [{}, {2: 2}, {2: 2}]) == "A is red, and B is blue [2]; C is green [2]."
    with pytest.raises(ValueError):  # a mapping for each marker, no more and no fewer
        renumber(text, [{2: 1}])


ERIKA = "Erika Jayne was born on 10 July 1971."


@pytest.mark.parametrize(
    ("text", "numbers", "clean"),
    [
        ("X [1], and Y [2].", [1], "X, and Y [2]."),
        ("X [1], and Y [2].", [2], "X [1], and Y."),
        ("X [1][3] and Y [2-3].", [3], "X [1] and Y [2]."),
        ("A [1]-[3] B [4].", None, "A B."),
        ("A [1]-[3] B [4].", [2], "A [1][3] B [4]."),
        ("A [1, 2, 3].", [2], "A [1][3]."),
        ("A [1, 2] B.", [1, 2], "A B."),
        ("Results were mixed [1], [2].", None, "Results were mixed."),
        ("A fact ([1]).", None, "A fact."),
        ("A fact (see [1], [2]) holds.", None, "A fact holds."),
        ("A fact (see [1], [2]) holds.", [1], "A fact (see [2]) holds."),
        ("A fact ([1], [2]) holds.", [2], "A fact ([1]) holds."),
        ("A fact ([1]; [2]) holds.", [1], "A fact ([2]) holds."),
        ("It helps [1] [2] .", [1], "It helps [2]."),
        ("[1], [2] Pet ducks eat peas.", [1], "[2] Pet ducks eat peas."),
        ("He said it worked [^1]... or so.", None, "He said it worked... or so."),
        ("Really?! [1] Yes.", None, "Really?! Yes."),
        ("Why? [1]. Because.", None, "Why? Because."),
        ('He said "go [1]" twice.', None, 'He said "go" twice.'),
        ("See the table [1] . It helps [2] .", None, "See the table. It helps."),
        ("A is b. 【1】 ", None, "A is b. "),  # a text's trailing space stays
        ("Use `arr[1]` or ```a[2]``` here [3].", None, "Use `arr[1]` or ```a[2]``` here."),
        ("Run:\n```\nx = a[1]\n```\nDone [2].", None, "Run:\n```\nx = a[1]\n```\nDone."),
        ("Built with .NET [1], see ../docs [2].", None, "Built with .NET, see ../docs."),
        ("It was founded in 1998 (2), and sold (3).", [2], "It was founded in 1998, and sold [3]."),
        # no broken sentence left (removing every marker is also stripping and renumbering to
        # nothing: `test_no_removal_leaves_broken_text`)
        ("Erika Jayne was born on 10 July 1971, which is [2].", None, ERIKA),
        ("Erika Jayne was born on 10 July 1971, which is [2].", [2, 3], ERIKA),
        ("The Agronomist was created first, [3].", None, "The Agronomist was created first."),
        ("The Agronomist was created first, [3].", [2, 3], "The Agronomist was created first."),
        ('It won prizes for photography." [2].', None, 'It won prizes for photography."'),
        ('It won prizes for photography." [2].', [2, 3], 'It won prizes for photography."'),
        # a word whose object was the marker goes with it, and so does what joined two markers
        ("It is shown in [1], [2], [3], and [4].", None, "It is shown."),
        ("It is stated in [2] and [3].", [2], "It is stated in [3]."),
        ("It is stated in [2] and [3].", [3], "It is stated in [2]."),
        ("Results of [1] and [2] agree.", [2], "Results of [1] agree."),
        ("[1] and [2] show it.", [1], "[2] show it."),
        # a marker the sentence has as its subject is named in words, not cut out of it
        ("It is. [2] further confirms X.", None, "It is. Source 2 further confirms X."),
        ("[1, 2] show that X [3].", [1, 2], "Sources 1, 2 show that X [3]."),
        ("[1] and [2] show that X [3].", [1, 2], "Sources 1, 2 show that X [3]."),
        ("Sources [1], [2] show X.", None, "Sources 1, 2 show X."),
        ("- [2] Rome is old", None, "- Rome is old"),
        ("Source [2] shows X.", [2], "Source 2 shows X."),
        # the prompt's label goes with its marker, and so does a phrase that only said where
        ("X, as stated in Source [2].", None, "X."),
        ("It is in Source [2] and Source [3].", [2], "It is in Source [3]."),
        ("It is in Sources [1] and [3].", [3], "It is in Source [1]."),
        ("X (Sources: [1], [2]).", [2], "X (Source: [1])."),
        ("X [1].\n\nSources: [1], [2]", None, "X.\n\n"),  # a list of the sources: a label
        ("According to Sources [2] and [1], X.", [2], "According to Source [1], X."),
        ("Sources [2] and [3] say X.", [2], "Source [3] says X."),
        ("Sources [2] and [3] both show that X.", [3], "Source [2] shows that X."),
        ("According to Source [2], aspirin works.", [2], "Aspirin works."),
        ("Y is. As [1] notes, it is [2].", [1], "Y is. It is [2]."),
        ("Based on [2], [3], X is.", [2], "Based on [3], X is."),
        ("In 2010 [2], prices rose.", None, "In 2010, prices rose."),  # a phrase that says more
        ("The study [2], however, found X.", None, "The study, however, found X."),  # a subject
        # ... and so does one that opens a clause inside the sentence
        ("It works, and according to [2], it is cheap.", None, "It works, and it is cheap."),
        ("It works; according to Source [2], it is cheap.", None, "It works; it is cheap."),
        ("It works, while, as [2] notes, it is cheap.", None, "It works, while it is cheap."),
        (
            "It works [1], but as Sources [2] and [3] note, it is cheap.",
            [2, 3],
            "It works [1], but it is cheap.",
        ),
        ("As [2] and [3] show, it is cheap.", None, "It is cheap."),
        ("It rose, in 2010 [2], sharply.", None, "It rose, in 2010, sharply."),
        # an aside between dashes goes whole; a dash keeps the spacing it had
        ("It works — see [2] — and it is cheap.", None, "It works and it is cheap."),
        ("It works—see [2]—and it is cheap.", None, "It works and it is cheap."),
        ("It works [2]—it is cheap.", None, "It works—it is cheap."),
        ("It works [2] — it is cheap.", None, "It works — it is cheap."),
    ],
)
def test_removing_markers_joins_the_text_cleanly(
    text: str, numbers: list[int] | None, clean: str
) -> None:
    assert remove_markers(text, numbers) == clean


def test_lists_and_tables_keep_their_shape() -> None:
    listed = "Facts [1]:\n- Paris is big [1]\n- [2] Rome is old\n  * Oslo [3]\n1. Oslo is cold [3]"
    assert strip_markers(listed) == (
        "Facts:\n- Paris is big\n- Rome is old\n  * Oslo\n1. Oslo is cold"
    )
    assert remove_markers(listed, [1]) == (
        "Facts:\n- Paris is big\n- [2] Rome is old\n  * Oslo [3]\n1. Oslo is cold [3]"
    )
    table = "| city | fact |\n| --- | --- |\n| Paris | capital [1] |\n| [2] | old [2][3] |"
    assert strip_markers(table) == "| city | fact |\n| --- | --- |\n| Paris | capital |\n| | old |"
    assert remove_markers(table, [2]) == (
        "| city | fact |\n| --- | --- |\n| Paris | capital [1] |\n| | old [3] |"
    )
    for text in (listed, table):
        cleaned = strip_markers(text)
        assert cleaned.count("\n") == text.count("\n")
        assert [line[:1] for line in cleaned.split("\n")] == [line[:1] for line in text.split("\n")]


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
    "Erika Jayne was born on 10 July 1971, which is [2].",
    "The Agronomist was created first, [3].",
    'It won prizes for photography." [2].',
    "Paris is the capital (see [1], [2]).",
    "| Paris | capital [1] |\n| Rome | [2] |",
    "It is supported by the meta-analysis conducted in [1], [2], [3], and [4].",
    "This is stated in [2] and [3].",
    "This is supported by [1]. [2] further confirms that iron is toxic.",
    "According to Source [2], aspirin works [1].",
    "Rome is old, as stated in Source [2] and Source [3].",
    "It works, and according to [2], it is cheap.",
    "As [2] notes, X is true. Based on [1], [3], Y is.",
]


@pytest.mark.parametrize("sentence", SENTENCES)
def test_no_removal_leaves_broken_text(sentence: str) -> None:
    everything = [strip_markers(sentence), remove_markers(sentence), renumber(sentence, {})]
    assert len(set(everything)) == 1
    partly = [remove_markers(sentence, [n]) for n in cited_numbers(sentence)]
    for cleaned in [*everything, *partly]:
        for bad in (" .", " ,", " ;", " ?", ",.", "[]", "()", "【】", "[,]", "  ", " \n"):
            assert bad not in cleaned, (sentence, cleaned, bad)
        assert ".." not in cleaned.replace("...", ""), (sentence, cleaned)
        assert cleaned == cleaned.rstrip(), (sentence, cleaned)
        assert cleaned.count("\n") == sentence.count("\n")
        assert broken_sentences(cleaned) == [], (sentence, cleaned)
        assert not re.search(r"\bSources?\b(?! \d| \[)", cleaned), (sentence, cleaned)  # a label
    assert find_markers(everything[0]) == []
    # every word of the sentence that is neither a marker nor a dangling function word stays,
    # and none is added but a subject's "Source"
    kept = re.findall(r"[A-Za-z]{3,}", everything[0].lower())
    assert kept and set(kept) - {"source"} <= set(re.findall(r"[A-Za-z]{3,}", sentence.lower()))


def test_a_fullwidth_marker_after_the_stop_stays_with_its_sentence() -> None:
    stream = SentenceStream()
    assert stream.feed("A is b. 【1】 C is d [2]. E") == ["A is b. 【1】 ", "C is d [2]. "]
