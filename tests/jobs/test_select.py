"""Selection without a crawl: `pack`, and the Selector on a small DuckDB written with Store.save_page."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from jobs.errors import LLMError, WebqaError
from jobs.select import (HEADING_BOOST, MATCH_BM25_PARAMS, Bm25Params, Candidate, Rm3Params, Selector,
                         _min_max, pack, question_keywords)
from jobs.runstore import RunStore
from pipelines.vectors import (EMBED_SCHEME, EMBED_WINDOW_WORDS, WINDOWS_PER_DOC, embed_key, embed_text, embed_windows,
                               text_key)
from tests.support.store import make_chunks, page_record

# --------------------------------------------------------------------------------------------
# pack


def cand(chunk_id: str, tokens: int, text: str | None = None) -> Candidate:
    return Candidate(chunk_id, "http://a.test/", "", text if text is not None else f"text of {chunk_id}", tokens)


def ids(candidates: Sequence[Candidate]) -> list[str]:
    return [c.chunk_id for c in candidates]


def test_pack_takes_candidates_in_rank_order_up_to_top_k() -> None:
    packed = pack([cand(f"c{i}", 10) for i in range(1, 6)], top_k=3, token_budget=1000)
    assert ids(packed.sent) == ["c1", "c2", "c3"]
    assert [(c.chunk_id, reason) for c, reason in packed.dropped] == [("c4", "below top_k=3"), ("c5", "below top_k=3")]
    assert packed.tokens == 30


def test_pack_skips_a_chunk_over_the_budget_and_goes_on() -> None:
    packed = pack([cand("big1", 50), cand("huge", 80), cand("small", 30), cand("tiny", 21)], top_k=10, token_budget=100)
    assert ids(packed.sent) == ["big1", "small"]  # "small" still fits after "huge" was skipped
    assert packed.dropped == [(cand("huge", 80), "over token budget (50+80 > 100)"),
                              (cand("tiny", 21), "over token budget (80+21 > 100)")]
    assert packed.tokens == 80


def test_pack_budget_is_inclusive_and_a_chunk_larger_than_the_budget_never_fits() -> None:
    packed = pack([cand("whale", 500), cand("a", 60), cand("b", 40)], top_k=5, token_budget=100)
    assert ids(packed.sent) == ["a", "b"] and packed.tokens == 100
    assert packed.dropped[0][1] == "over token budget (0+500 > 100)"


def test_pack_drops_duplicates_without_using_top_k() -> None:
    candidates = [cand("a", 10, "Same  text\nhere."), cand("b", 10, "Same text here."), cand("c", 10, "Other."),
                  cand("d", 10, "Third.")]
    packed = pack(candidates, top_k=3, token_budget=1000)
    assert ids(packed.sent) == ["a", "c", "d"]
    assert [(c.chunk_id, reason) for c, reason in packed.dropped] == [("b", "duplicate of a")]


def test_pack_of_nothing() -> None:
    packed = pack([], top_k=3, token_budget=100)
    assert packed.sent == [] and packed.dropped == [] and packed.tokens == 0


# --------------------------------------------------------------------------------------------
# A small store

A, B, C = "http://a.test/guide", "http://b.test/notes", "http://c.test/other"

# url -> [(heading path, text)]
PAGES: dict[str, list[tuple[tuple[str, ...], str]]] = {
    A: [
        (("Guide", "Server"), "The server port is 8080. Configure it in widget.toml before the first start."),
        (("Guide", "Intro"), "A widget library for dashboards and small control panels."),
        (("Guide", "Ports"), "Nothing else is said in this section about anything."),
        (("Guide", "Gardens"), "Tomatoes grow well in sunny corners of the allotment."),
        (("Guide", "Shared"), "Identical paragraph about widget colours and themes."),
    ],
    B: [
        (("Guide", "Shared"), "Identical paragraph about widget colours and themes."),
        (("Notes", "Widget Server Port"), "Use the configure command."),
    ],
    C: [
        (("Other",), "The widget server writes its log to the journal."),
    ],
}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RunStore]:
    with RunStore.open(tmp_path / "select.duckdb") as opened:
        for url, sections in PAGES.items():
            chunks = make_chunks(url, sections)
            assert opened.save_page(page_record(url, chunks), chunks, crawl_run_id=None) == "new"
        opened.rebuild_fts()
        yield opened


# The fts extension's own index with the settings webqa's tokenisation reproduces (pipelines/schema.py
# tokenize): built here only as the reference BM25_SQL is checked against.
REFERENCE_FTS = (
    "PRAGMA create_fts_index('chunks', 'chunk_id', 'heading_path', 'text', "
    "stemmer='porter', stopwords='reference_stopwords', ignore='(\\.|[^a-z0-9])+', strip_accents=1, lower=1, "
    "overwrite=1)"
)


def reference_fts(store: RunStore) -> None:
    store.load_fts()
    # English's stop words (fts_stopwords holds one list per stemmer; the extension reads a one-column table).
    store.conn.execute("CREATE OR REPLACE TABLE reference_stopwords AS SELECT sw FROM fts_stopwords WHERE lang = 'porter'")
    store.conn.execute(REFERENCE_FTS)


def selector(store: RunStore, **kwargs: object) -> Selector:
    return Selector(store.conn, ensure_fts=store.load_fts, **kwargs)  # type: ignore[arg-type]


def heading_of(c: Candidate) -> str:
    return c.heading.split(" › ")[-1]


# --------------------------------------------------------------------------------------------
# keyword: the article's method


def test_question_keywords_are_long_content_words() -> None:
    assert question_keywords("How do I configure the Widget server PORT? Widget!") == ["configure", "widget", "server",
                                                                                       "port"]


def test_keyword_scores_exactly(store: RunStore) -> None:
    selection = selector(store).select("How do I configure the widget server port?", "keyword")
    got = [(c.url, heading_of(c), c.score, c.matched) for c in selection.candidates]
    assert HEADING_BOOST == 2
    assert got == [
        # 4 keywords in heading+text, "server" in the heading: 4 + 2
        (A, "Server", 6.0, ("configure", "widget", "server", "port")),
        # all four keywords, three of them in the heading: still only one +2
        (B, "Widget Server Port", 6.0, ("configure", "widget", "server", "port")),
        # "port" only in the heading ("Ports"): 1 + 2
        (A, "Ports", 3.0, ("port",)),
        (C, "Other", 2.0, ("widget", "server")),
        (A, "Intro", 1.0, ("widget",)),
        (A, "Shared", 1.0, ("widget",)),
        (B, "Shared", 1.0, ("widget",)),
    ]
    assert [c.rank for c in selection.candidates] == list(range(1, 8))
    assert all(c.keyword_score == c.score and c.bm25_score is None for c in selection.candidates)
    assert selection.method == selection.method_used == "keyword" and selection.notice is None


def test_keyword_ties_break_by_url_then_position(store: RunStore) -> None:
    selection = selector(store).select("paragraph section", "keyword")
    # Every match scores 1: the order is page URL, then position in the page.
    assert [(c.url, c.ordinal, c.score) for c in selection.candidates] == [(A, 2, 1.0), (A, 4, 1.0), (B, 0, 1.0)]


def test_keyword_without_keywords_selects_nothing(store: RunStore) -> None:
    assert selector(store).select("How is it?", "keyword").candidates == []


def test_keyword_scope(store: RunStore) -> None:
    selection = selector(store).select("widget server", "keyword", urls=[C, B])
    assert {c.url for c in selection.candidates} == {B, C}


# --------------------------------------------------------------------------------------------
# bm25


def test_bm25_ranks_the_matching_section_first(store: RunStore) -> None:
    selection = selector(store).select("Where do tomatoes grow?", "bm25")
    assert [heading_of(c) for c in selection.candidates] == ["Gardens"]
    (top,) = selection.candidates
    assert top.bm25_score == top.score > 0 and top.keyword_score is None
    assert "tomato" in top.matched


def test_bm25_searches_headings_too(store: RunStore) -> None:
    selection = selector(store).select("ports", "bm25")
    assert "Ports" in [heading_of(c) for c in selection.candidates]


def test_bm25_is_deterministic_with_stable_ties(store: RunStore) -> None:
    first = selector(store).select("identical paragraph colours themes", "bm25")
    second = selector(store).select("identical paragraph colours themes", "bm25")
    assert first.candidates == second.candidates
    top_two = first.candidates[:2]
    # The same section on two pages scores the same; the page URL decides.
    assert top_two[0].score == top_two[1].score
    assert [c.url for c in top_two] == [A, B]
    scores = [c.score for c in first.candidates]
    assert scores == sorted(scores, reverse=True)
    # Packing then drops the duplicate instead of sending it twice.
    packed = pack(first.candidates, top_k=5, token_budget=1000)
    assert (top_two[1], f"duplicate of {top_two[0].chunk_id}") in packed.dropped


def test_bm25_scope_and_empty_query(store: RunStore) -> None:
    selection = selector(store).select("widget", "bm25", urls=[A])
    assert selection.candidates and {c.url for c in selection.candidates} == {A}
    assert selector(store).select("?!", "bm25").candidates == []


def test_unknown_method(store: RunStore) -> None:
    with pytest.raises(WebqaError, match="unknown selection method 'fuzzy'"):
        selector(store).select("x", "fuzzy")


# --------------------------------------------------------------------------------------------
# embedding and hybrid, with an in-process embedder


class WordEmbedder:
    """Bag of words over a fixed vocabulary; records every call."""

    VOCAB = ("widget", "server", "port", "tomatoes", "colours", "journal", "configure", "library")

    def __init__(self, fail_on: str | None = None) -> None:
        self.calls: list[list[str]] = []
        self.fail_on = fail_on

    def embed(self, texts: Sequence[str], *, model: str | None = None) -> list[list[float]]:
        self.calls.append(list(texts))
        if self.fail_on is not None and self.fail_on in texts:
            raise LLMError("Ollama at http://x failed after 2 attempts: HTTP 500")
        return [[float(word in t.lower()) + 0.01 * i for i, word in enumerate(self.VOCAB)] for t in texts]


def test_embedding_selection_embeds_each_chunk_once(store: RunStore) -> None:
    embedder = WordEmbedder()
    first = selector(store, embedder=embedder, embedding_model="m").select("tomatoes", "embedding")
    assert first.method_used == "embedding" and heading_of(first.candidates[0]) == "Gardens"
    assert first.candidates[0].embedding_score is not None
    # Every distinct chunk once (the section repeated on two pages is embedded once), then the question.
    assert [len(call) for call in embedder.calls] == [7, 1]
    again = selector(store, embedder=embedder, embedding_model="m").select("widget server", "embedding", urls=[C])
    assert [len(call) for call in embedder.calls] == [7, 1, 1]  # cached in the embeddings table
    assert {c.url for c in again.candidates} == {C}


def test_embedding_a_scope_leaves_the_rest_for_later_and_a_shared_text_is_embedded_once(store: RunStore) -> None:
    embedder = WordEmbedder()
    sel = selector(store, embedder=embedder, embedding_model="m")
    # B's two chunks, one of them the paragraph A repeats: embedded as B's, never again for A.
    assert sel.embed_missing([B]) == 2
    assert sel.embed_missing([B]) == 0 and sel.embed_missing([A, B]) == 4
    assert sorted(len(call) for call in embedder.calls) == [2, 4]
    assert not any(sum(text.endswith("Identical paragraph about widget colours and themes.") for text in call)
                   for call in embedder.calls[1:])
    assert sel.embed_missing(None) == 1 and sel.embed_missing(None) == 0  # C's chunk, then nothing
    assert [len(call) for call in embedder.calls] == [2, 4, 1]


def test_hybrid_fuses_both_rankings(store: RunStore) -> None:
    hybrid = selector(store, embedder=WordEmbedder(), embedding_model="m").select("widget server port", "hybrid")
    assert hybrid.method_used == "hybrid"
    top = hybrid.candidates[0]
    assert top.bm25_score is not None and top.embedding_score is not None
    again = selector(store, embedder=WordEmbedder(), embedding_model="m").select("widget server port", "hybrid")
    assert again.candidates == hybrid.candidates


def test_hybrid_without_embedder_uses_bm25_with_the_reason(store: RunStore) -> None:
    reason = "embedding model m is not available on http://x; run `ollama pull m`"
    selection = selector(store, embedding_unavailable=reason).select("tomatoes", "hybrid")
    assert selection.method_used == "bm25"
    assert selection.notice == f"hybrid selection unavailable ({reason}); using bm25"


def test_failing_question_embedding_falls_back_to_bm25(store: RunStore) -> None:
    embedder = WordEmbedder(fail_on="tomatoes")
    selection = selector(store, embedder=embedder, embedding_model="m").select("tomatoes", "embedding")
    assert selection.method_used == "bm25" and "HTTP 500" in (selection.notice or "")
    assert heading_of(selection.candidates[0]) == "Gardens"


def _listed(url: str, ordinal: int, score: float, name: str) -> Candidate:
    return Candidate(name, url, name, name, 10, score=score, ordinal=ordinal)


def test_hybrid_is_the_mean_of_min_max_scaled_scores(store: RunStore, monkeypatch: pytest.MonkeyPatch) -> None:
    sel = selector(store, embedder=WordEmbedder(), embedding_model="m")
    # bm25: a is far ahead (an exact term match); c is last. Embedding: b best, c close behind, d last.
    bm25 = [_listed(A, 0, 9.0, "a"), _listed(A, 1, 5.0, "b"), _listed(A, 2, 1.0, "c")]
    cosine = [_listed(A, 1, 0.8, "b"), _listed(A, 2, 0.7, "c"), _listed(B, 0, 0.3, "d")]
    monkeypatch.setattr(sel, "bm25", lambda q, scope: bm25)
    monkeypatch.setattr(sel, "embedding", lambda q, scope: cosine)
    fused = sel.hybrid("anything", None)
    # a: (1 + 0)/2; b: (0.5 + 1)/2; c: (0 + 0.8)/2; d: (0 + 0)/2. Reciprocal-rank fusion would put c
    # (mediocre in both lists) above a (far ahead in one): the margin is what score fusion keeps.
    assert [(c.chunk_id, c.score) for c in fused] == [("b", 0.75), ("a", 0.5), ("c", 0.4), ("d", 0.0)]


def test_hybrid_ties_break_by_url_then_position(store: RunStore, monkeypatch: pytest.MonkeyPatch) -> None:
    sel = selector(store, embedder=WordEmbedder(), embedding_model="m")
    bm25 = [_listed(B, 0, 2.0, "x"), _listed(A, 3, 1.0, "y")]
    cosine = [_listed(A, 3, 0.9, "y"), _listed(B, 0, 0.1, "x")]
    monkeypatch.setattr(sel, "bm25", lambda q, scope: bm25)
    monkeypatch.setattr(sel, "embedding", lambda q, scope: cosine)
    assert [c.chunk_id for c in sel.hybrid("q", None)] == ["y", "x"]  # both 0.5: a.test before b.test


def test_min_max_scaling() -> None:
    assert _min_max([]) == []
    assert _min_max([3.0]) == [1.0]
    assert _min_max([2.0, 2.0]) == [1.0, 1.0]
    assert _min_max([4.0, 3.0, 2.0]) == [1.0, 0.5, 0.0]


@pytest.mark.parametrize("b", [0.75, 0.5])
def test_bm25_equals_the_fts_extensions_own_scoring(store: RunStore, b: float) -> None:
    # BM25_SQL re-implements match_bm25 for speed; with a heading term counting once, ranking and scores
    # must be the same.
    sel = selector(store, bm25_params=replace(MATCH_BM25_PARAMS, b=b))
    reference_fts(store)
    for question in ("Which port does the server use?", "widget colours themes", "configure the widget server",
                     "tomatoes in the allotment", "log journal"):
        ours = [(c.chunk_id, round(c.score, 9)) for c in sel.bm25(question, None)]
        reference = store.conn.execute(
            "SELECT chunk_id, round(score, 9) FROM (SELECT chunk_id, url, ordinal, "
            "fts_main_chunks.match_bm25(chunk_id, ?, k := 1.2, b := ?) AS score FROM chunks) WHERE score IS NOT NULL "
            "ORDER BY score DESC, url, ordinal",
            [" ".join(question.lower().replace("?", " ").split()), b],
        ).fetchall()
        assert ours == [tuple(r) for r in reference], question
        assert ours, question


def test_bm25_counts_a_heading_term_heading_weight_times(store: RunStore) -> None:
    # "gardens" is only in one chunk's heading path: its term frequency there is the heading weight.
    # (DuckDB's log, in match_bm25 and BM25_SQL alike, is base 10.)
    [top] = selector(store).bm25("gardens", None)
    assert heading_of(top) == "Gardens"
    reference_fts(store)
    num_docs, avgdl = store.conn.execute("SELECT num_docs, avgdl FROM fts_main_chunks.stats").fetchone()
    df, length = store.conn.execute(
        "SELECT d.df, docs.len FROM fts_main_chunks.dict d, fts_main_chunks.docs docs "
        "WHERE d.term = 'garden' AND docs.name = ?", [top.chunk_id]).fetchone()
    p = Bm25Params()
    assert p.heading_weight == 3
    tf = p.heading_weight
    expected = math.log10((num_docs - df + 0.5) / (df + 0.5) + 1) * tf * (p.k1 + 1) / (
        tf + p.k1 * (1 - p.b + p.b * length / avgdl))
    assert top.score == pytest.approx(expected, rel=1e-12)
    once = selector(store, bm25_params=replace(p, heading_weight=1.0)).bm25("gardens", None)[0]
    assert once.chunk_id == top.chunk_id and once.score < top.score


# --------------------------------------------------------------------------------------------
# embedding windows: a long chunk is embedded in parts and scores as its best part


def test_embed_windows_cover_the_text_in_overlapping_parts() -> None:
    assert embed_windows("Guide › Server", "short text") == [embed_text("Guide › Server", "short text")]
    assert text_key(embed_text("H", "short")) == embed_key("H", "short")  # a one-window chunk keeps its key

    words = [f"w{i}" for i in range(400)]
    windows = embed_windows("Guide", "\n".join(words), words=150, overlap=30)
    bodies = [w.split("\n\n", 1)[1].split() for w in windows]
    assert all(w.startswith("Guide\n\n") for w in windows)
    assert [len(b) for b in bodies] == [150, 150, 150, 40]  # the last part is what is left
    assert [b[0] for b in bodies] == ["w0", "w120", "w240", "w360"]
    assert bodies[-1][-1] == "w399"
    # A window that reaches the end is the last one, however much of it overlaps.
    assert len(embed_windows("", " ".join(words[:270]), words=150, overlap=30)) == 2
    assert all(set(a) & set(b) for a, b in zip(bodies, bodies[1:]))  # consecutive parts overlap
    assert sorted({w for b in bodies for w in b}, key=lambda w: int(w[1:])) == words


def test_a_long_chunk_is_found_by_words_past_the_first_window(tmp_path: Path) -> None:
    filler = " ".join(f"filler{i}" for i in range(EMBED_WINDOW_WORDS))
    long_text = f"{filler} The journal keeps the widget server log."  # the clue is past the first window
    sections = [(("Manual", "Long"), long_text), (("Manual", "Other"), "Tomatoes grow well in sunny corners.")]
    embedder = WordEmbedder()
    with RunStore.open(tmp_path / "windows.duckdb") as opened:
        chunks = make_chunks(A, sections)
        opened.save_page(page_record(A, chunks), chunks, crawl_run_id=None)
        opened.rebuild_fts()
        sel = selector(opened, embedder=embedder, embedding_model="m")
        top = sel.select("journal", "embedding").candidates[0]
        windows = embed_windows("Manual › Long", long_text)
        assert len(windows) == 2 and "journal" not in windows[0] and "journal" in windows[1]
        # Both parts of the long chunk and the short chunk are embedded, each once.
        assert sorted(len(t) for t in embedder.calls[0]) == sorted(len(t) for t in [*windows, embed_text(
            "Manual › Other", sections[1][1])])
        assert heading_of(top) == "Long"
        question, best = (embedder.embed([t])[0] for t in ("journal", windows[1]))
        expected = sum(a * b for a, b in zip(question, best)) / (
            sum(a * a for a in question) ** 0.5 * sum(b * b for b in best) ** 0.5)
        assert top.embedding_score == pytest.approx(expected, rel=1e-5)  # the best window's cosine
        assert sel.embed_missing() == 0  # nothing left to embed
        stored = opened.conn.execute("SELECT count(*) FROM chunk_windows WHERE scheme = ?", [EMBED_SCHEME]).fetchone()
        assert stored == (3,)
        # The typed copy selection reads holds one row per window, and a rebuild derives the same rows.
        typed = "SELECT doc, part, vector::FLOAT[] FROM unit_vectors_8 ORDER BY doc, part"
        before = opened.conn.execute(typed).fetchall()
        assert [(doc, part) for doc, part, _ in before] == [(1, 0), (1, 1), (2, 0)]
        opened.rebuild_fts()
        assert opened.conn.execute(typed).fetchall() == before
        assert sel.select("journal", "embedding").candidates[0].embedding_score == top.embedding_score


def test_stop_words_leave_the_question_before_stemming(tmp_path: Path) -> None:
    # Stemmed, "are" is "ar": a question "What are descriptors?" must not match a page of AR variables.
    sections = [(("Build", "Variables"), "AR and ARFLAGS name the archiver; ar is run with ARFLAGS."),
                (("Descriptors",), "Descriptors let objects customise attribute lookup.")]
    with RunStore.open(tmp_path / "stop.duckdb") as opened:
        chunks = make_chunks(A, sections)
        opened.save_page(page_record(A, chunks), chunks, crawl_run_id=None)
        opened.rebuild_fts()
        ranked = selector(opened).bm25("What are descriptors?", None)
        assert [heading_of(c) for c in ranked] == ["Descriptors"]
        reference_fts(opened)
        # The fts extension's own match_bm25 stems the stop word and matches the archiver section.
        stemmed = opened.conn.execute(
            "SELECT count(*) FROM chunks WHERE fts_main_chunks.match_bm25(chunk_id, 'what are descriptors') IS NOT NULL"
        ).fetchone()
        assert stemmed == (2,)


# --------------------------------------------------------------------------------------------
# the typed vector table embedding selection reads (pipelines/schema.py selection_vectors_<dims>)


def _typed_vectors(store: RunStore) -> list[tuple[str, str, list[float]]]:
    rows = store.conn.execute(
        "SELECT v.model, s.chunk_id, v.vector::FLOAT[] FROM unit_vectors_8 v JOIN selection_docs s USING (doc) "
        "ORDER BY ALL").fetchall()
    return [(m, c, pytest.approx(list(v), rel=1e-6)) for m, c, v in rows]


def _expected_vectors(store: RunStore) -> list[tuple[str, str, list[float]]]:
    """The cached vectors, scaled to length 1."""
    rows = store.conn.execute(
        "SELECT e.model, c.chunk_id, e.vector FROM embeddings e JOIN chunks c USING (embed_key) ORDER BY ALL").fetchall()
    return [(m, c, [x / math.sqrt(sum(y * y for y in v)) for x in v]) for m, c, v in rows]


def test_typed_vectors_follow_embedding_inserts_and_index_rebuilds(store: RunStore) -> None:
    embedder = WordEmbedder()
    selector(store, embedder=embedder, embedding_model="m").select("tomatoes", "embedding")
    # Every chunk's vector, once per chunk (the section shared by two pages included), as inserted.
    assert _typed_vectors(store) == _expected_vectors(store) and len(_typed_vectors(store)) == 8
    # A second model of the same length goes into the same table, alongside.
    selector(store, embedder=embedder, embedding_model="m2").select("tomatoes", "embedding")
    assert _typed_vectors(store) == _expected_vectors(store) and len(_typed_vectors(store)) == 16
    # A new page: selectable once written; its vectors come with its first embedding.
    url = "http://d.test/tomatoes"
    chunks = make_chunks(url, [(("Tomatoes",), "Tomatoes need sunny corners, like widgets.")])
    store.save_page(page_record(url, chunks), chunks, crawl_run_id=None)
    fresh = selector(store, embedder=embedder, embedding_model="m")
    assert url in {c.url for c in fresh.select("tomatoes", "embedding").candidates}
    # 9 chunks with model m, the 8 earlier ones with m2 (nothing has asked m2 about the new page yet).
    assert _typed_vectors(store) == _expected_vectors(store) and len(_typed_vectors(store)) == 17


def test_missing_typed_vector_table_is_built_on_first_use(store: RunStore) -> None:
    embedder = WordEmbedder()
    first = selector(store, embedder=embedder, embedding_model="m").select("widget server", "embedding")
    store.conn.execute("DROP TABLE unit_vectors_8")  # e.g. vectors cached before the table existed
    again = selector(store, embedder=embedder, embedding_model="m").select("widget server", "embedding")
    assert again.candidates == first.candidates
    assert _typed_vectors(store) == _expected_vectors(store)


def test_embedding_scores_are_the_cosine_of_the_cached_vectors(store: RunStore) -> None:
    embedder = WordEmbedder()
    selection = selector(store, embedder=embedder, embedding_model="m").select("widget server port", "embedding")
    reference = store.conn.execute(
        "SELECT c.chunk_id, array_cosine_similarity(e.vector::FLOAT[8], ?::FLOAT[8]) AS score "
        "FROM chunks c JOIN embeddings e ON e.embed_key = c.embed_key AND e.model = 'm' "
        "ORDER BY score DESC, c.url, c.ordinal",
        [embedder.embed(["widget server port"])[0]],
    ).fetchall()
    # The same chunks in the same order; scores agree to float precision (unit vectors' dot products).
    assert [c.chunk_id for c in selection.candidates] == [cid for cid, _ in reference]
    assert [c.score for c in selection.candidates] == pytest.approx([s for _, s in reference], abs=1e-6)


def _best_window_ranking(store: RunStore, question: list[float]) -> list[tuple[str, float]]:
    """Every indexed chunk by its best window's cosine (ties by url, ordinal), computed here in Python."""
    rows = store.conn.execute(
        "SELECT s.chunk_id, c.url, c.ordinal, e.vector FROM selection_docs s JOIN chunks c USING (chunk_id) "
        "JOIN chunk_windows w ON w.embed_key = s.embed_key JOIN embeddings e ON e.embed_key = w.window_key "
        "WHERE e.model = 'm'").fetchall()

    def cosine(v: list[float]) -> float:
        return sum(a * b for a, b in zip(v, question)) / math.sqrt(sum(a * a for a in v) * sum(b * b for b in question))

    best: dict[str, tuple[float, str, int]] = {}
    for chunk_id, url, ordinal, vector in rows:
        score = cosine(vector)
        if chunk_id not in best or score > best[chunk_id][0]:
            best[chunk_id] = (score, url, ordinal)
    order = sorted(best.items(), key=lambda kv: (-round(kv[1][0], 6), kv[1][1], kv[1][2]))
    return [(chunk_id, score) for chunk_id, (score, _, _) in order]


