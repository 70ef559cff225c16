"""The second stage's pure parts: sentence units and windows, the passage cut, score fusion, the packing of
passages in page order, and where `webqa eval` says an answer was lost."""

from __future__ import annotations

from jobs.answer import GAP_MARK, Unit, packed_sources, page_units, prompt_costed, selection_rows
from jobs.evaluate import prompt_loss
from jobs.passages import UNIT_MAX_WORDS, best_passage, lexical_scores, units, window_text, windows
from jobs.second_stage import as_passage, fuse_order
from jobs.select import Candidate, Selection

TEXT = ("How do I ignore changes to a tracked file? Git doesn't provide a way to do this.\n\n"
        "The reason is that Git must know whether the changes are precious. Therefore it keeps them.\n\n"
        "A template file can be copied and modified instead.")


def chunk(chunk_id: str, ordinal: int, rank: int, text: str, *, url: str = "http://a/", score: float = 1.0,
          stage: float | None = None) -> Candidate:
    return Candidate(chunk_id, url, "Page", text, 10, rank=rank, score=score, ordinal=ordinal, stage_score=stage)


def test_units_are_sentences_within_paragraphs_and_cover_every_word() -> None:
    spans = units(TEXT)
    assert [TEXT[s.start:s.end] for s in spans] == [
        "How do I ignore changes to a tracked file?", "Git doesn't provide a way to do this.",
        "The reason is that Git must know whether the changes are precious.", "Therefore it keeps them.",
        "A template file can be copied and modified instead."]
    assert sum(s.words for s in spans) == len(TEXT.split())


def test_an_overlong_run_without_full_stops_is_cut_into_pieces() -> None:
    code = " ".join(f"word{i}" for i in range(UNIT_MAX_WORDS * 2 + 5))
    assert [s.words for s in units(code)] == [UNIT_MAX_WORDS, UNIT_MAX_WORDS, 5]


def test_windows_join_sentences_until_they_hold_enough_words() -> None:
    spans = units(TEXT)
    wins = windows(spans)
    assert wins[0] == (0, 2)  # two short sentences are not enough on their own: a third joins
    assert window_text(TEXT, spans, wins[0]).startswith("How do I ignore") and wins[-1][1] == len(spans) - 1
    assert len({w[1] for w in wins}) == len(wins)  # a window already ended by its predecessor's is left out


def test_the_passage_grows_from_the_best_window_towards_the_better_neighbour_within_its_words() -> None:
    spans = units(TEXT)
    wins = [(i, i) for i in range(len(spans))]  # one sentence each, to see the growth
    scores = [0.2, 0.9, 0.1, 0.0, 0.5]
    passage = best_passage(TEXT, spans, wins, scores, words=spans[1].words + spans[0].words)
    assert TEXT[passage.start:passage.end] == "How do I ignore changes to a tracked file? Git doesn't provide a way to do this."
    assert passage.score == 0.9 and passage.window == (1, 1)
    whole = best_passage(TEXT, spans, wins, scores, words=1000)
    assert whole.whole(TEXT) and whole.units == (0, len(spans) - 1)
    # ties go to the first window, and growth to the text after it
    tied = best_passage(TEXT, spans, wins, [0.5, 0.5, 0.5, 0.5, 0.5], words=spans[0].words + spans[1].words)
    assert tied.window == (0, 0) and tied.units == (0, 1)


def test_lexical_window_scores_count_the_questions_stems_and_the_heading() -> None:
    assert lexical_scores(["ignor", "track"], "Tracking", ["ignore this", "nothing"]) == [1.0, 0.5]
    assert lexical_scores([], "", ["x"]) == [0.0]


def test_a_candidate_becomes_its_passage_and_says_where_it_lies() -> None:
    spans = units(TEXT)
    scores = [0.1] * len(windows(spans))
    scores[-1] = 0.8  # the last window: the last three sentences, 24 words
    c = as_passage(chunk("c", 0, 1, TEXT), scores, words=30)
    assert c.text == TEXT[TEXT.index("The reason"):]
    assert c.span == (TEXT.index("The reason"), len(TEXT), len(TEXT)) and c.stage_score == 0.8
    # a window longer than the passage keeps its start
    short = as_passage(chunk("c", 0, 1, TEXT), scores, words=12)
    assert short.text == "The reason is that Git must know whether the changes are precious."
    assert Unit((c,)).text == f"{GAP_MARK} {c.text}"  # the cut is marked where text was left out
    assert as_passage(chunk("c", 0, 1, TEXT), scores, words=None).text == TEXT  # whole chunks: only the score


def test_fusion_reorders_by_both_scores_and_breaks_ties_by_url_and_position() -> None:
    ranked = [chunk("a", 0, 1, "x", score=1.0, stage=0.1), chunk("b", 1, 2, "y", score=0.5, stage=0.9),
              chunk("c", 2, 3, "z", score=0.0, stage=0.5)]
    assert [c.chunk_id for c in fuse_order(ranked, 0.0)] == ["a", "b", "c"]  # weight 0 keeps the order
    assert [c.chunk_id for c in fuse_order(ranked, 1.0)] == ["b", "c", "a"]
    assert [c.chunk_id for c in fuse_order(ranked, 0.5)] == ["b", "a", "c"]  # a .5, b .75, c .25
    tied = [chunk("y", 3, 1, "x", url="http://b/", score=1.0, stage=1.0), chunk("x", 1, 2, "x", score=1.0, stage=1.0)]
    assert [c.chunk_id for c in fuse_order(tied, 0.5)] == ["x", "y"]


def test_passages_of_one_page_merge_in_page_order_with_the_gaps_marked() -> None:
    first = "One. Two. Three."
    late = chunk("c5", 5, 1, "Five.", stage=0.9)
    middle = Candidate("c2", "http://a/", "Page", "Two.", 10, rank=2, ordinal=2, span=(5, 9, len(first)))
    end = Candidate("c3", "http://a/", "Page", "Start of three.", 10, rank=3, ordinal=3, span=(0, 15, 40))
    unit = page_units([late, middle, end])[0]
    assert [c.chunk_id for c in unit.chunks] == ["c2", "c3", "c5"]
    # c2 ends before its chunk does, so c3 is not next to it; c3 is cut at its end, so c5 is not next to it
    assert unit.text == f"{GAP_MARK} Two.\n\n{GAP_MARK}\n\nStart of three.\n\n{GAP_MARK}\n\nFive."


def test_passages_cost_what_their_block_costs_and_more_of_them_fit_the_budget() -> None:
    whole = prompt_costed([chunk(f"c{i}", i, i, " ".join([f"Filler sentence {i} number {j} is here." for j in range(40)]))
                           for i in range(1, 11)])
    cut = [as_passage(c, [0.0] * len(windows(units(c.text))), words=30) for c in whole]
    passages = prompt_costed(cut)
    budget = 3 * whole[0].tokens
    assert len(packed_sources(whole, top_k=40, token_budget=budget, merge=False).sources) == 3
    assert len(packed_sources(passages, top_k=40, token_budget=budget, merge=False).sources) == 10
    rows = selection_rows(Selection("q", "hybrid", "hybrid", passages),
                          packed_sources(passages, top_k=40, token_budget=budget, merge=False).packed, [])
    assert "second stage 0.0000; sent as a passage: characters 0-" in rows[0]["reason"]


def test_each_loss_is_named_by_where_it_happened() -> None:
    assert prompt_loss("cleaning", None, False) == "cleaning"
    assert prompt_loss(None, None, False) == "not in pool"
    assert prompt_loss(None, 12, False) == "below cut"
    assert prompt_loss(None, 3, True) == "truncated"
