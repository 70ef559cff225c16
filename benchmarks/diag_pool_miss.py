"""Diagnostic: why an answerable question's answer is in neither list's top 50 (issue 23, the first stage).

For each answerable question whose answer chunk is in neither the bm25 nor the embedding top 50 (the pool is
their union), one block: the question, its expect phrase, each answer chunk (heading path, tokens, the sentence
around the phrase), the answer's rank in each list taken ``--deep`` deep, the question's bm25 terms with their
document frequency and where the answer chunk holds them (heading / text / not at all), the answer chunk's
bm25 score against the 50th's, and its best window cosine against the top and the 50th.

    nice .venv/bin/python benchmarks/diag_pool_miss.py --devset git --db build-first/devset-git.duckdb
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from typing import Any

import bench_recall as br
import devset_cli


def _rank(cands: Sequence[Any], wanted: set[str]) -> int | None:
    return next((i for i, c in enumerate(cands, start=1) if c.chunk_id in wanted), None)


def _stems_of(conn: Any, text: str) -> list[str]:
    """The bm25 terms of ``text`` as the index makes them (English: tokenize, stop words out, Porter stem)."""
    from pipelines import search_index

    rows = conn.execute(
        f"SELECT w, stem(w, 'porter') FROM (SELECT unnest({search_index.tokenize('?')}) AS w) "
        "WHERE w <> '' AND w NOT IN (SELECT unnest(?))", [text, search_index.FTS_STOPWORDS]).fetchall()
    return [s for _w, s in rows]


def _df(conn: Any, terms: Sequence[str]) -> dict[str, int]:
    rows = conn.execute("SELECT term, df FROM bm25_terms WHERE list_contains(?, term)", [list(terms)]).fetchall()
    return {t: int(d) for t, d in rows}


def _around(text: str, phrases: Sequence[str], width: int = 160) -> str:
    low = text.lower()
    for p in phrases:
        i = low.find(p.lower())
        if i >= 0:
            return " ".join(text[max(0, i - width): i + len(p) + width].split())
    return "(phrase not found)"


def _paragraph(text: str, phrases: Sequence[str]) -> str:
    """The line of ``text`` holding an expect phrase (asciidoc and Sphinx put a list item's body on one line)."""
    for line in text.split("\n"):
        if any(p.lower() in line.lower() for p in phrases):
            return line
    return text


def vectors_of(client: Any, model: str, texts: Sequence[str]) -> list[list[float]]:
    """Unit vectors of ``texts`` with the model's prefixes, as the Selector embeds a question and a passage."""
    from jobs.prefixes import prefixes_for

    pre = prefixes_for(model)
    made = client.embed([pre.query + texts[0], *(pre.document + t for t in texts[1:])], model=model)
    return [[x / (sum(y * y for y in v) ** 0.5) for x in v] for v in made]


def main(argv: Sequence[str] | None = None) -> int:
    parser = devset_cli.parser(__doc__, models=True, budgets=False)
    parser.add_argument("--deep", type=int, default=2000)
    parser.add_argument("--all", action="store_true", help="every answerable question, not only those missing")
    args = parser.parse_args(argv)
    from jobs.select import Selector

    with contextlib.ExitStack() as stack:
        devset, store, client = devset_cli.opened(stack, args)
        store.load_fts()
        conn = store.conn
        sel = Selector(conn, embedder=client, embedding_model=args.embedding_model, ensure_fts=store.load_fts,
                       pool=args.deep)
        docs = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        for q, wanted in devset_cli.answerable(devset, store):
            bm, em = sel.bm25(q.question, None), sel.embedding(q.question, None)
            b, e = _rank(bm, wanted), _rank(em, wanted)
            if not args.all and ((b and b <= 50) or (e and e <= 50)):
                continue
            print(f"\n=== {br.half(q.id)} {q.id}: {q.question}")
            print(f"  expect {list(q.expect)}  url {q.url}")
            print(f"  ranks (of {docs} chunks): bm25 {b} (of {len(bm)} matched), embedding {e}")
            if len(bm) >= 50:
                print(f"  bm25 best {bm[0].score:.2f}, 50th {bm[49].score:.2f}"
                      + (f", answer {bm[b - 1].score:.2f}" if b else ""))
            print(f"  cosine best {em[0].score:.3f}, 50th {em[49].score:.3f}"
                  + (f", answer {em[e - 1].score:.3f}" if e else ""))
            urls = {q.url, *q.also_urls}
            pb = next((i for i, c in enumerate(bm, 1) if c.url in urls), None)
            pe = next((i for i, c in enumerate(em, 1) if c.url in urls), None)
            n = conn.execute("SELECT count(*) FROM chunks WHERE list_contains(?, url)", [sorted(urls)]).fetchone()[0]
            print(f"  the answer's page ({n} chunks): its best chunk at bm25 {pb}, embedding {pe}")
            qterms = list(dict.fromkeys(_stems_of(conn, q.question)))
            df = _df(conn, qterms)
            print("  question terms (df): " + ", ".join(f"{t}({df.get(t, 0)})" for t in qterms))
            rows = conn.execute("SELECT chunk_id, heading_path, text, token_estimate FROM chunks WHERE list_contains(?, chunk_id)",
                                [sorted(wanted)]).fetchall()
            for cid, heading, text, tokens in rows:
                h, t = set(_stems_of(conn, heading)), set(_stems_of(conn, text))
                where = ", ".join(f"{s}:{'H' if s in h else ''}{'T' if s in t else ''}{'-' if s not in h | t else ''}"
                                  for s in qterms)
                rb = next((i for i, c in enumerate(bm, 1) if c.chunk_id == cid), None)
                re_ = next((i for i, c in enumerate(em, 1) if c.chunk_id == cid), None)
                para = _paragraph(text, q.expect)
                qv, pv, hv = vectors_of(client, args.embedding_model, [q.question, para, f"{heading}\n\n{para}"])
                print(f"  the answer's paragraph alone ({len(para.split())} words): cosine {sum(a * b for a, b in zip(qv, pv)):.3f}"
                      f", with its heading path {sum(a * b for a, b in zip(qv, hv)):.3f}")
                print(f"  chunk {cid[:10]} tokens {tokens} ranks bm25 {rb} emb {re_}\n    heading: {heading}\n"
                      f"    terms: {where}\n    around: {_around(text, q.expect)}")
            print("  bm25 top 3: " + " | ".join(f"{c.heading[:60]}" for c in bm[:3]))
            print("  emb top 3: " + " | ".join(f"{c.heading[:60]}" for c in em[:3]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
