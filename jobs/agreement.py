"""Does an answer say what its evidence says? Numbers, dates, polarity and named values, checked in code.

A verbatim quote proves where words came from, not that the answer repeats them faithfully: "X weighs 14
kilograms" quoted for "X weighs 15 kilograms", or "enabled by default" for "disabled by default", passes
the quote check. :func:`disagreements` compares the answer with its valid quotes (and, for numbers, the
cited sources' whole text) and names each place they part:

* **numbers**: every number the answer states (digits or words, "forty" = 40; not the question's own
  numbers nor citation marks like ``[2]``) is in the evidence; next to a unit the evidence counts in
  ("15 kilograms"), it is there with that unit. Otherwise ``answer says 15 kilograms, source says 14
  kilograms``.
* **dates**: every month and weekday the answer names is one the evidence names (or the question).
* **polarity**: a word the answer negates ("not enabled", "cannot", "no telemetry") or states with its
  opposite ("disabled" for "enabled", "optional" for "required") is not stated the other way round and
  only that way in the quotes; a word with both polarities in the quotes is no conflict.
* **named values**: a file name, option, path or identifier the answer names (``widget.toml``,
  ``--max-depth``, ``max_connections``, a backticked value) is in the evidence.

Deterministic and pure; what it cannot see (a paraphrase that changes meaning without any of these) it
does not claim to. BENCHMARKS.md measures how often it flags honest answers.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

__all__ = ["Disagreement", "disagreements"]


@dataclass(frozen=True)
class Disagreement:
    reason: str  # e.g. "answer says 15 kilograms, source says 14 kilograms"
    evidence: str | None  # the evidence's own value, to tell which citation it concerns (None: absent)


# ------------------------------------------------------------------------------------ words

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*|\d+(?:[.,]\d+)*", re.UNICODE)
_CITATION_MARK = re.compile(r"\[\s*\d+(?:\s*[,;-]\s*\d+)*\s*\]|\(\s*(?:sources?\s*)?\d+(?:\s*[,;]\s*\d+)*\s*\)"
                            r"|\bsources?\s+\d+(?:\s*(?:,|and)\s*\d+)*", re.IGNORECASE)
_STOP = frozenset("""a an the of to in on at by for from with and or as is are was were be been being it its this that
these those there here than then so such which who whom whose what when where how if into onto over under per
via about after before also only just very more most less least some any each every all both either one""".split())


def _words(text: str) -> list[str]:
    return [w.lower().replace("’", "'") for w in _WORD.findall(text)]


# ---------------------------------------------------------------------------------- numbers

_SMALL = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())}
_TENS = {w: 10 * i for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()) if i >= 2}
_ORDINALS = {w: i + 1 for i, w in enumerate(
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth".split())}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000, "billion": 1_000_000_000}
_DIGITS = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)*)(?:st|nd|rd|th)?(?![\w])")
_NUMBER_WORDS = re.compile(r"\b(?:(?:" + "|".join([*_SMALL, *_TENS, *_ORDINALS]) + r")(?:[\s-]+(?:"
                           + "|".join([*_SMALL, *_TENS, *_SCALES, "and"]) + r"))*)\b", re.IGNORECASE)
# "one" and "second" are as often a pronoun or a unit of time as a number.
_AMBIGUOUS_WORDS = frozenset({"one", "second", "first"})


def _canonical_number(text: str) -> str:
    plain = text.replace(",", "")
    if plain.count(".") == 1:
        try:
            return format(Decimal(plain).normalize(), "f")
        except InvalidOperation:
            return plain
    if plain.count(".") == 0:
        return str(int(plain))
    return ".".join(str(int(part)) for part in plain.split("."))  # a version: 3.11.2


def _word_value(phrase: str) -> int | None:
    total = current = 0
    for word in re.split(r"[\s-]+", phrase.lower()):
        if word == "and":
            continue
        if word in _SMALL:
            current += _SMALL[word]
        elif word in _TENS:
            current += _TENS[word]
        elif word in _ORDINALS:
            current += _ORDINALS[word]
        elif word in _SCALES:
            current = max(current, 1) * _SCALES[word]
            if _SCALES[word] >= 1000:
                total, current = total + current, 0
        else:
            return None
    return total + current


@dataclass(frozen=True)
class _Number:
    value: str
    shown: str  # as written, with its unit when it has one ("15 kilograms")
    unit: str | None  # the unit's singular, compared ("kilogram")


def _unit_after(text: str, end: int) -> tuple[str | None, str]:
    """(the unit after a number, singular, or None; the unit as written)."""
    match = re.match(r"\s*(?:-\s*)?([A-Za-z]{2,})", text[end:end + 40])
    if not match:
        return None, ""
    unit = match.group(1).lower()
    if unit in _STOP or unit in _MONTHS or unit in ("or", "and", "to", "percent"):
        return None, ""
    return (unit[:-1] if unit.endswith("s") and len(unit) > 3 else unit), match.group(1)


def _number(value: str, written: str, text: str, end: int) -> _Number:
    unit, unit_written = _unit_after(text, end)
    return _Number(value, f"{written} {unit_written}" if unit else written, unit)


def _numbers(text: str, *, words: bool = True) -> list[_Number]:
    # An ISO date's month is a month, not the number 3: "2023-03-14" reads as "14 March 2023".
    text = _ISO_DATE.sub(lambda m: f"{int(m.group(3))} {_month_name(m.group(2))} {m.group(1)}",
                         _CITATION_MARK.sub(" ", text))
    found = [_number(_canonical_number(m.group(1)), m.group(0), text, m.end()) for m in _DIGITS.finditer(text)]
    if words:
        for m in _NUMBER_WORDS.finditer(text):
            phrase = m.group(0).strip()
            if phrase.lower() in _AMBIGUOUS_WORDS:
                continue
            value = _word_value(phrase)
            if value is not None:
                found.append(_number(str(value), phrase, text, m.end()))
    return found


# ------------------------------------------------------------------------------------ dates

_MONTHS = {m: i + 1 for i, m in enumerate(
    "january february march april may june july august september october november december".split())}
_WEEKDAYS = frozenset("monday tuesday wednesday thursday friday saturday sunday".split())
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_MONTH_NAMES = list(_MONTHS)


def _month_name(number: str) -> str:
    return _MONTH_NAMES[int(number) - 1] if 1 <= int(number) <= 12 else number


def _months(text: str) -> set[int]:
    found = {_MONTHS[w] for w in _words(text) if w in _MONTHS and w != "may"}
    # "may" is a month only next to a day or a year ("14 May 2023", "May 2023"), else a modal verb.
    found |= {5 for _ in re.finditer(r"(?i)\b(?:\d{1,2}\s+may|may\s+\d{1,4})\b", text)}
    found |= {int(m.group(2)) for m in _ISO_DATE.finditer(text) if 1 <= int(m.group(2)) <= 12}
    return found


# --------------------------------------------------------------------------------- polarity

_NEGATORS = frozenset("""not no never cannot without neither nor none nobody nothing don't doesn't didn't isn't
aren't wasn't weren't won't wouldn't shouldn't mustn't hasn't haven't hadn't can't couldn't needn't""".split())
# Between a negator and the word it negates: auxiliaries, articles and the adverbs that do not change it.
_SKIP = frozenset("""be is are was were been being have has had do does did will would shall should can could may might
must a an the any it this that they them currently yet also always really necessarily actually by default ever
need needed""".split())
# Words whose opposite is another word, by their concept: (concept, +1 or -1).
_OPPOSITES: dict[str, tuple[str, int]] = {}
for _pos, _neg in (("enabled", "disabled"), ("enable", "disable"), ("enables", "disables"), ("required", "optional"),
                   ("mandatory", "optional"), ("allowed", "forbidden"), ("allowed", "prohibited"),
                   ("allowed", "disallowed"), ("permitted", "forbidden"), ("supported", "unsupported"),
                   ("true", "false"), ("always", "never"), ("include", "exclude"),
                   ("included", "excluded"), ("includes", "excludes"), ("visible", "hidden"),
                   ("valid", "invalid"), ("safe", "unsafe"), ("available", "unavailable"),
                   ("possible", "impossible"), ("blocking", "non-blocking"), ("secure", "insecure"),
                   ("sensitive", "insensitive"), ("case-sensitive", "case-insensitive")):
    _OPPOSITES.setdefault(_pos, (_pos, 1))
    _OPPOSITES[_neg] = (_OPPOSITES[_pos][0], -1)
