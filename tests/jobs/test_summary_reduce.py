"""The reduce step of a summary question: the joined answer is grounded only when every section it joins is."""

from __future__ import annotations

from jobs.prompt import Source
from jobs.summary import Part, _reduce
from jobs.validate import validate_answer

SOURCE = [Source(1, "c1", "https://x.test/", "X", "The server listens on port 8731. It needs no licence key.")]


def _part(data: dict) -> Part:
    return Part(sources=SOURCE, prompt="p", data=data, validation=validate_answer(data, SOURCE))


def test_a_section_without_citations_makes_the_summary_ungrounded() -> None:
    cited = _part({"answer": "It listens on port 8731 [1].", "confidence": "high",
                   "citations": [{"source": 1, "quote": "The server listens on port 8731."}]})
    uncited = _part({"answer": "It also encrypts everything.", "citations": [], "confidence": "high"})
    assert cited.validation.grounded and not uncited.validation.grounded
    _, alone = _reduce([cited])
    assert alone.grounded
    data, joined = _reduce([cited, uncited])
    assert "encrypts" in data["answer"] and not joined.grounded
