"""Sentence wording for the perfect author: final punctuation, marker placement, paraphrase."""

from __future__ import annotations

import re
from collections.abc import Iterable

from citeflow.citations.markers import render

__all__ = ["MAX_WORDS", "cite", "ended", "paraphrase"]

#: a paraphrase keeps at most this many words (cut at a clause boundary)
MAX_WORDS = 25

_END = re.compile(r"[.!?][\"')\]]*$")


def ended(sentence: str) -> str:
    """``sentence`` with final punctuation (a period when it has none)."""
    sentence = " ".join(sentence.split())
    return sentence if _END.search(sentence) else sentence.rstrip(",;: ") + "."


def cite(text: str, numbers: Iterable[int]) -> str:
    """``"X is Y."`` → ``"X is Y [2]."``: the markers before the final punctuation."""
    end = _END.search(text)
    cut = end.start() if end else len(text)
    return f"{text[:cut]} {render(numbers)}{text[cut:]}"


_ASIDE = re.compile(r"\s*\([^()]*\)")
_CONNECTIVE = re.compile(
    r"^(?:however|moreover|furthermore|in addition|additionally|thus|therefore|also)\s*,\s*",
    re.IGNORECASE,
)
_LEADING_PHRASE = re.compile(
    r"^((?:in|on|at|during|after|before|since|by|from|under|following|throughout|within|among)"
    r"\b[^,;]{1,60}),\s+",
    re.IGNORECASE,
)
_CONJUNCTIONS = frozenset({"and", "but", "which", "while", "whereas", "although", "who"})
#: generic English swaps (no dataset words): the wording changes, the facts stay
_SYNONYMS: dict[str, str] = dict(
    pair.split(">")
    for pair in "founded>established,located>situated,known as>called,began>started,"
    "begins>starts,largest>biggest,received>got,approximately>about,built>constructed,"
    "purchased>bought,primarily>mainly,commonly>often,frequently>often,several>a number of,"
    "demonstrated>showed,reduced>lowered,famous>well known,film>movie".split(",")
)
_SYNONYM = re.compile(
    r"\b(" + "|".join(sorted(map(re.escape, _SYNONYMS), key=len, reverse=True)) + r")\b",
    re.IGNORECASE,
)


def _swap(match: re.Match[str]) -> str:
    word = match.group(0)
    new = _SYNONYMS[word.lower()]
    return new[0].upper() + new[1:] if word[0].isupper() else new


def _shorten(text: str) -> str:
    """At most `MAX_WORDS` words, cut after the last clause boundary (a comma, a semicolon, or
    before a conjunction) that keeps 8 or more; a sentence with no such boundary stays whole."""
    words = text.split()
    if len(words) <= MAX_WORDS:
        return text
    for i in range(MAX_WORDS - 1, 7, -1):
        if words[i][-1] in ",;:":
            return " ".join(words[: i + 1]).rstrip(",;:") + "."
        if words[i].lower() in _CONJUNCTIONS:
            return " ".join(words[:i]).rstrip(",;:") + "."
    return text


def paraphrase(sentence: str) -> str:
    """A deterministic light paraphrase: no parenthetical asides or leading connective
    ("However, "), at most ~25 words, a few generic synonyms, and a short leading prepositional
    phrase moved to the end ("In 1998, X did Y." → "X did Y in 1998.")."""
    text = _CONNECTIVE.sub("", _ASIDE.sub("", ended(sentence)))
    text = _SYNONYM.sub(_swap, _shorten(text))
    end = _END.search(text)
    body, tail = (text[: end.start()], end.group(0)) if end else (text, ".")
    lead = _LEADING_PHRASE.match(body)
    rest = body[lead.end() :] if lead else ""
    if lead and len(lead.group(1).split()) <= 6 and len(rest.split()) >= 3 and "," not in rest:
        body = f"{rest} {lead.group(1)[0].lower()}{lead.group(1)[1:]}"
    return body[:1].upper() + body[1:] + tail
