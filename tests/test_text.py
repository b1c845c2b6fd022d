"""Sentence cutting, abbreviations, compound questions: the text utilities the check reads."""

from __future__ import annotations

import pytest

from citeflow.citations.text import (
    ABBREVIATIONS,
    question_parts,
    sentence_spans,
    split_sentences,
)


def test_sentence_spans_cover_sentences_and_keep_decimals() -> None:
    text = "Pi is 3.14 roughly. Is it? Yes!\nNext line e.g. here."
    assert split_sentences(text) == [
        "Pi is 3.14 roughly.",
        "Is it?",
        "Yes!",
        "Next line e.g. here.",
    ]
    for start, end in sentence_spans(text):
        assert text[start:end] == text[start:end].strip()


@pytest.mark.parametrize(
    "sentences",
    [
        [
            "Edward Albee outlived J. M. Barrie.",
            "Dr. Smith of St. Louis met the U.S. Army, e.g. Gerald R. Ford.",
            "So did I.",  # the pronoun is no initial
            "Then it rained.",
        ],
        # a short word before a number is an abbreviation, but an acronym ends a sentence
        [
            "Relapse fell (63.5% vs. 58.9%) as in Fig. 3 of Smith et al. (2019).",
            "Serena held the No. 1 ranking in c. 2002.",
            "It was viral RNA.",  # an acronym
            "5 cells died.",
            "They waited a year.",  # a word longer than `SHORT_WORD`
            "65 remained.",
        ],
        # a stop inside a name ends no sentence, but a unit or a possessive does
        [
            "Hey Pa! There's a Goat on the Roof came out in 1966.",  # "!" after a capitalised word
            "Rostker v. Goldberg was decided in 1981.",  # a lower-case letter after one
            "So yes, I wanted it!",
            "It took 48 h.",  # a unit after a number
            "Then Sana'a.",
            "Eliezer b. Hyrcanus taught.",
            "Agreement (AD vs. MR) was poor.",  # a short word with no vowel after a capitalised one
            "The dose was 20 mg.",
            "It rained in Hawai i.",  # a vowel: a word, not an abbreviation
            "He left.",
        ],
    ],
)
def test_a_full_stop_that_closes_an_abbreviation_ends_no_sentence(sentences: list[str]) -> None:
    assert split_sentences(" ".join(sentences)) == sentences


def test_the_abbreviations_are_those_of_punkts_english_model() -> None:
    """`ABBREVIATIONS` is punkt's list (NLTK, with llama-index-core), not one written here."""
    from llama_index.core.utils import globals_helper
    from nltk.data import find
    from nltk.tokenize.punkt import load_punkt_params

    globals_helper.wait_for_nltk_check()  # LlamaIndex's bundled NLTK data on NLTK's path
    punkt = load_punkt_params(find("tokenizers/punkt_tab/english/")).abbrev_types
    assert {a for a in punkt if len(a) > 1 and a.isalpha()} == ABBREVIATIONS


def test_question_parts_split_compound_questions_only() -> None:
    assert question_parts("What did he build, and what did it cost?") == [
        "What did he build",
        "what did it cost?",
    ]
    assert question_parts("What is Viaweb? Who bought it?") == ["What is Viaweb", "Who bought it?"]
    assert question_parts("How do ducks and geese migrate?") == ["How do ducks and geese migrate?"]
    assert question_parts("Is it true that A and B lower C?") == [
        "Is it true that A and B lower C?"
    ]
