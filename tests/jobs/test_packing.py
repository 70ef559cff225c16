"""Packing: which ranked chunks are sent, and how several pieces of one page become one source."""

from __future__ import annotations

from jobs.answer import (GAP_MARK, Unit, common_heading, merged_text, packed_sources, page_units, quoted_piece,
                         selection_rows)
from jobs.select import Candidate, Selection, pack


def chunk(chunk_id: str, url: str, ordinal: int, rank: int, text: str, heading: str = "Page", tokens: int = 10) -> Candidate:
    return Candidate(chunk_id, url, heading, text, tokens, rank=rank, ordinal=ordinal)


def test_budget_not_top_k_binds_when_top_k_is_a_ceiling() -> None:
    ranked = [chunk(f"c{i}", "http://a/", i, i, f"text number {i}", tokens=100) for i in range(1, 21)]
    assert len(pack(ranked, top_k=6, token_budget=1000).sent) == 6  # the old default: top_k binds
    filled = pack(ranked, top_k=40, token_budget=1000)
    assert [c.chunk_id for c in filled.sent] == [f"c{i}" for i in range(1, 11)]  # the budget binds
    assert filled.tokens == 1000
    assert filled.dropped[0][1] == "over token budget (1000+100 > 1000)"


def test_text_inside_a_sent_chunk_is_a_duplicate() -> None:
    ranked = [chunk("long", "http://a/", 0, 1, "Alpha beta gamma. Delta epsilon."),
              chunk("copy", "http://b/", 0, 2, "Delta   epsilon."),  # the same sentence on another page
              chunk("other", "http://b/", 1, 3, "Zeta eta.")]
    packed = pack(ranked, top_k=10, token_budget=100)
    assert [c.chunk_id for c in packed.sent] == ["long", "other"]
    assert packed.dropped == [(ranked[1], "duplicate of long")]


def test_pieces_of_one_page_merge_in_page_order_with_overlap_cut_and_gaps_marked() -> None:
    url = "http://a/"
    sent = [chunk("c5", url, 5, 1, "Five five five five five five."),
            chunk("b0", "http://b/", 0, 2, "Other page."),
            chunk("c2", url, 2, 3, "Two. Repeated sentence of the overlap here."),
            chunk("c3", url, 3, 4, "Repeated sentence of the overlap here. Three.")]
    units = page_units(sent)
    assert [[c.chunk_id for c in u.chunks] for u in units] == [["c2", "c3", "c5"], ["b0"]]
    assert units[0].lead.chunk_id == "c5"  # the best rank leads, the text keeps page order
    assert units[0].text == ("Two. Repeated sentence of the overlap here.\n\nThree.\n\n" + GAP_MARK
                             + "\n\nFive five five five five five.")
    assert [[c.chunk_id for c in u.chunks] for u in page_units(sent, merge=False)] == [["c5"], ["b0"], ["c2"], ["c3"]]


def test_a_piece_under_another_section_starts_with_its_heading() -> None:
    pieces = (chunk("a", "http://a/", 0, 2, "Intro text.", "Guide › Setup"),
              chunk("b", "http://a/", 1, 1, "Port is 8080.", "Guide › Setup › Port"))
    assert common_heading([c.heading for c in pieces]) == "Guide › Setup"
    assert merged_text(pieces, "Guide › Setup") == "Intro text.\n\nPort\n\nPort is 8080."
    assert quoted_piece(Unit(pieces), "port is  8080").chunk_id == "b"  # citations name the quoted piece


def test_merged_chunks_are_explained_as_part_of_their_source() -> None:
    url = "http://a/"
    ranked = [chunk("c5", url, 5, 1, "Five."), chunk("b0", "http://b/", 0, 2, "Other."), chunk("c2", url, 2, 3, "Two."),
              chunk("z", "http://c/", 0, 4, "Too big.", tokens=1000)]
    evidence = packed_sources(ranked, top_k=10, token_budget=100, merge=True)
    assert [(s.number, s.chunk_id) for s in evidence.sources] == [(1, "c5"), (2, "b0")]
    rows = {r["chunk_id"]: r for r in selection_rows(Selection("q", "bm25", "bm25", ranked), evidence.packed,
                                                     evidence.sources, evidence)}
    assert rows["c5"]["source_number"] == 1 and rows["c5"]["reason"] == "rank 1 within top_k and budget"
    assert rows["c2"]["source_number"] == 1
    assert rows["c2"]["reason"] == "rank 3 within top_k and budget; merged in page order into SOURCE 1 with rank 1 (same page)"
    assert rows["z"]["sent"] is False and rows["z"]["source_number"] is None and "over token budget" in rows["z"]["reason"]


def test_explain_lists_each_source_with_the_ranks_merged_into_it() -> None:
    from jobs.explain import source_summary

    rows = [{"sent": True, "source_number": 1, "rank": 1, "url": "http://a/"},
            {"sent": True, "source_number": 2, "rank": 2, "url": "http://b/"},
            {"sent": True, "source_number": 1, "rank": 3, "url": "http://a/"},
            {"sent": False, "source_number": None, "rank": 4, "url": "http://c/"}]
    assert source_summary(rows) == ["SOURCE 1: ranks 1, 3 merged in page order <http://a/>"]  # single ones: in the rows
