"""report.html: the run's answers for people who act on them, each quote one click from its sentence.

Self-contained (one file, its style inline, no script, no external asset): it opens from a mail
attachment or a file share as it is. Each valid citation links to its page *at the quote* with a URL
text fragment (``#:~:text=start,end``, https://wicg.github.io/scroll-to-text-fragment/) built from the
page's own words that the quote matched. Everything taken from pages or replies (titles, headings,
quotes, answers, URLs) is escaped; a link is made only of an http(s) URL.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TextIO
from urllib.parse import quote, urlsplit

from jobs.changes import EMPTY_ANSWER, LABELS, REPORTABLE, REWORDED
from jobs.history import AnswerChange, RunDiff
from jobs.typed import value_text
from pipelines.redact import inert

__all__ = ["text_fragment", "fragment_link", "write_html_report"]

# A quote longer than this many words is linked as a range: its first and last words.
RANGE_WORDS = 10
EDGE_WORDS = 4
_GAP = re.compile(r"\s*(?:…|\[…\]|\.\.\.)\s*")
# A line of the page's text shorter than this (a heading such as "Configuration") may stand anywhere on the
# page, in its menu too: a range does not start or end on it when that part of the quote has a longer line.
ANCHOR_WORDS = 3

_STYLE = """
body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#1b1b1b}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem;border-top:1px solid #ddd;padding-top:1rem}
.value{font-size:1.2rem;font-weight:600}.meta,.summary li{color:#555;font-size:.9rem}
.ok{color:#17622c}.bad{color:#a3161b}.change{font-weight:600}.changed{background:#fff3cd;padding:0 .3rem}
blockquote{margin:.3rem 0 .3rem 1rem;padding-left:.7rem;border-left:3px solid #ccc}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:.2rem .5rem;text-align:left;vertical-align:top}
"""


def _e(value: Any) -> str:
    """Text from outside, safe as HTML content or a quoted attribute; control characters shown, not obeyed."""
    return html.escape(inert(str(value if value is not None else "")), quote=True)


def _encode(text: str) -> str:
    """A text directive's term, percent-encoded: everything but unreserved characters, and '-' too (the
    spec's syntax character, like '&' and ',', which quote() already encodes)."""
    return quote(text, safe="").replace("-", "%2D")


def text_fragment(matched: str) -> str | None:
    """``:~:text=`` for the page's words a quote matched. A quote with an ellipsis or a line break is a range
    from its first fragment's start to its last fragment's end: the words around the gap are not next to each
    other on the page (or not in one block), so no term may run across it."""
    fragments: list[list[str]] = []
    for part in _GAP.split(matched or ""):
        # A browser matches a term within one block (a heading, a paragraph): no term across a line break either.
        lines = [words for line in part.split("\n") if (words := line.split())]
        fragments += [words for words in lines if len(words) >= ANCHOR_WORDS] or lines
    if not fragments:
        return None
    first, last = fragments[0], fragments[-1]
    if len(fragments) == 1 and len(first) <= RANGE_WORDS:
        return ":~:text=" + _encode(" ".join(first))
    return ":~:text=" + _encode(" ".join(first[:EDGE_WORDS])) + "," + _encode(" ".join(last[-EDGE_WORDS:]))


def fragment_link(citation: Mapping[str, Any]) -> str | None:
    """The citation's link at its quote: its page (or PDF page) link, plus a text fragment when the quote
    was verified and the link has no fragment of its own (a PDF's #page=N); None for no http(s) page."""
    link = str(citation.get("link") or citation.get("url") or "")
    if urlsplit(link).scheme.lower() not in ("http", "https"):
        return None
    directive = text_fragment(str(citation.get("matched") or "")) if citation.get("valid") else None
    if directive is None or "#" in link:
        return link
    return f"{link}#{directive}"


def _verdict(obj: Mapping[str, Any]) -> str:
    if obj.get("error"):
        return f'<span class="bad">failed: {_e(obj["error"])}</span>'
    if obj.get("answer") is None:
        return "no answer (dry run)"
    if obj.get("not_enough_information"):
        return "<strong>not enough information</strong>"
    grounded = '<span class="ok">grounded</span>' if obj.get("grounded") else '<span class="bad">not grounded</span>'
    return f"{grounded} · confidence {_e(obj.get('confidence'))}"


def _before(change: AnswerChange | None) -> str:
    if change is None or change.before is None or change.change not in (*REPORTABLE, REWORDED):
        return ""
    row = change.before
    try:
        # A text question's value is its answer's text: shown once, as the answer.
        typed = row.get("value") is not None and row.get("value_type") not in (None, "text")
        value = json.loads(row["value"]) if typed else None
    except (TypeError, ValueError):
        value = None
    said = f"value {value_text(value)} · " if value is not None else ""
    text = "failed" if row.get("error") else " ".join(str(row.get("answer") or "").split()) or EMPTY_ANSWER
    return f'<p class="meta">Before (run {_e(row.get("run_id"))}): {_e(said)}{_e(text)}</p>'


def _citation(c: Mapping[str, Any]) -> str:
    href = fragment_link(c)
    label = _e(c.get("heading_path") or c.get("url") or "unknown source")
    where = f'<a href="{_e(href)}">{label}</a>' if href else label
    mark = '<span class="ok">✓ verified</span>' if c.get("valid") else f'<span class="bad">✗ {_e(c.get("reason"))}</span>'
    stale = f" (stale: last fetched {_e(c['last_fetched_at'])})" if c.get("stale") else ""
    return f"<li>[{_e(c.get('source'))}] {where}{stale} {mark}<blockquote>{_e(c.get('quote'))}</blockquote></li>"


def _question(obj: Mapping[str, Any], change: AnswerChange | None) -> list[str]:
    parts = [f'<section id="q-{_e(obj.get("question_id"))}">',
             f"<h2>{_e(obj.get('question_id'))}: {_e(obj.get('question'))}</h2>"]
    if obj.get("type") not in (None, "text") and obj.get("answer") is not None and not obj.get("error"):
        shown = value_text(obj.get("value")) if obj.get("answered") else "not answered"
        problem = f' <span class="bad">(not trusted: {_e(obj["value_problem"])})</span>' if obj.get("value_problem") else ""
        parts.append(f'<p class="value">{_e(obj["type"])}: {_e(shown)}{problem}</p>')
    if obj.get("answer") is not None and not obj.get("error"):
        answer = str(obj["answer"])
        parts.append(f"<p>{_e(answer)}</p>" if answer.strip() else f'<p class="meta">{EMPTY_ANSWER}</p>')
    parts.append(f'<p class="meta">{_verdict(obj)}</p>')
    if obj.get("change"):
        label = LABELS.get(str(obj["change"]), str(obj["change"]))
        css = "change changed" if obj["change"] in REPORTABLE else "change"
        parts.append(f'<p>Since the last run: <span class="{css}">{_e(label)}</span></p>')
        parts.append(_before(change))
    citations = obj.get("citations") or []
    if citations:
        parts += ["<ul>", *(_citation(c) for c in citations), "</ul>"]
    parts.append("</section>")
    return parts


def _changes(diff: RunDiff | None) -> list[str]:
    if diff is None or diff.run_a is None:
        return []
    items = [c for c in diff.answers if c.change in (*REPORTABLE, REWORDED)]
    counts = diff.counts()
    line = ", ".join(f"{counts[k]} {LABELS[k]}" for k in LABELS if counts.get(k))
    parts = [f"<h2>What changed since run {_e(diff.run_a['run_id'])}</h2>", f"<p>{_e(line)}</p>"]
    if items:
        parts.append("<table><tr><th>question</th><th>change</th></tr>")
        parts += [f'<tr><td><a href="#q-{_e(c.question_id)}">{_e(c.question_id)}</a></td><td>{_e(LABELS[c.change])}'
                  "</td></tr>" for c in items]
        parts.append("</table>")
    pages = [p for p in diff.pages if p.change != "unchanged"]
    if pages:
        parts.append("<p>Pages: " + ", ".join(f"{_e(p.url)} {_e(p.change)}" for p in pages) + "</p>")
    return parts


def write_html_report(out: TextIO, title: str, summary_lines: Sequence[str], results: Iterable[dict[str, Any]],
                      diff: RunDiff | None = None) -> None:
    """The report, question by question (a run of any size needs the memory of one answer)."""
    by_id = {c.question_id: c for c in diff.answers} if diff is not None else {}
    out.write(f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n<title>{_e(title)}</title>\n'
              '<meta name="referrer" content="no-referrer">\n'
              f"<style>{_STYLE}</style></head><body>\n<h1>{_e(title)}</h1>\n")
    out.write('<ul class="summary">' + "".join(f"<li>{_e(line)}</li>" for line in summary_lines) + "</ul>\n")
    out.write("\n".join(_changes(diff)) + "\n")
    for obj in results:
        out.write("\n".join(p for p in _question(obj, by_id.get(str(obj.get("question_id")))) if p) + "\n")
    out.write("</body></html>\n")
