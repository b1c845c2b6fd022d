"""Small text utilities shared by the citation modules: sentence spans, token counts, terms."""

from __future__ import annotations

import re
import threading
from functools import lru_cache
from itertools import pairwise

import Stemmer

# A sentence ends at . ! ? (optionally followed by closing quotes/brackets) before whitespace,
# or at a line break. Decimal points and "e.g." mid-sentence are left alone because the next
# character must be whitespace and the next word must not start in lower case; a full stop that
# closes an abbreviation ("St. Louis", "J. M. Barrie") is left alone too (`closes_abbreviation`).
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[^a-z\s])|\n+")
# the word a full stop closes: letters, or dotted letters ("U.S", "e.g"), not part of a longer word
_WORD_AT_STOP = re.compile(r"(?<![\w.])[A-Za-z]+(?:\.[A-Za-z]+)*\Z")
# a short lower-case word with no vowel ("v", "vs", "b"; "mg" and "h" too, but after a number)
_CONSONANTS = re.compile(r"[b-df-hj-np-tv-xz]{1,3}")
# a capitalised word that ends where the search ends ("Buckley| v.", "Pa|!")
_CAPITALISED_WORD = re.compile(r"(?<![\w'’])[A-Z][\w'’-]*\Z")
# what follows the full stop of a short abbreviation before a number ("vs. 58.9%", "(2019)")
_NUMBER_AFTER = re.compile(r"\s+\(?\d")
#: the longest word whose full stop before a number is an abbreviation's ("vs", "No", "Fig", "al")
SHORT_WORD = 3
_WORD = re.compile(r"[a-z0-9]+(?:['’-][a-z0-9]+)*")

STOPWORDS = frozenset(
    (
        "a about above after again against all also am an and any are as at be because been "
        "before being below between both but by can could did do does doing down during each few "
        "for from further had has have having he her here hers herself him himself his how i if "
        "in into is it its itself just me more most my myself no nor not now of off on once only "
        "or other our ours ourselves out over own same she should so some such than that the "
        "their theirs them themselves then there these they this those through to too under until "
        "up very was we were what when where which while who whom why will with would you your "
        "yours yourself yourselves say said says one two may might must shall us upon within "
        "without via per like well much many however therefore thus yet still even though although"
    ).split()
)


# How an answer to a yes/no question opens ("Yes,", "No, it is not true that", "According to
# Source 2,", "The answer is"), how such a question opens ("Is it true that"), and how an answer
# points at its evidence ("This is supported by the study, which found that", "That is evident
# from the data showing that", "Studies show that", "Source 2 found that"): framing, not content.
# ``_NUMBERED``: the numbers a label names ("Source 2", "Sources 1 and 3")
_NUMBERED = r"(?:\s*\d+(?:\s*(?:,|and|&)\s*\d+)*)?"
_FRAMING = re.compile(
    r"^[\s,;]*(?:(?:and|but|while|whereas|although|though)\s+)?"  # a clause after its conjunction
    r"(?:(?:yes|no|indeed)\s*[,.;:!]\s*)?"
    r"(?:(?:is|was|are)\s+it\s+(?:true|correct|the case)\s+that\s+)?"
    r"(?:(?:it|this|that)\s+(?:is|was)\s+(?:not\s+)?(?:true|correct|false|the case)\s*"
    r"(?:that\b)?[,\s]*)?"
    r"(?:(?:it|this|that)\s+(?:is|was)\s+(?:also\s+)?(?:supported|shown|evident|confirmed|"
    r"demonstrated|indicated|suggested)\s+(?:by|from|in)\b(?:(?!\bno(?:t|ne)?\b)[^.;]){0,120}?"
    r"(?:,?\s*(?:which|that)\s+(?:found|finds|showed|shows|demonstrated|demonstrates|"
    r"indicated|indicates|suggested|suggests|reported|reports)|\s+(?:showing|demonstrating|"
    r"indicating|suggesting))\s+that\s+)?"
    r"(?:(?:according to|as (?:stated|shown|reported) in)\s+(?:the\s+)?"
    rf"(?:sources?|documents?|studies|study|text){_NUMBERED}\s*,\s*)?"
    r"(?:(?:the\s+)?(?:sources?|documents?|studies|study|research|text|evidence|data)"
    rf"{_NUMBERED}\s+)?(?:(?:also\s+|further\s+)?(?:shows?|showed|suggests?|suggested|"
    r"indicates?|indicated|states?|stated|reports?|reported|finds|found|says|notes?|noted|confirms?|"
    r"confirmed|demonstrates?|demonstrated)\s+that\s+)?"
    r"(?:(?:so|thus|therefore|in short|in summary)\s*,?\s*)?"
    r"(?:the\s+(?:short\s+|final\s+)?answer\s+(?:is|was)\s*:?\s*)?",
    re.IGNORECASE,
)