_CLAUSE = re.compile(r"[.;:!?()\[\]]|,|\b(?:but|however|whereas|while|unless|except|although|though|otherwise)\b",
                     re.IGNORECASE)


def _stem(word: str) -> str:
    for suffix in ("ies", "ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


@dataclass(frozen=True)
class _Stance:
    concept: str
    sign: int
    shown: str


def _stances(text: str) -> list[_Stance]:
    """Each polarity word of ``text`` and whether it is affirmed (+1) or denied (-1), clause by clause."""
    out: list[_Stance] = []
    for clause in _CLAUSE.split(_CITATION_MARK.sub(" ", text)):
        words = _WORD.findall(clause.replace("non-", "non_").replace("case-", "case_"))
        words = [w.lower().replace("’", "'").replace("_", "-") for w in words]
        negated_at: int | None = None
        for i, word in enumerate(words):
            if word in ("can", "cannot", "can't"):
                # A modal's stance is about the verb it governs: "cannot be nested" against "can be nested".
                verb = next((w for w in words[i + 1:i + 4] if w not in _SKIP and w not in ("not", "only")), None)
                denied = word != "can" or words[i + 1:i + 2] == ["not"] or (
                    negated_at is not None and i - negated_at <= 2)
                if verb is not None and verb.isalpha():
                    between = words[i + 1:words.index(verb, i + 1) + 1]
                    out.append(_Stance(f"can {_stem(verb)}", -1 if denied else 1,
                                       " ".join(["cannot" if denied else "can", *[w for w in between if w != "not"]])))
                negated_at = None
                continue
            if word in _NEGATORS:
                if words[i + 1:i + 2] in (["only"], ["longer"]) and word == "not":
                    continue  # "not only … but also" affirms
                negated_at = i
                continue
            negated = negated_at is not None and all(w in _SKIP for w in words[negated_at + 1:i]) and i - negated_at <= 4
            if word in _OPPOSITES:
                concept, sign = _OPPOSITES[word]
                shown = word
            elif word in _SKIP or word in _STOP or len(word) < 4 or not word.isalpha():
                continue
            else:
                concept, sign, shown = _stem(word), 1, word
            if negated:
                sign, shown = -sign, f"{words[negated_at]} {shown}"
                negated_at = None
            out.append(_Stance(concept, sign, shown))
    return out


# ------------------------------------------------------------------------------ named values

_NAMED = re.compile(r"`([^`\n]{2,80})`|(?<![\w./-])(--?[A-Za-z][\w-]{1,60}|[A-Za-z_][\w-]*(?:[./:][\w-]+)+/?"
                    r"|/[\w.-]+(?:/[\w.-]+)+|[A-Za-z]+_[\w]+)(?![\w/-])")
_ABBREVIATIONS = frozenset({"e.g", "i.e", "etc", "a.m", "p.m", "vs", "u.s", "no"})


def _named(text: str) -> list[str]:
    values = []
    for m in _NAMED.finditer(_CITATION_MARK.sub(" ", text)):
        value = (m.group(1) or m.group(2)).strip().rstrip(".:/")
        if value.lower() in _ABBREVIATIONS or "://" in value or not any(c.isalpha() for c in value):
            continue
        if re.fullmatch(r"[\d.]+", value):
            continue
        values.append(value)
    return values


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower().replace("’", "'"))


