"""The answer-versus-evidence check (jobs/agreement.py): what it flags, with its reason, and the honest
rewordings it must leave alone."""

from __future__ import annotations

import pytest

from jobs.agreement import disagreements

WIDGET = ("The dashboard server listens on port 8731 unless another port is configured. All settings live in a "
          "file called widget.toml in the project folder. The refresh interval defaults to 250 milliseconds.")
GARDEN = "Each plot measures three by five metres and costs forty euros per season."
RELEASE = "Version 4.2 was released on 14 March 2023 and introduced the Zephyr renderer."
TOMATOES = "The tomatoes are watered every Tuesday at seven in the morning by the volunteer on duty."
TELEMETRY = "Telemetry is enabled by default and can be turned off in the settings."
NESTED = "Nested tuples can be unpacked in a for loop."
WEIGHT = "The X200 weighs 14 kilograms. Its manual has 15 pages."


@pytest.mark.parametrize(("answer", "quote", "reason"), [
    ("The X200 weighs 15 kilograms.", "The X200 weighs 14 kilograms", "answer says 15 kilograms, source says 14 kilograms"),
    ("The server listens on port 8732.", WIDGET, "answer says 8732, source says 8731"),
    ("A plot costs fifty euros per season.", GARDEN, "answer says fifty euros, source says forty euros"),
    ("Version 4.2 was released on 14 April 2023.", RELEASE, "answer says April, source says March"),
    ("The tomatoes are watered every Wednesday.", TOMATOES, "answer says Wednesday, source says Tuesday"),
    ("Telemetry is disabled by default.", TELEMETRY, "answer says 'disabled', source says 'enabled'"),
    ("Telemetry is not enabled by default.", TELEMETRY, "answer says 'not enabled', source says 'enabled'"),
    ("Nested tuples cannot be unpacked in a for loop.", NESTED,
     "answer says 'cannot be unpacked', source says 'can be unpacked'"),
    ("Settings live in widget.yaml.", WIDGET, "answer says widget.yaml, source says widget.toml"),
])
def test_a_contradiction_is_named(answer: str, quote: str, reason: str) -> None:
    found = disagreements(answer, "", [quote], [quote])
    assert [d.reason for d in found] == [reason]


@pytest.mark.parametrize(("answer", "quote", "question"), [
    ("The dashboard server listens on port 8731 [1].", WIDGET, "Which port does the dashboard server listen on?"),
    ("A plot costs 40 euros per season and measures 3 by 5 metres.", GARDEN, "What does a plot cost?"),
    ("Version 4.2 came out on March 14, 2023 (2023-03-14).", RELEASE, "When was version 4.2 released?"),
    ("Every Tuesday at 7 in the morning.", TOMATOES, "When are the tomatoes watered?"),
    ("Yes. Telemetry is on by default, but it can be turned off [1].", TELEMETRY, "Is telemetry enabled?"),
    ("No, it is not disabled by default.", TELEMETRY, "Is telemetry disabled by default?"),
    ("The settings file is `widget.toml`; refresh every 250 ms.", WIDGET, "Where do settings live?"),
    ("It refreshes every 250 milliseconds, not every 300.", WIDGET, "Does it refresh every 300 milliseconds?"),
])
def test_an_honest_rewording_is_left_alone(answer: str, quote: str, question: str) -> None:
    assert disagreements(answer, question, [quote], [quote]) == []


def test_a_number_elsewhere_in_the_source_does_not_excuse_another_unit() -> None:
    # 15 is on the page (15 pages), but not as a weight: the quote's unit decides.
    (found,) = disagreements("The X200 weighs 15 kilograms.", "", ["The X200 weighs 14 kilograms"], [WEIGHT])
    assert found.reason == "answer says 15 kilograms, source says 14 kilograms"


def test_no_valid_quote_means_nothing_to_compare() -> None:
    assert disagreements("The X200 weighs 15 kilograms.", "", [], [WEIGHT]) == []
