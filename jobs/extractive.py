"""Answer without an LLM: pick the source sentences that share the most keywords with the question.

Used when Ollama is unavailable (and as a baseline). The reply has the LLM's shape, and every
quote is a sentence copied from its source, so ``validate_answer`` accepts it. Pure and
deterministic.

It answers only when the chosen sentences cover most of the question: at least ``MIN_COVERAGE``
of its keywords by weight, rarer keywords weighing more. A sentence that merely shares the
product's name (found everywhere, so weighing little) is "Not enough information", not an answer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jobs.prompt import NOT_ENOUGH_INFORMATION, Source

__all__ = ["MIN_COVERAGE", "STOP_WORDS", "acronyms", "answer_extractively", "content_words", "coverage_confidence",
           "definition_subject", "stem"]

# Only words longer than three letters can be keywords, so only those need listing here.
# Question words ("what", "which", "does") are included: they say nothing about the topic.
STOP_WORDS: frozenset[str] = frozenset(
    """
    about above after again against also although among another anybody anyone anything
    around because been before being below between both cannot could couldn't did didn't does
    doesn't doing done down during each either else enough even ever every from further
    gets given gives have haven't having he'd he'll he's hence here here's hers herself himself
    however i'd i'll i'm i've into isn't it's itself just know like made make makes many might
    more most much must mustn't myself need needs neither never none nothing onto other others
    ought ours ourselves over own please rather really same says shall shan't she'd she'll
    she's should shouldn't since some something still such than that that's their theirs them
    themselves then there there's therefore these they they'd they'll they're they've thing
    things this those though through thus till under until upon used uses using very want
    wants wasn't we'd we'll we're we've were weren't what what's whatever when when's where
    where's whether which while whom whose why's will with within without won't would wouldn't
    yet you'd you'll you're you've your yours yourself yourselves tell explain describe
    everything everyone everybody someone somebody anywhere somewhere
    """.split()
)

# Trimmed from both ends of a whitespace-separated token; inner punctuation ("3.11", "e-mail") stays.
_PUNCTUATION = "\"'`‘’“”«»()[]{}<>.,;:!?¡¿…—–-/\\|*_~#@$%^&+=§"


def content_words(text: str, short: frozenset[str] = frozenset()) -> list[str]:
    """Keywords of a text, in order, repeats kept: lower-cased whitespace tokens with
    punctuation trimmed, longer than three letters, not stop words; and the words of ``short``
    (acronyms of the question, see ``acronyms``), whatever their length."""
    words = []
    # Typographic apostrophes would hide "what’s" from the stop list.
    for token in text.lower().replace("\u2019", "'").split():
        word = token.strip(_PUNCTUATION)
        if (len(word) > 3 and word not in STOP_WORDS) or word in short:
            words.append(word)
    return words


def acronyms(question: str) -> frozenset[str]:
    """The question's words of two or three capital letters (FFI, API, TLS), lower-cased: too short to be
    keywords by length, yet often all the question is about ("FFI stands for?")."""
    found = set()
    for token in question.replace("\u2019", "'").split():
        word = token.strip(_PUNCTUATION)
        if 2 <= len(word) <= 3 and word.isalpha() and word.isupper():
            found.add(word.lower())
    return frozenset(found)


def stem(word: str) -> str:
    """Very light suffix stripping so "installs", "installed", "installing" meet at "install".

    Deliberately crude (no dictionary): it only has to make a question's word forms meet a
    sentence's, and both sides go through the same function.
    """
    for suffix, min_stem in (("ments", 4), ("ment", 4), ("ies", 3), ("ing", 4), ("ed", 4), ("es", 3), ("s", 3)):
        if not word.endswith(suffix) or len(word) - len(suffix) < min_stem:
            continue
        base = word[: -len(suffix)]
        if suffix == "ies":
            return base + "y"
        if suffix == "es" and not base.endswith(("s", "x", "z", "ch", "sh")):
            continue  # "files" is "file" + "s", not "fil" + "es"
        if suffix == "s" and base.endswith(("s", "u", "i")):
            return word  # "class", "status", "analysis": not plurals
        if suffix in ("ing", "ed") and len(base) > 3 and base[-1] == base[-2] and base[-1] not in "lsz":
            base = base[:-1]  # "stopped" -> "stop", but "installed" keeps "ll"
        word = base
        break
    # "configure"/"configured"/"configuring" all end as "configur".
    return word[:-1] if word.endswith("e") and len(word) > 4 else word


# Sentence ends: ., ! or ? (optionally followed by a closing quote/bracket) then whitespace and
# something that starts a sentence. Line breaks always end a sentence (lists, headings, table rows).
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+(?=[\"'“‘(\[]?[A-Z0-9])|\s*\n\s*")
_MAX_WORDS = 60  # longer "sentences" (run-on lists, code) are cut into pieces of _PIECE_WORDS
_PIECE_WORDS = 40


@dataclass(frozen=True)
class _Sentence:
    source: int  # index into the sources sequence
    position: int  # order within the source, for deterministic ties
    text: str  # verbatim but for whitespace collapsed to single spaces
    stems: frozenset[str]


def _sentences(text: str) -> list[str]:
    pieces: list[str] = []
    start = 0
    for m in _SENTENCE_BREAK.finditer(text):
        pieces.append(text[start : m.start()])
        start = m.end()
    pieces.append(text[start:])
    out: list[str] = []
    for piece in pieces:
        words = piece.split()
        if not words:
            continue
        if len(words) <= _MAX_WORDS:
            out.append(" ".join(words))
        else:
            out.extend(" ".join(words[i : i + _PIECE_WORDS]) for i in range(0, len(words), _PIECE_WORDS))
    return out


def _stems(text: str, short: frozenset[str] = frozenset()) -> frozenset[str]:
    return frozenset(w if w in short else stem(w) for w in content_words(text, short))


# Share of the question's keyword weight the chosen sentences must hold to count as an answer.
# Below it the best sentences share a word or two with the question but do not answer it.
MIN_COVERAGE = 0.6
# What the best single sentence must cover for "medium" (BENCHMARKS.md, "Extractive confidence").
MEDIUM_COVERAGE = 0.85
ABSENT_FACTOR = 2.0

# "What is X?", "What does X stand for / mean?", "X stands for?", "Define X": questions about a term.
_DEFINITION = re.compile(
    r"^\s*(?:what\s+(?:is|are)\s+(?:an?\s+|the\s+)?(?P<a>.+?)"
    r"|what\s+(?:does|do)\s+(?P<b>.+?)\s+(?:stand\s+for|mean)"
    r"|(?P<c>.+?)\s+(?:stands?\s+for|means?)"
    r"|(?:define|definition\s+of|meaning\s+of)\s+(?P<d>.+?))\s*[?.!]*\s*$",
    re.IGNORECASE,
)
_SUBJECT_WORDS = 3  # a longer "What is …" asks about more than a term


def definition_subject(question: str) -> str | None:
    """The term a definitional question asks about ("FFI stands for?" → "FFI", "What is a deque?" →
    "deque"), or None for other questions."""
    match = _DEFINITION.match(question)
    if match is None:
        return None
    term = next(g for g in match.groups() if g).strip(_PUNCTUATION + " ")
    return term if term and len(term.split()) <= _SUBJECT_WORDS else None


def defines(sentence: str, term: str) -> bool:
    """Whether a sentence says what ``term`` is: the term (or its plural) followed by "is", "are",
    "stands for", "means", "refers to", a colon, a dash, a comma or a bracket, or the term in brackets
    after its expansion ("foreign function interface (FFI)")."""
    word = re.escape(term.lower())
    text = sentence.lower()
    return re.search(rf"\(\s*{word}s?\s*\)|(?<![\w-]){word}(?:e?s)?(?![\w-])\s*(?:\(|,|:|—|–| - |"
                     rf"\b(?:is|are|was|stands? for|means?|refers? to)\b)", text) is not None


def coverage_confidence(coverage: float, best: float | None = None, defined: bool = True) -> str | None:
    """Confidence for a weighted keyword coverage; None when it is too low to answer at all.

    ``coverage`` is what the chosen sentences cover together, ``best`` what the best one covers alone
    (default: the same): a confidence is earned by one sentence that answers, not by three that each
    share a word. ``defined`` is False when the question asks what a term is and no chosen sentence
    says what it is (``defines``): "low".
    """
    if coverage < MIN_COVERAGE:
        return None
    alone = coverage if best is None else best
    # Never "high": on both dev sets no rule of coverage, rank or keyword count made an expect phrase be
    # in the answer for 90% of the answers it would call high (BENCHMARKS.md, "Extractive confidence").
    return "medium" if defined and alone >= MEDIUM_COVERAGE else "low"


def _keyword_weights(keywords: frozenset[str], sentence_stems: Sequence[frozenset[str]]) -> dict[str, float]:
    """Inverse sentence frequency over every sentence of the sources, question keywords only.

    A keyword in no sentence weighs ABSENT_FACTOR times one found in a single sentence: sources that
    never mention a word of the question (the "roof" of "repairs of the museum roof") are the
    strongest sign that they do not answer it, and the few sentences of a handful of sources
    spread the frequencies too little to say so on their own.
    """
    total = len(sentence_stems)
    weights = {}
    for k in keywords:
        df = sum(k in stems for stems in sentence_stems)
        weights[k] = math.log(1 + total / df) if df else ABSENT_FACTOR * math.log(1 + total)
    return weights


def _pick_sentences(candidates: Sequence[_Sentence], weight: dict[str, float], subject: str | None,
                    max_sentences: int) -> tuple[list[_Sentence], set[str]]:
    """Greedy: each pick adds the most keyword weight not yet covered; the picks and the keywords they cover."""
    chosen: list[_Sentence] = []
    seen_texts: set[str] = set()
    covered: set[str] = set()
    while len(chosen) < max_sentences:
        best: tuple[int, float, float, int, int] | None = None
        best_sentence: _Sentence | None = None
        for c in candidates:
            if c.text.lower() in seen_texts:
                continue
            gain = sum(weight[k] for k in c.stems - covered)
            if gain <= 0:
                continue
            # A sentence defining the asked term first; then highest new coverage, then highest total,
            # then earliest source and position.
            key = (-int(subject is not None and defines(c.text, subject)), -gain, -sum(weight[k] for k in c.stems),
                   c.source, c.position)
            if best is None or key < best:
                best, best_sentence = key, c
        if best_sentence is None:
            break
        chosen.append(best_sentence)
        seen_texts.add(best_sentence.text.lower())
        covered |= best_sentence.stems
    return chosen, covered


def answer_extractively(question: str, sources: Sequence[Source], *, max_sentences: int = 3) -> dict[str, Any]:
    """The LLM's reply shape built from source sentences alone.

    Each sentence is scored by the question keywords it contains, rarer keywords (across all
    sentences of the sources) counting more. Sentences are picked greedily, each adding keywords
    not yet covered, up to max_sentences. The weighted share of question keywords covered decides:
    below MIN_COVERAGE "Not enough information"; else "medium" when one sentence alone covers
    MEDIUM_COVERAGE (and, for a question about a term, a chosen sentence says what it is), else "low".
    """
    if max_sentences < 1:
        raise ValueError("max_sentences must be at least 1")
    nothing: dict[str, Any] = {"answer": NOT_ENOUGH_INFORMATION, "citations": [], "confidence": "low"}
    short = acronyms(question)
    subject = definition_subject(question)
    # A question about a term is answered by what names the term; "stands for", "mean" are its form.
    keywords = _stems(subject if subject else question, short)
    if not keywords or not sources:
        return nothing

    every = [
        _Sentence(si, pos, sentence, _stems(sentence, short) & keywords)
        for si, source in enumerate(sources)
        for pos, sentence in enumerate(_sentences(source.text))
    ]
    weight = _keyword_weights(keywords, [c.stems for c in every])
    # A question in the page (FAQ headings, "Why …?") repeats the asker's words but answers nothing.
    candidates = [c for c in every if c.stems and not c.text.rstrip().endswith("?")]

    chosen, covered = _pick_sentences(candidates, weight, subject, max_sentences)

    total = sum(weight.values())
    best = max((sum(weight[k] for k in c.stems) / total for c in chosen), default=0.0)
    # A term's definition says what the term is: a sentence that only mentions it does not.
    defined = subject is None or any(defines(c.text, subject) for c in chosen)
    confidence = coverage_confidence(sum(weight[k] for k in covered) / total, best, defined)
    if confidence is None:
        return nothing
    answer = " ".join(f"{c.text} [{sources[c.source].number}]" for c in chosen)
    citations = [{"source": sources[c.source].number, "quote": c.text} for c in chosen]
    return {"answer": answer, "citations": citations, "confidence": confidence}