#: a source named in prose, outside brackets ("Per Source 1, X", "X, as Document 2 notes"): where
#: the sentence says it is from, not what it says
NAMED_IN_PROSE = re.compile(
    r"\b(?P<label>sources?|documents?)(?P<gap>[ \t]*#?[ \t]*)"
    r"(?P<numbers>\d{1,3}(?:[ \t]*(?:,|and|&|or)[ \t]*\d{1,3})*)\b",
    re.IGNORECASE,
)


#: the verb after a plural label ("Sources 2 and 3 show that"), which agrees with one source once
#: the others are dropped (`one_source_says`)
PLURAL_VERB = (
    r"[ \t]+(?:also[ \t]+|both[ \t]+)?(?:show|suggest|indicate|state|report|find|say|note|"
    r"confirm|demonstrate|agree)\b"
)
_BOTH = re.compile(r"both[ \t]+", re.IGNORECASE)


def one_source_says(verb: str) -> str:
    """A plural label's verb for one source: " both show" → " shows", " also say" → " also
    says"."""
    return _BOTH.sub("", verb) + "s"


def statement_of(sentence: str) -> str:
    """What a sentence states, without its yes/no framing ("Yes, it is true that X" → "X") and
    the sources it names in prose ("Per Source 1, X" → "Per , X")."""
    return NAMED_IN_PROSE.sub("", sentence[_FRAMING.match(sentence).end() :])  # type: ignore[union-attr]


_NO_ANSWER = re.compile(
    r"\b(do(es)? not (cover|contain|mention|say|provide)|not (mentioned|covered|provided)|"
    r"no information|cannot (find|answer)|can't (find|answer)|unable to|"
    # "I could not find X in the provided sources": not "The study could not find a link"
    r"(could not|couldn't) find\b[^.]*\b(in|from) the (provided |given )?(sources|documents|"
    r"context|passages|texts?))\b",
    re.IGNORECASE,
)


def needs_citation(sentence: str) -> bool:
    """Whether a sentence states something a source should back (not a question, a line that
    leads into a list, "Two drugs are relevant:", or a refusal)."""
    stripped = sentence.strip()
    if stripped.endswith(("?", ":")) or _NO_ANSWER.search(stripped):
        return False  # a question, a line that leads into what follows, a refusal
    return len(content_terms(statement_of(stripped))) >= 2


_DENYING_FRAME = re.compile(r"\b(?:no|not|false)\b", re.IGNORECASE)


def frame_denies(sentence: str) -> bool:
    """Whether a sentence's yes/no framing denies its statement ("No, X", "It is not true that
    X", "No, it is not true that X": each says not-X)."""
    framing = sentence[: _FRAMING.match(sentence).end()]  # type: ignore[union-attr]
    return _DENYING_FRAME.search(framing) is not None


_PART_BREAK = re.compile(
    r"\?\s+(?=\S)"  # several questions in a row
    r"|[,;]?\s+(?:and|or|also)\s+(?=(?:what|how|why|when|where|who|whom|whose|which|is|are|was"
    r"|were|do|does|did|can|could|should|would|will)\b)"
    r"|;\s+",
    re.IGNORECASE,
)


#: the words an English question opens with: such a question asks for a thing, and "Yes" or "No"
#: answers nothing in it ("Who was born first, A or B"; a dataset query may lack its "?")
QUESTION_OPENERS = frozenset("who whom whose what which when where why how".split())


