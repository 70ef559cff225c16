"""Which language a page or a question is in, and which Snowball stemmer and stop list index it.

A page's language is the one its HTML or PDF declares (pipelines/clean.py, pipelines/pdf.py), else the one its
text shows (``detect``, at extraction: pipelines/page_processing.py); a question's is told from its words among the
languages of the indexed pages (``question_stemmer``). Everything not recognised is English, indexed as
before: the Porter stemmer and the short stop list of pipelines/search_index.py.

The stop lists are Snowball's (pipelines/stopwords/, copied once from PostgreSQL's tsearch_data).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable
from pathlib import Path

# The stemmer of English, and of every page whose language is unknown or has no stemmer here.
ENGLISH = "porter"

# ISO 639-1 code → the Snowball stemmer of DuckDB's fts extension (``stem(word, name)``) with a stop list
# in pipelines/stopwords/.
STEMMERS = {
    "da": "danish", "nl": "dutch", "fi": "finnish", "fr": "french", "de": "german", "hu": "hungarian",
    "it": "italian", "no": "norwegian", "nb": "norwegian", "nn": "norwegian", "pt": "portuguese",
    "ru": "russian", "es": "spanish", "sv": "swedish", "tr": "turkish",
}
_CODES = {"english": "en", **{name: code for code, name in STEMMERS.items() if code not in ("nb", "nn")}}

_STOPWORD_DIR = Path(__file__).parent / "stopwords"

# ``detect`` names a language only when its stop words weigh at least this much (``_hits``), this share of the
# text's words, and this many times the runner-up's: a page of code, a table of numbers or a short text stays
# unknown.
MIN_HITS = 6
MIN_SHARE = 0.05
MIN_LEAD = 1.05


def stemmer(lang: str | None) -> str:
    """The stemmer for a language tag ("es", "sv-SE", "pt_BR"; None): ENGLISH unless one is known."""
    if not lang:
        return ENGLISH
    return STEMMERS.get(re.split(r"[-_]", lang.strip().lower(), maxsplit=1)[0], ENGLISH)


@functools.cache
def stop_words(name: str) -> frozenset[str]:
    """Snowball's stop list for a stemmer name ("spanish"; "english" for detection only), lower case."""
    path = _STOPWORD_DIR / f"{name}.txt"
    lines = path.read_text(encoding="utf-8").splitlines()
    return frozenset(w.strip().lower() for w in lines if w.strip() and not w.startswith("#"))


def stop_rows() -> list[tuple[str, str]]:
    """(stemmer, word) for every stemmer but ENGLISH, whose stop list pipelines/search_index.py keeps."""
    return sorted({(name, w) for name in set(STEMMERS.values()) for w in stop_words(name)})


def words(text: str) -> list[str]:
    """The lower-case words of ``text`` (letters and digits of any script)."""
    return re.findall(r"[^\W_]+", text.lower())


def _fold(word: str) -> str:
    """The word without accents: questions are often typed without them ("como" for "cómo")."""
    return "".join(c for c in unicodedata.normalize("NFD", word) if not unicodedata.combining(c))


@functools.cache
def _folded(name: str) -> frozenset[str]:
    return frozenset(_fold(w) for w in stop_words(name))


def _hits(tokens: Iterable[str], names: Iterable[str]) -> list[tuple[float, str]]:
    """(score, stemmer) best first: each word in a stop list counts 1 / the number of the lists holding it,
    so the words Swedish and Norwegian (or Spanish and Italian) share weigh less than their own."""
    names = sorted(names)
    score = dict.fromkeys(names, 0.0)
    for token in map(_fold, tokens):
        holders = [n for n in names if token in _folded(n)]
        for n in holders:
            score[n] += 1 / len(holders)
    return sorted(((v, n) for n, v in score.items()), reverse=True)


def detect(text: str, *, sample: int = 100_000) -> str | None:
    """The ISO 639-1 code of the language ``text`` is written in, told from Snowball's stop words (its first
    ``sample`` characters), or None when no language clearly leads (too short, code, mixed)."""
    tokens = words(text[:sample])
    if not tokens:
        return None
    names = {"english", *STEMMERS.values()}
    (best, name), (second, _) = _hits(tokens, names)[:2]
    if best < MIN_HITS or best < MIN_SHARE * len(tokens) or best < MIN_LEAD * second:
        return None
    return _CODES[name]


def question_stemmer(question: str, indexed: Iterable[str]) -> str:
    """The stemmer for a question, among the stemmers ``indexed`` (those of the indexed pages): the only one,
    or the one whose stop words the question uses most, more than English's; else ENGLISH."""
    others = sorted(set(indexed) - {ENGLISH})
    if not others:
        return ENGLISH
    if len(set(indexed)) == 1:
        return others[0]
    tokens = words(question)
    ranked = _hits(tokens, ["english", *others])
    (best, name), (second, _) = ranked[:2]
    if best == 0 or best == second or name == "english":
        return ENGLISH
    return name
