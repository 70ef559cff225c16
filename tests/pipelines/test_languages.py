"""Pages and questions in other languages (issue 27, item 6): each page's language chooses the stemmer and
stop list its chunks are indexed with, the question's language the stemmer of the question; English and
unknown languages are indexed as before.

The index is the product's (Store on a DuckDB file, pipelines/search_index.py); the crawl test is a
`webqa crawl` subprocess against the loopback site.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from jobs.select import Selector
from pipelines import languages, schema
from pipelines.store import Store
from tests.support.site_server import SiteServer
from tests.support.crawling import ok, pages, rows, run_cli
from tests.support.store import make_chunks, page_record

SPANISH = ("La instalación del sistema termina con un reinicio del equipo. Durante la instalación se eligen "
           "el idioma, la distribución del teclado y la zona horaria, y se crean las cuentas de los usuarios "
           "que van a trabajar en él. Después se pueden añadir más paquetes desde la red.")
SWEDISH = ("Paketen installerades av administratören och systemet startades om. Om ett paket saknas kan det "
           "installeras med pakethanteraren, som hämtar det från nätet och kontrollerar att alla beroenden "
           "finns på plats innan det packas upp.")
ENGLISH = ("The installation of the system ends with a reboot. During the installation you choose the language, "
           "the keyboard layout and the time zone, and the accounts of the users who will work on it are created.")


def test_a_page_language_is_told_from_its_stop_words() -> None:
    assert languages.detect(SPANISH) == "es"
    assert languages.detect(SWEDISH) == "sv"
    assert languages.detect(ENGLISH) == "en"
    # Too little text, or text without a language's function words: unknown (indexed as English).
    assert languages.detect("Instalación del sistema") is None
    assert languages.detect("for i in range(10): print(i, i ** 2) # 0 1 4 9 16 25 36") is None
    assert languages.detect("") is None


def test_declared_tags_choose_a_stemmer_and_unknown_ones_fall_back_to_english() -> None:
    assert [languages.stemmer(t) for t in ("es", "sv-SE", "pt_BR", "NB", "en-GB", "xx", "", None)] == [
        "spanish", "swedish", "portuguese", "norwegian", "porter", "porter", "porter", "porter"]


def test_a_question_is_stemmed_in_its_language_among_those_indexed() -> None:
    both = ["porter", "spanish"]
    assert languages.question_stemmer("¿Cómo se instala un paquete con la red?", both) == "spanish"
    assert languages.question_stemmer("How do I install a package from the network?", both) == "porter"
    # A question without any function word stays English while English pages are indexed ...
    assert languages.question_stemmer("¿Paquetes huérfanos?", both) == "porter"
    # ... and takes the index's only language otherwise.
    assert languages.question_stemmer("¿Paquetes huérfanos?", ["spanish"]) == "spanish"
    assert languages.question_stemmer("¿Cómo se instala un paquete?", ["porter"]) == "porter"


def _save(store: Store, url: str, text: str, lang: str | None) -> list[str]:
    chunks = make_chunks(url, [(("Guide",), text)])
    store.save_page(dataclasses.replace(page_record(url, chunks), lang=lang), chunks, 1)
    return [c.chunk_id for c in chunks]


def _terms(store: Store, url: str) -> set[str]:
    return {t for (t,) in store.conn.execute(
        "SELECT p.term FROM bm25_postings p JOIN selection_docs s USING (doc) WHERE s.url = ?", [url]).fetchall()}


def test_a_swedish_page_is_stemmed_with_swedish_rules_and_stop_words(tmp_path: Path) -> None:
    with Store.open(tmp_path / "sv.duckdb") as store:
        _save(store, "http://a.test/sv", SWEDISH, "sv")
        _save(store, "http://a.test/en", ENGLISH, "en")
        swedish, english = _terms(store, "http://a.test/sv"), _terms(store, "http://a.test/en")
        langs = dict(store.conn.execute("SELECT DISTINCT url, lang FROM selection_docs").fetchall())
    assert langs == {"http://a.test/sv": "swedish", "http://a.test/en": "porter"}
    # "Paketen" (the packages) and "installerades" (were installed) lose their Swedish endings; Porter kept them.
    assert {"paket", "installer"} <= swedish and not {"paketen", "installerad"} & swedish
    # Swedish stop words leave; the stem loses its accents ("administratören").
    assert not {"och", "av", "som", "det"} & swedish
    assert "administrator" in swedish
    # English pages as before: Porter stems, English's short stop list.
    assert {"instal", "keyboard", "reboot"} <= english and not {"the", "of"} & english


def test_a_spanish_question_finds_the_inflected_word_of_a_spanish_page(tmp_path: Path) -> None:
    question = "¿Cuándo instalaron?"  # "instalaron" (they installed): the page says "instalación"
    with Store.open(tmp_path / "es.duckdb") as store:
        spanish = _save(store, "http://a.test/es", SPANISH, "es")
        _save(store, "http://a.test/teclado", "El teclado se configura en el archivo de ajustes del usuario.", "es")
        _save(store, "http://a.test/en", "The network settings are kept in one file.", "en")
        found = [c.chunk_id for c in Selector(store.conn, ensure_fts=store.load_fts).select(question, "bm25").candidates]
        assert found[:1] == spanish

        # The same pages indexed as English (no language known): Porter keeps "instalaron" and "instalacion"
        # apart, and BM25 finds nothing.
        store.conn.execute("UPDATE pages SET lang = NULL")
        store.rebuild_fts()
        assert Selector(store.conn, ensure_fts=store.load_fts).select(question, "bm25").candidates == []


def test_an_accented_question_word_is_a_stop_word_when_its_plain_form_is(tmp_path: Path) -> None:
    # Snowball's Spanish list has "como" and "donde", not the interrogative "cómo" and "dónde" questions use.
    question = "¿Cómo y dónde instalaron?"
    with Store.open(tmp_path / "es.duckdb") as store:
        spanish = _save(store, "http://a.test/es", SPANISH, "es")
        _save(store, "http://a.test/como", "Cómo y dónde se configura el teclado: en el archivo de ajustes.", "es")
        found = [c.chunk_id for c in Selector(store.conn, ensure_fts=store.load_fts).select(question, "bm25").candidates]
        # The page that shares only "cómo" and "dónde" with the question is not a candidate at all.
        assert found == spanish
        # The page's own words are indexed as before: its "cómo" is still a term there.
        assert "com" in _terms(store, "http://a.test/como")


def test_a_database_of_schema_8_is_reindexed_in_its_pages_languages(tmp_path: Path) -> None:
    db = tmp_path / "v8.duckdb"
    with Store.open(db) as opened:
        _save(opened, "http://a.test/es", SPANISH, "es")
        # What schema 8 left: one stop list without a language, docs without their stemmer.
        conn = opened.conn
        conn.execute("DROP TABLE fts_stopwords")
        conn.execute("CREATE TABLE fts_stopwords (sw VARCHAR PRIMARY KEY)")
        conn.execute("INSERT INTO fts_stopwords VALUES ('the'), ('of')")
        conn.execute("ALTER TABLE selection_docs DROP COLUMN lang")
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', '8')")
    with Store.open(db) as reopened:
        assert reopened.fts_is_stale()
        reopened.rebuild_fts()
        assert not reopened.fts_is_stale()
        assert reopened.conn.execute("SELECT DISTINCT lang FROM selection_docs").fetchall() == [("spanish",)]
        assert {"instal", "reinici"} <= _terms(reopened, "http://a.test/es")
        assert reopened.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
            str(schema.SCHEMA_VERSION),)


@pytest.mark.e2e
@pytest.mark.parametrize("declared", [None, "es-ES"])
def test_a_crawled_spanish_page_is_indexed_as_spanish_declared_or_not(site: SiteServer, tmp_path: Path,
                                                                     declared: str | None) -> None:
    lang = f' lang="{declared}"' if declared else ""
    site.add(0, "/es.html", f"<html{lang}><head><title>Instalación</title></head><body><main><h1>Instalación</h1>"
             f"<p>{SPANISH}</p><p>{SPANISH}</p></main></body></html>", content_type="text/html; charset=utf-8")
    url = site.url(0, "/es.html")
    db = tmp_path / "c.duckdb"
    ok(run_cli("-q", url, db=db))
    assert pages(db)[url]["lang"] == (declared or "es")
    assert rows(db, "SELECT DISTINCT lang FROM selection_docs") == [("spanish",)]


def test_the_index_reads_declared_tags_as_languages_stemmer_does(tmp_path: Path) -> None:
    tags = ["sv-SE", "pt_BR", "NB", "de", " fr ", "en-GB", "xx", "", None]
    with Store.open(tmp_path / "tags.duckdb") as store:
        for i, tag in enumerate(tags):
            _save(store, f"http://a.test/{i}", f"Page {i}.", tag)  # texts differ: identical ones are stored once
        stored = dict(store.conn.execute("SELECT url, lang FROM selection_docs").fetchall())
    assert [stored[f"http://a.test/{i}"] for i in range(len(tags))] == [languages.stemmer(t) for t in tags]