def opens_with_question_word(question: str) -> bool:
    """Whether ``question`` opens with one of `QUESTION_OPENERS`."""
    words = question.split(" ", 1)
    return words[0].lower() in QUESTION_OPENERS


def question_parts(question: str) -> list[str]:
    """The parts of a compound question, e.g. "What did he build, and what did it cost?" →
    ["What did he build", "what did it cost?"]; a simple question is one part."""
    parts = [p.strip(" ,;") for p in _PART_BREAK.split(question.strip())]
    return [p for p in parts if p]


#: The words punkt's English model (NLTK) takes for abbreviations, without dots or single letters
#: (those `closes_abbreviation` recognises by their form): learnt from newswire, not from any
#: dataset here, and held to the model by `tests/test_citations.py`. Copied rather than loaded
#: because importing NLTK takes 2.0 s (``python -X importtime -c "import nltk.data"``, this
#: 2-core machine), which the first answer of every process would wait for.
ABBREVIATIONS = frozenset(
    """
    adm ala ariz aug ave bros calif chg cie co col colo conn corp cos ct dec dr feb fla fri ft ga
    gen ill inc jan jr kan ky lt ltd maj messrs mg mich minn mr mrs ms nev nov oct ok okla ore pa
    prof rep reps sen sep sept sr st sw tenn tues va vs vt wash wed wis yr
    """.split()
)


#: what may close a sentence after its stop (a character class's contents): quotes, brackets
STOP_CLOSERS = "\"'”’)\\]"
#: where a sentence opens: the text's or a line's start, or after a stop and a space
SENTENCE_OPENING = rf"(?:\A|\n|[.!?][{STOP_CLOSERS}]*[ \t]+)"


_TABLE_ROW = re.compile(r"\|.*\|", re.DOTALL)


def is_table_row(line: str) -> bool:
    """Whether ``line`` is a row of a Markdown table ("| Drug | Effect |")."""
    return _TABLE_ROW.fullmatch(line.strip()) is not None


def closes_abbreviation(text: str, stop: int) -> bool:
    """Whether the full stop at ``text[stop]`` closes an abbreviation rather than a sentence: an
    initial ("J. M. Barrie", "Gerald R. Ford"; not the pronoun "I"), a short lower-case word with
    no vowel after a capitalised word ("Buckley v. Valeo", "AD vs. MR", "Eliezer b. Hyrcanus";
    after a number it is a unit, "48 h.", "20 mg.", and ends the sentence), a dotted abbreviation
    ("U.S. Army", "e.g. Grammarly"), a capitalised one of `ABBREVIATIONS` ("St. Louis", "Dr.
    Smith"), or a word of at most `SHORT_WORD` letters, not an acronym, before a number ("63.5%
    vs. 58.9%", "the No. 1 seed", "Fig. 3", "Smith et al. (2019)"; a sentence seldom opens with a
    digit after a word that short, while "RNA. 5 cells" and "one year. 65 patients" still end
    one).
    A sentence that does end on one ("... moved to the U.S. The next year ...") runs on into the
    next: two sentences checked as one, where a split would put markers inside a name.
    """
    if text[stop : stop + 1] != ".":
        return False
    match = _WORD_AT_STOP.search(text, max(0, stop - 16), stop)
    if match is None:
        return False
    word = match.group(0)
    if "." in word:
        return True
    acronym = len(word) > 1 and word.isupper()
    if len(word) <= SHORT_WORD and not acronym and _NUMBER_AFTER.match(text, stop + 1):
        return True
    if _CONSONANTS.fullmatch(word):
        # no English word lacks a vowel; after a name, rather than a number, it is no unit
        start = match.start()
        return text[start - 1 : start] == " " and _after_name(text, start - 1)
    if len(word) == 1:
        return word.isupper() and word != "I"
    return word[0].isupper() and word.lower() in ABBREVIATIONS


def ends_no_sentence(text: str, stop: int) -> bool:
    """Whether the mark at ``text[stop]`` ends no sentence: a full stop that closes an
    abbreviation (`closes_abbreviation`), or an exclamation mark right after a capitalised word,
    which stands in a name ("Hey Pa! There's a Goat on the Roof", "Yahoo! Answers", "Please
    Teacher!"). An exclamation that does end a sentence ("So yes, I wanted it!") seldom follows a
    capitalised word; if it does, two sentences are checked as one, where a split would put a
    marker inside the name.
    """
    if text[stop : stop + 1] == "!":  # a line break after it ends the sentence all the same
        return text[stop + 1 : stop + 2] in (" ", "\t") and _after_name(text, stop)
    return closes_abbreviation(text, stop)


