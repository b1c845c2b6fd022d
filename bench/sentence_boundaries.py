"""Which sentence ends a splitter rule takes away, per corpus.

    .venv/bin/python bench/sentence_boundaries.py ../shared/data/scifact ../shared/data/pubmedqa \\
        ../shared/data/hotpotqa tests/data/essay_qa [--rule short|name] [--show 20]

Two rules of `citeflow.citations.text`, by the text's form alone. ``short``: a full stop after a
word of at most `SHORT_WORD` letters, not an acronym, before a number closes an abbreviation
("63.5% vs. 58.9%", "the No. 1 seed"). ``name``: a short lower-case word with no vowel after a
capitalised word closes one ("Buckley v. Valeo", "AD vs. MR"), and an exclamation mark after a
capitalised word stands in a name ("Hey Pa! There's a Goat on the Roof"). This splits every
document of each corpus with and without the rule and prints how many sentence ends the rule
removes, then the first ``--show`` of them (the text before and after the stop) to be read: an
abbreviation or a name there is a cut the rule mends, a real sentence end is two sentences it
joins.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from unittest import mock

from citeflow.citations import text
from citeflow.evaluation.dataset import load_beir


def removed_ends(corpus: list[str], rule: str) -> tuple[int, list[str]]:
    """The number of sentences with the rule, and each end the rule removes, in context."""
    name = "SHORT_WORD" if rule == "short" else "_after_name"
    # the rule off: no word is that short, or none comes after a name
    with mock.patch.object(text, name, 0 if rule == "short" else lambda text, end: False):
        text.sentence_spans.cache_clear()
        without = [text.sentence_spans(doc) for doc in corpus]
    text.sentence_spans.cache_clear()
    with_rule = [text.sentence_spans(doc) for doc in corpus]
    removed = []
    for doc, old, new in zip(corpus, without, with_rule, strict=True):
        ends = {end for _, end in new}
        removed += [
            f"{doc[max(0, e - 40) : e]} || {doc[e : e + 25].strip()}"
            for _, e in old[:-1]
            if e not in ends
        ]
    return sum(map(len, with_rule)), removed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("datasets", nargs="+")
    parser.add_argument("--rule", choices=("short", "name"), default="short")
    parser.add_argument("--show", type=int, default=20, help="ends printed per corpus")
    args = parser.parse_args()
    for folder in args.datasets:
        corpus = load_beir(folder, evidence=False).corpus.values()
        sentences, removed = removed_ends([doc.text for doc in corpus], args.rule)
        print(f"{Path(folder).name}: {sentences} sentences; the rule removes {len(removed)} ends")
        for context in removed[: args.show]:
            print(f"    {context!r}")


if __name__ == "__main__":
    main()
