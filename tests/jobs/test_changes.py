"""Answer change detection rests on what the answer says: verdict, quoted text, words; not on chunk ids."""

from jobs.changes import (CHANGED, EVIDENCE_MOVED, NEW, NO_LONGER_ANSWERED, REWORDED, UNCHANGED, Evidence, classify,
                          evidence_of)


def cite(chunk: str, quote: str, valid: bool = True) -> dict:
    return {"chunk_id": chunk, "quote": quote, "valid": valid}


def test_reworded_answer_with_same_quotes_is_reworded_not_changed() -> None:
    before = evidence_of("The default port is 8470.", False, [cite("c1", "listens on port 8470")])
    after = evidence_of("Lumen uses port 8470 by default [1].", False, [cite("c1", "Listens on  port 8470")])
    assert classify(before, after) == REWORDED


def test_same_words_and_quotes_from_a_rewritten_chunk_is_the_same_answer() -> None:
    before = evidence_of("It listens on port 8470 [1].", False, [cite("c1", "listens on port 8470")])
    # The section was edited elsewhere: its chunk id (a content hash) is new; the source number moved too.
    after = evidence_of("It listens on port 8470 [2].", False, [cite("c9", "listens on port 8470")])
    assert classify(before, after) == EVIDENCE_MOVED
    assert classify(before, before) == UNCHANGED


def test_different_quote_or_verdict_is_changed() -> None:
    before = evidence_of("8470", False, [cite("c1", "listens on port 8470")])
    assert classify(before, evidence_of("8470", False, [cite("c1", "the web UI port")])) == CHANGED
    nei = evidence_of("Not enough information", True, [])
    failed = evidence_of(None, None, [], error="Ollama failed")
    assert classify(nei, failed) == CHANGED and classify(failed, nei) == CHANGED


def test_invalid_citations_are_not_evidence() -> None:
    before = evidence_of("8470", False, [cite("c1", "listens on port 8470")])
    after = evidence_of("8470", False, [cite("c1", "listens on port 8470"), cite("c2", "made up", valid=False)])
    assert classify(before, after) == UNCHANGED


def test_new_and_no_longer_answered() -> None:
    answered = evidence_of("8470", False, [cite("c1", "port 8470")])
    nei = evidence_of("Not enough information", True, [])
    assert classify(None, answered) == NEW
    assert classify(answered, nei) == NO_LONGER_ANSWERED
    assert classify(answered, evidence_of(None, None, [], error="Ollama failed")) == NO_LONGER_ANSWERED
    assert classify(nei, nei) == UNCHANGED
    assert classify(nei, answered) == CHANGED


def test_without_citations_the_wording_decides() -> None:
    a = evidence_of("Yes, it does.", False, [])
    assert classify(a, evidence_of("yes,  it DOES.", False, [])) == UNCHANGED
    assert classify(a, evidence_of("No.", False, [])) == CHANGED


def test_evidence_round_trips_through_json_and_old_pairs_are_computed_again() -> None:
    e = evidence_of("8470", False, [cite("c1", "port 8470"), cite("c2", "web UI")])
    assert Evidence.from_json(e.to_json()) == e
    assert e.digest == Evidence.from_json(e.to_json()).digest
    assert Evidence.from_json(None) is None
    # What webqa stored before verdicts and quote texts: (chunk id, quote) pairs; not read as evidence.
    assert Evidence.from_json('{"answered": true, "citations": [["c1", "port 8470"]], "fallback": "8470"}') is None