def _after_name(text: str, end: int) -> bool:
    """Whether a capitalised word ends at ``text[end]``."""
    return _CAPITALISED_WORD.search(text, max(0, end - 40), end) is not None


@lru_cache(maxsize=4096)
def sentence_spans(text: str) -> tuple[tuple[int, int], ...]:
    """Character spans ``(start, end)`` of the sentences of ``text``, whitespace trimmed.

    Cached: the same retrieved chunks are split again for every question that finds them.
    """
    # a sentence runs to the end of the space after it; the closing quotes or brackets the
    # lookbehind-only pattern matched stay with it once that space is trimmed
    cuts = [
        m.end() for m in _SENTENCE_END.finditer(text) if not ends_no_sentence(text, m.start() - 1)
    ]
    spans: list[tuple[int, int]] = []
    for start, end in pairwise([0, *cuts, len(text)]):
        piece = text[start:end]
        if piece.strip():
            first = start + len(piece) - len(piece.lstrip())
            spans.append((first, first + len(piece.strip())))
    return tuple(spans)


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text``."""
    return [text[s:e] for s, e in sentence_spans(text)]


def count_tokens(text: str) -> int:
    """Approximate LLM token count: about 4 characters or 0.75 words per token.

    Exact counts would need the serving model's tokenizer; this estimate is within ~15% for
    English prose on the tokenizers we use and costs microseconds.
    """
    return max(1, round(max(len(text) * 0.25, (text.count(" ") + 1) * 1.34)))


# Irregular past forms, so that an answer's "bought" meets its source's "buy" (a stemmer cannot).
_IRREGULAR = {
    past: base
    for base, forms in {
        "become": "became",
        "begin": "began begun",
        "bring": "brought",
        "build": "built",
        "buy": "bought",
        "choose": "chose chosen",
        "come": "came",
        "draw": "drew drawn",
        "drive": "drove driven",
        "eat": "ate eaten",
        "fall": "fell fallen",
        "feel": "felt",
        "fight": "fought",
        "find": "found",
        "fly": "flew flown",
        "forget": "forgot forgotten",
        "get": "got gotten",
        "give": "gave given",
        "go": "went gone",
        "grow": "grew grown",
        "hold": "held",
        "keep": "kept",
        "know": "knew known",
        "lead": "led",
        "leave": "left",
        "lose": "lost",
        "make": "made",
        "mean": "meant",
        "meet": "met",
        "pay": "paid",
        "rise": "rose risen",
        "run": "ran",
        "see": "saw seen",
        "sell": "sold",
        "send": "sent",
        "show": "shown",
        "sit": "sat",
        "speak": "spoke spoken",
        "spend": "spent",
        "stand": "stood",
        "take": "took taken",
        "teach": "taught",
        "tell": "told",
        "think": "thought",
        "throw": "threw thrown",
        "understand": "understood",
        "win": "won",
        "write": "wrote written",
    }.items()
    for past in forms.split()
}
_local = threading.local()  # a PyStemmer stemmer is not to be shared between threads


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    """Snowball (Porter 2) stem, irregular past forms first mapped to their base."""
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = Stemmer.Stemmer("english")
    stem: str = stemmer.stemWord(_IRREGULAR.get(word, word))
    return stem


def content_terms(text: str) -> list[str]:
    """Lower-cased, lightly stemmed words of ``text`` without stopwords (order kept)."""
    return [_stem(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


def word_terms(text: str) -> list[str]:
    """Lower-cased, lightly stemmed words of ``text``, stopwords kept (order kept)."""
    return [_stem(w) for w in _WORD.findall(text.lower())]


@lru_cache(maxsize=16384)
def term_set(text: str) -> frozenset[str]:
    """`content_terms` as a set, cached: the same sentences are scored many times per answer."""
    return frozenset(content_terms(text))
