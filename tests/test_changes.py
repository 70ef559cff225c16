"""Answer change detection rests on evidence: rewording alone is not a change."""

from jobs.changes import CHANGED, NEW, NO_LONGER_ANSWERED, UNCHANGED, Evidence, classify, evidence_of


def cite(chunk: str, quote: str, valid: bool = True) -> dict:
    return {"chunk_id": chunk, "quote": quote, "valid": valid}


def test_reworded_answer_with_same_quotes_is_unchanged() -> None:
    before = evidence_of("The default port is 8470.", False, [cite("c1", "listens on port 8470")])
    after = evidence_of("Lumen uses port 8470 by default [1].", False, [cite("c1", "Listens on  port 8470")])
    assert classify(before, after) == UNCHANGED


def test_different_quote_or_chunk_is_changed() -> None:
    before = evidence_of("8470", False, [cite("c1", "listens on port 8470")])
    assert classify(before, evidence_of("8470", False, [cite("c1", "the web UI port")])) == CHANGED
    # Same quote, but the section was edited: its chunk id (a content hash) is new.
    assert classify(before, evidence_of("8470", False, [cite("c9", "listens on port 8470")])) == CHANGED


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


def test_evidence_round_trips_through_json() -> None:
    e = evidence_of("8470", False, [cite("c1", "port 8470"), cite("c2", "web UI")])
    assert Evidence.from_json(e.to_json()) == e
    assert e.digest == Evidence.from_json(e.to_json()).digest
    assert Evidence.from_json(None) is None
