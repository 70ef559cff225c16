"""Typed answers (jobs/typed.py, jobs/typed_extract.py): the schema Ollama is given, the value checked in code,
what the extractive answerer fills in, and change detection on values."""

from __future__ import annotations

import pytest

from jobs.answer import typed_value
from jobs.changes import CHANGED, REWORDED, UNCHANGED, classify, evidence_of
from jobs.llm import schema_problem
from jobs.prompt import ANSWER_SCHEMA, Source
from jobs.typed import TEXT, AnswerType, answer_schema, check_value, judged_schema, parse_type, value_key
from jobs.typed_extract import fill_extractive, number_problem
from jobs.validate import validate_answer


def test_types_parse_to_their_canonical_form_and_bad_ones_say_what_is_allowed() -> None:
    assert parse_type("number") == AnswerType("number")
    assert str(parse_type(" enum( low ,high ) ")) == "enum(low, high)"
    assert parse_type("text") == TEXT
    for bad, phrase in (("nummber", "unknown type"), ("enum(a)", "at least two"), ("enum(a, A)", "must differ"),
                        ("enum(a, , b)", "non-empty"), (3, "expected one of")):
        with pytest.raises(ValueError, match=phrase):
            parse_type(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind, good, bad", [
    ("yes_no", True, "yes"), ("number", 42, "42"), ("date", "2026-12-02", "2 December 2026"),
    ("list", ["a", "b"], "a, b"), ("enum(low, high)", "high", "medium"),
])
def test_the_schema_asks_for_a_value_of_the_type_and_answered(kind: str, good: object, bad: object) -> None:
    atype = parse_type(kind)
    schema = answer_schema(ANSWER_SCHEMA, atype)
    assert {"answered", "value"} <= set(schema["required"])
    reply = {"answer": "x", "citations": [], "confidence": "high", "answered": True}
    assert schema_problem({**reply, "value": good}, schema) is None
    assert schema_problem({**reply, "value": None}, schema) is None  # null is allowed when not answered
    if kind != "date":  # a date is a string of a format the grammar enforces and check_value reads
        assert schema_problem({**reply, "value": bad}, schema) is not None
    assert check_value(atype, {**reply, "value": good}, False).problem is None
    checked = check_value(atype, {**reply, "value": bad}, False)
    assert checked.value is None and checked.answered and checked.problem and "value" in checked.problem


def test_a_text_question_says_answered_in_a_field_and_its_value_is_its_words() -> None:
    schema = answer_schema(ANSWER_SCHEMA, TEXT)
    assert schema["required"] == [*ANSWER_SCHEMA["required"], "answered"] and "value" not in schema["properties"]
    # A reply without the field (a server that ignores the grammar) is still usable: the phrase is read then.
    reply = {"answer": "No hay suficiente información.", "citations": [], "confidence": "low"}
    assert schema_problem(reply, schema) is not None and schema_problem(reply, judged_schema(schema)) is None
    assert check_value(TEXT, {"answer": "Port 8731 [1]."}, False).value == "Port 8731."


def test_a_bool_is_no_number_and_a_float_integer_is_an_integer() -> None:
    number = parse_type("number")
    assert check_value(number, {"value": True}, False).problem == "value true is not a number"
    assert check_value(number, {"value": 42.0}, False).value == 42
    assert check_value(number, {"value": 10**400}, False).value == 10**400  # no OverflowError
    assert check_value(number, {"value": float("nan")}, False).problem == "value NaN is not a number"
    assert check_value(number, {}, False).problem == "answered without a value of type number"
    assert check_value(parse_type("date"), {"value": "2026-02-30"}, False).problem is not None
    assert check_value(parse_type("enum(Low, High)"), {"value": "high"}, False).value == "High"


SOURCES = [Source(1, "c1", "https://x.test/", "X", "The server listens on port 8731. It needs no licence key.")]


def test_answered_false_is_not_enough_information_whatever_the_words() -> None:
    reply = {"answer": "It listens on port 8731.", "citations": [], "confidence": "low", "answered": False,
             "value": 8731}
    validation = validate_answer(reply, SOURCES, "Which port?")
    assert validation.not_enough_information
    typed = typed_value(parse_type("number"), reply, validation)
    assert (typed.value, typed.answered, typed.problem) == (None, False, None)
    # Without the field the phrase is read, as before.
    assert validate_answer({"answer": "Not enough information.", "citations": []}, SOURCES).not_enough_information


def test_a_number_not_written_in_the_valid_quotes_is_not_trusted() -> None:
    reply = {"answer": "Port 8731 [1].", "citations": [{"source": 1, "quote": "The server listens on port 8731."}],
             "confidence": "high", "answered": True, "value": 8732}
    validation = validate_answer(reply, SOURCES, "Which port?")
    assert validation.grounded  # the words and quote agree: only the value is wrong
    typed = typed_value(parse_type("number"), reply, validation)
    assert typed.value is None and typed.problem == "value 8732 is not written in the quoted evidence"
    # A citation that failed is no evidence for the value either.
    wrong = {**reply, "answer": "Port 8732 [1]."}
    assert typed_value(parse_type("number"), wrong, validate_answer(wrong, SOURCES, "Which port?")).value is None
    assert typed_value(parse_type("number"), {**reply, "value": 8731}, validation).value == 8731
    assert number_problem(8731, ["listens on port 8,731."]) is None
    assert number_problem(1.5, ["takes 1.5 seconds"]) is None


def test_the_extractive_answerer_fills_numbers_and_yes_no_found_verbatim_or_does_not_answer() -> None:
    reply = {"answer": "It listens on port 8731 [1].", "citations": [{"source": 1, "quote": "It listens on port 8731."}],
             "confidence": "medium"}
    assert fill_extractive(parse_type("number"), "Which port?", reply)["value"] == 8731
    # The question's own numbers are not the answer's; two candidates are none.
    two = {**reply, "citations": [{"source": 1, "quote": "Version 2 listens on 8731 or 8732."}]}
    assert fill_extractive(parse_type("number"), "Which port does version 2 use?", two) == {
        "answer": "Not enough information", "citations": [], "confidence": "low", "answered": False, "value": None}
    yes = {**reply, "citations": [{"source": 1, "quote": "Yes, the server is free."}]}
    assert fill_extractive(parse_type("yes_no"), "Is it free?", yes)["value"] is True
    assert fill_extractive(parse_type("yes_no"), "Is it free?", reply)["answered"] is False
    assert fill_extractive(TEXT, "Which port?", reply)["answered"] is True


def test_values_decide_the_change_before_words() -> None:
    quote = [{"chunk_id": "c1", "quote": "listens on port 8731", "valid": True}]
    other = [{"chunk_id": "c2", "quote": "the port is 8731 now", "valid": True}]
    v42, v43 = value_key(42), value_key(43)
    before = evidence_of("The port is 42.", False, quote, value=v42)
    assert classify(before, evidence_of("The port is 42.", False, quote, value=v43)) == CHANGED
    assert classify(before, evidence_of("It is port 42 [2].", False, other, value=v42)) == REWORDED
    assert classify(before, evidence_of("The port is 42.", False, quote, value=v42)) == UNCHANGED
    assert value_key(["A", "b "]) == value_key(["a", "b"])