# ------------------------------------------------------------------------------------- check


def disagreements(answer: str, question: str, quotes: Sequence[str], sources: Sequence[str]) -> list[Disagreement]:
    """Where ``answer`` says what its ``quotes`` (the valid ones) and cited ``sources`` do not; [] when it agrees."""
    if not quotes:
        return []
    quoted = " \n".join(quotes)
    every = " \n".join([*quotes, *sources])
    problems: list[Disagreement] = []
    problems += _number_problems(answer, question, quoted, every)
    problems += _date_problems(answer, question, quoted, every)
    problems += _polarity_problems(answer, quoted)
    problems += _named_problems(answer, question, quoted, every)
    seen: set[str] = set()
    return [p for p in problems if not (p.reason in seen or seen.add(p.reason))]  # type: ignore[func-returns-value]


def _number_problems(answer: str, question: str, quoted: str, every: str) -> list[Disagreement]:
    asked = {n.value for n in _numbers(question)}
    evidence = _numbers(every)
    values = {n.value for n in evidence}
    with_unit = {(n.value, n.unit) for n in evidence if n.unit}
    units = {n.unit for n in evidence if n.unit}
    problems = []
    for number in _numbers(answer):
        if number.value in asked:
            continue
        if number.value in values and not (number.unit in units and (number.value, number.unit) not in with_unit):
            continue
        same_unit = [n for n in _numbers(quoted) + evidence if number.unit and n.unit == number.unit]
        if same_unit:
            other = same_unit[0]
            problems.append(Disagreement(f"answer says {number.shown}, source says {other.shown}", other.shown))
        else:
            near = _nearest(number.value, [n.value for n in _numbers(quoted)])
            tail = f"source says {near}" if near else "which its cited sources do not say"
            problems.append(Disagreement(f"answer says {number.shown}, {tail}", near))
    return problems