def test_chunks_of_many_windows_do_not_crowd_the_others_out_of_the_pool(tmp_path: Path) -> None:
    # Only the best pool × WINDOWS_PER_DOC windows are ranked first. Here one chunk has more windows than
    # that, every one of them the best match: ranking falls back to every chunk's best window.
    pool = 2
    paragraph = " ".join(["journal"] + [f"filler{i}" for i in range(39)])
    long_text = "\n".join([paragraph] * (pool * WINDOWS_PER_DOC * 4))
    sections = [(("Manual", "Long"), long_text), (("Manual", "Server"), "The journal of the widget server."),
                (("Manual", "Garden"), "Tomatoes grow well in sunny corners.")]
    embedder = WordEmbedder()
    with RunStore.open(tmp_path / "many.duckdb") as opened:
        chunks = make_chunks(A, sections)
        opened.save_page(page_record(A, chunks), chunks, crawl_run_id=None)
        opened.rebuild_fts()
        sel = selector(opened, embedder=embedder, embedding_model="m", pool=pool)
        sel.embed_missing()
        assert len(embed_windows("Manual › Long", long_text)) > pool * WINDOWS_PER_DOC
        expected = _best_window_ranking(opened, embedder.embed(["journal"])[0])
        ranked = sel.select("journal", "embedding").candidates
        assert [heading_of(c) for c in ranked] == ["Long", "Server"]
        assert [(c.chunk_id, c.score) for c in ranked] == [(cid, pytest.approx(s, abs=1e-6)) for cid, s in expected[:pool]]
        # With a pool the best windows fill, the first query alone gives the same ranking.
        wide = selector(opened, embedder=embedder, embedding_model="m").select("journal", "embedding").candidates
        assert [(c.chunk_id, c.score) for c in wide] == [(cid, pytest.approx(s, abs=1e-6)) for cid, s in expected]
        # Scoped to the page, the same.
        scoped = sel.select("journal", "embedding", urls=[A]).candidates
        assert [c.chunk_id for c in scoped] == [cid for cid, _ in expected[:pool]]


