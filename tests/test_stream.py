"""The sentence stream: a model's tokens cut into whole sentences, markers held with them."""

from __future__ import annotations

import pytest

from citeflow.citations.stream import SentenceStream


def test_sentence_stream_is_lossless_and_holds_markers() -> None:
    text = "First claim. [1] Second claim [2]. Third\nline 3.5 units. Last one"
    stream = SentenceStream()
    out: list[str] = []
    for i in range(0, len(text), 3):  # deltas cut anywhere, markers split across them
        out.extend(stream.feed(text[i : i + 3]))
    out.extend(stream.flush())
    assert "".join(out) == text
    assert out[0] == "First claim. [1] "
    assert out[1] == "Second claim [2]. "
    assert all("[" not in seg or "]" in seg for seg in out)


@pytest.mark.parametrize(
    "segments",
    [
        # a name with initials stays whole
        ["It is Gerald R. Ford International Airport [3]. ", "Dr. Who? ", "Yes."],
        # the stream waits to see whether a bracket opens a year
        ["Smith et al. (2019) found it [1]. ", "Then (as before) it rained. ", "Fig. 2 shows it."],
        # a title's exclamation mark and a case's "v." stay inside their sentence
        ["Hey Pa! There's a Goat on the Roof [1]. ", "Rostker v. Goldberg held it [2]. ", "Wow!"],
        # markers after a stop that are the next sentence's subject open that sentence
        ["It is shown by [1]. ", "[1] shows that ducks swim. ", "[2] [3] further show it."],
        # markers on the stop's line are its sentence's; those opening the next line are not
        ["It failed. [1]\n\n", "[2] Starlite is a material [2]. ", "It is light [2]."],
        # a marker between two stops is its sentence's
        ["It failed. [1]. ", "It is light. (Source 2). ", "It is new. (see Sources: 1, 3)."],
    ],
)
def test_sentence_stream_fed_one_character_at_a_time_or_whole(segments: list[str]) -> None:
    text = "".join(segments)
    stream = SentenceStream()
    assert [seg for char in text for seg in stream.feed(char)] + stream.flush() == segments
    whole = SentenceStream()
    assert whole.feed(text) + whole.flush() == segments