def _nearest(value: str, candidates: Iterable[str]) -> str | None:
    try:
        target = Decimal(value)
    except InvalidOperation:
        return None
    best: tuple[Decimal, str] | None = None
    for candidate in candidates:
        try:
            distance = abs(Decimal(candidate) - target)
        except InvalidOperation:
            continue
        if best is None or distance < best[0]:
            best = (distance, candidate)
    return best[1] if best is not None else None


def _date_problems(answer: str, question: str, quoted: str, every: str) -> list[Disagreement]:
    problems = []
    known = _months(every) | _months(question)
    for month in sorted(_months(answer) - known):
        said = _MONTH_NAMES[month - 1].capitalize()
        others = sorted(_months(quoted))
        tail = f"source says {_MONTH_NAMES[others[0] - 1].capitalize()}" if others else "which its cited sources do not say"
        problems.append(Disagreement(f"answer says {said}, {tail}", None))
    days = set(_words(every)) | set(_words(question))
    for day in sorted({w for w in _words(answer) if w in _WEEKDAYS} - days):
        others = sorted(w for w in set(_words(quoted)) if w in _WEEKDAYS)
        tail = f"source says {others[0].capitalize()}" if others else "which its cited sources do not say"
        problems.append(Disagreement(f"answer says {day.capitalize()}, {tail}", others[0] if others else None))
    return problems


def _polarity_problems(answer: str, quoted: str) -> list[Disagreement]:
    said: dict[str, dict[int, str]] = {}
    for stance in _stances(answer):
        said.setdefault(stance.concept, {}).setdefault(stance.sign, stance.shown)
    found: dict[str, dict[int, str]] = {}
    for stance in _stances(quoted):
        found.setdefault(stance.concept, {}).setdefault(stance.sign, stance.shown)
    problems = []
    for concept, signs in said.items():
        theirs = found.get(concept, {})
        if len(signs) != 1 or len(theirs) != 1:
            continue  # not said, or said both ways: no stance to contradict
        (sign, shown), (their_sign, their_shown) = next(iter(signs.items())), next(iter(theirs.items()))
        if sign != their_sign:
            problems.append(Disagreement(f"answer says '{shown}', source says '{their_shown}'", their_shown))
    return problems


def _named_problems(answer: str, question: str, quoted: str, every: str) -> list[Disagreement]:
    known = _norm(every + " \n" + question)
    problems = []
    for value in _named(answer):
        if _norm(value) in known:
            continue
        candidates = _named(quoted)
        near = difflib.get_close_matches(value, candidates, n=1, cutoff=0.5)
        tail = f"source says {near[0]}" if near else "which its cited sources do not say"
        problems.append(Disagreement(f"answer says {value}, {tail}", near[0] if near else None))
    return problems