class ZeroForGardens(WordEmbedder):
    def embed(self, texts: Sequence[str], *, model: str | None = None) -> list[list[float]]:
        vectors = super().embed(texts, model=model)
        return [[0.0] * len(v) if "tomatoes" in t.lower() else v for t, v in zip(texts, vectors)]


def test_a_zero_vector_scores_zero(store: RunStore) -> None:
    # A model may return all zeros (an empty or unknown text): its cosine is 0, not NaN at the top.
    ranked = selector(store, embedder=ZeroForGardens(), embedding_model="m").select("widget", "embedding").candidates
    gardens = [c for c in ranked if heading_of(c) == "Gardens"]
    assert gardens and all(c.score == 0.0 for c in gardens)
    assert all(not math.isnan(c.score) for c in ranked) and ranked[0].score > 0


def test_an_index_rebuild_drops_vector_tables_of_earlier_versions(store: RunStore) -> None:
    # Before vectors were stored at unit length, their typed copy was selection_vectors_<dims>.
    store.conn.execute("CREATE TABLE selection_vectors_8 AS SELECT 1 AS doc")
    selector(store, embedder=WordEmbedder(), embedding_model="m").select("widget", "embedding")
    store.rebuild_fts()
    tables = {t for (t,) in store.conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert "selection_vectors_8" not in tables and "unit_vectors_8" in tables


def test_pages_are_selectable_as_soon_as_they_are_written(tmp_path: Path) -> None:
    with RunStore.open(tmp_path / "fresh.duckdb") as fresh:
        chunks = make_chunks(A, PAGES[A])
        fresh.save_page(page_record(A, chunks), chunks, crawl_run_id=None)
        assert not fresh.fts_is_stale()
        sel = selector(fresh, embedder=WordEmbedder(), embedding_model="m")
        for method in ("bm25", "embedding"):
            assert heading_of(sel.select("tomatoes", method).candidates[0]) == "Gardens"


def test_selection_without_an_index_says_how_to_build_it(tmp_path: Path) -> None:
    with RunStore.open(tmp_path / "empty.duckdb") as empty:
        chunks = make_chunks(A, PAGES[A])
        empty.save_page(page_record(A, chunks), chunks, crawl_run_id=None)
        empty.conn.execute("DROP TABLE selection_docs")  # e.g. a database an older version indexed
        empty.conn.execute("DROP TABLE bm25_postings")
        assert empty.fts_is_stale()
        sel = selector(empty, embedder=WordEmbedder(), embedding_model="m")
        for method in ("bm25", "embedding"):
            with pytest.raises(WebqaError, match="full-text index is missing"):
                sel.select("widget", method)


def test_vectors_cached_before_their_windows_were_mapped_are_selectable(store: RunStore) -> None:
    # A database from before embedding windows: vectors cached per chunk text, no chunk_windows rows.
    embedder = WordEmbedder()
    first = selector(store, embedder=embedder, embedding_model="m").select("widget server", "embedding")
    store.conn.execute("DELETE FROM chunk_windows")
    store.rebuild_fts()  # the typed table now holds no vector at all: no window is mapped
    assert store.conn.execute("SELECT count(*) FROM unit_vectors_8").fetchone() == (0,)

    again = selector(store, embedder=embedder, embedding_model="m").select("widget server", "embedding")
    assert [(c.chunk_id, c.score) for c in again.candidates] == [(c.chunk_id, c.score) for c in first.candidates]
    assert [len(call) for call in embedder.calls] == [7, 1, 1]  # the cached vectors served; only the question


# --------------------------------------------------------------------------------------------
# RM3: bm25 query expansion from the first pass's top documents


def test_rm3_expands_with_the_rarest_words_of_the_top_documents(store: RunStore) -> None:
    plain = selector(store).bm25("Where do tomatoes grow?", None)
    assert [heading_of(c) for c in plain] == ["Gardens"]  # no other chunk holds tomato or grow
    terms = selector(store).expansion_terms("Where do tomatoes grow?", plain[:1], 3)
    # One feedback document: every word weighs the same, so idf decides; ties go alphabetically.
    assert terms == ["allotment", "corners", "gardens"]
    expanded = selector(store, rm3=Rm3Params(feedback_docs=1, terms=10, weight=0.5)).bm25("Where do tomatoes grow?", None)
    assert heading_of(expanded[0]) == "Gardens" and expanded[0].score == 1.0
    assert len(expanded) > 1  # the page title "Guide", a feedback term, brings the other Guide chunks in
    assert expanded == selector(store, rm3=Rm3Params(1, 10, 0.5)).bm25("Where do tomatoes grow?", None)  # deterministic


def test_rm3_with_weight_zero_is_plain_bm25(store: RunStore) -> None:
    question = "Which port does the widget server use?"
    assert selector(store, rm3=Rm3Params(weight=0.0)).bm25(question, None) == selector(store).bm25(question, None)
