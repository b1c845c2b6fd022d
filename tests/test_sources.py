"""Citation sources: relevant chunks split into numbered pieces, as the prompt shows them."""

from __future__ import annotations

import itertools

from llama_index.core.schema import NodeRelationship, NodeWithScore, RelatedNodeInfo, TextNode

from citeflow.citations.sources import format_sources, make_sources, split_spans

ESSAY = (
    "Before college the two main things I worked on, outside of school, were writing and "
    "programming. I didn't write essays. I wrote what beginning writers were supposed to write "
    "then, and probably still are: short stories. My stories were awful. They had hardly any "
    "plot, just characters with strong feelings, which I imagined made them deep. The first "
    "programs I tried writing were on the IBM 1401 that our school district used for what was "
    "then called data processing. This was in 9th grade, so I was 13 or 14. The school "
    "district's 1401 happened to be in the basement of our junior high school, and my friend "
    "Rich Draves and I got permission to use it. [2] It was like a mini Bond villain's lair."
)


def _node(text: str, node_id: str, score: float = 0.5) -> NodeWithScore:
    node = TextNode(id_=node_id, text=text, metadata={"file_name": f"{node_id}.txt"})
    node.relationships = {NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f"doc-{node_id}")}
    return NodeWithScore(node=node, score=score)


def test_split_spans_pack_whole_sentences_with_overlap() -> None:
    pieces = split_spans(ESSAY, chunk_tokens=40, overlap_tokens=12)
    assert len(pieces) > 2
    for piece in pieces:
        chunk = ESSAY[piece.start : piece.end]
        assert chunk[0].isupper() or chunk[0] == "["
        assert chunk.rstrip()[-1] in ".!?]"
    # consecutive pieces overlap (or touch) and together cover the text
    assert pieces[0].start == 0 and pieces[-1].end == len(ESSAY)
    for a, b in itertools.pairwise(pieces):
        assert b.start <= a.end + 1
        assert b.start > a.start


def test_make_sources_numbers_fresh_nodes_with_offsets() -> None:
    parent = _node(ESSAY, "essay", 0.8)
    other = _node("Ducks are birds that live near water. They quack.", "duck", 0.3)
    sources = make_sources(
        [parent, other], "IBM 1401 programs", chunk_tokens=40, overlap_tokens=8, max_sources=3
    )
    assert 1 <= len(sources) <= 3
    ids = [s.node.node_id for s in sources]
    assert len(set(ids)) == len(ids)
    for number, source in enumerate(sources, start=1):
        node = source.node
        text = node.get_content()
        assert text.startswith(f"Source {number}:\n")
        meta = node.metadata
        parent_text = ESSAY if meta["parent_id"] == "essay" else other.node.get_content()
        assert parent_text[meta["parent_start_char"] : meta["parent_end_char"]] == source.text
        assert node.ref_doc_id == f"doc-{meta['parent_id']}"
    # the piece about the IBM 1401 is among the sources; the parent is untouched
    assert any("1401" in s.text for s in sources)
    assert parent.node.get_content() == ESSAY


def test_every_piece_keeps_its_own_text() -> None:
    """The notebook's pydantic-v2 bug made every piece of a node hold its last piece."""
    parent = _node(ESSAY, "essay")
    sources = make_sources([parent], "school", chunk_tokens=30, overlap_tokens=0, max_sources=10)
    texts = [s.text for s in sources]
    assert len(texts) == len(set(texts)) > 2


def test_format_sources_numbers_and_drops_footnotes() -> None:
    sources = make_sources(
        [_node(ESSAY, "essay")], "lair", chunk_tokens=400, overlap_tokens=0, max_sources=1
    )
    context = format_sources(sources, first_number=3)
    assert context.startswith("[3]")
    assert "[2]" not in context


def test_sources_are_the_pieces_that_cover_the_question() -> None:
    """A lower-ranked chunk's piece holding the question's words beats the top chunk's pieces
    that hold none of them; between pieces covering it alike, the better-ranked parent wins."""
    first = _node(ESSAY, "essay", 0.9)
    second = _node(
        "Julian gave us seed money. We were very poor then. Yahoo bought Viaweb in 1998.",
        "viaweb",
        0.5,
    )
    third = _node("Yahoo bought Viaweb in 1998, for stock.", "viaweb2", 0.4)
    question = "When did Yahoo buy Viaweb?"
    one = {"chunk_tokens": 12, "overlap_tokens": 0, "max_sources": 1}
    sources = make_sources([first, second, third], question, **one)
    assert [s.node.metadata["parent_id"] for s in sources] == ["viaweb"]
    assert "Yahoo bought Viaweb" in sources[0].text
    # with a rank prior large enough, the ranking alone decides: the top chunk's first piece
    ranked = make_sources([first, second], question, **one, rank_prior=2.0)
    assert [s.node.metadata["parent_id"] for s in ranked] == ["essay"]


def test_sources_span_several_parents_when_each_covers_the_question() -> None:
    first = _node(ESSAY, "essay", 0.9)
    second = _node(
        "The IBM 1401 used punch cards. Programs were typed on cards. The 1401 printed output.",
        "ibm",
        0.5,
    )
    sources = make_sources(
        [first, second], "IBM 1401 punch cards", chunk_tokens=30, overlap_tokens=0, max_sources=2
    )
    assert [s.node.metadata["parent_id"] for s in sources] == ["essay", "ibm"]
    assert "1401" in sources[0].text


def test_a_text_stored_twice_is_one_source_and_takes_no_place_in_the_ranking() -> None:
    """The same file in two folders is two hits with one text: one source, from the better-ranked
    copy, and the copy does not push the next document down the rank prior."""
    text = "Yahoo bought Viaweb in 1998, for stock."
    copy_a = _node(text, "a/viaweb", 0.9)
    copy_b = _node(text.replace(" ", "\n", 1), "b/viaweb", 0.9)  # spacing aside, the same
    other = _node("Viaweb was sold in 1998 to Yahoo.", "sale", 0.5)
    question = "When did Yahoo buy Viaweb?"
    opts = {"chunk_tokens": 40, "overlap_tokens": 0, "max_sources": 3}
    sources = make_sources([copy_a, copy_b, other], question, **opts)
    assert [s.node.metadata["parent_id"] for s in sources] == ["a/viaweb", "sale"]
    without = make_sources([copy_a, other], question, **opts)
    assert [s.node.get_content() for s in sources] == [s.node.get_content() for s in without]
