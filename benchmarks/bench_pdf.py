"""Benchmark: which PDF parser gives webqa the text of real PDFs (issue 27, item 2)?

Four Debian manuals ship as both PDF and HTML (scripts/install-corpus-pdf.sh): the HTML, cleaned as webqa
cleans pages, is the truth. Every sentence of eight words or more of the HTML is looked for in each
parser's text of the PDF:

- **words**: with its words as words (lower case, letters and digits, one space between): what BM25 and a
  verbatim quote need;
- **letters**: with every space removed on both sides: the text is there, even if words run together.

Also the CPU seconds per page, and for webqa's own extraction (pipelines/pdf.py: the chosen parser plus
running headers dropped and hyphenation joined) the same recall, so the cleanup is measured too.

    .venv/bin/python benchmarks/bench_pdf.py

Writes benchmarks/results/pdf.json.
"""

from __future__ import annotations

import io
import json
import logging
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CORPUS = ROOT / "build" / "corpus-pdf"

MANUALS = {
    "debian-faq": ("usr/share/doc/debian/FAQ/debian-faq.en.pdf", "usr/share/doc/debian/FAQ", "*.html"),
    "maint-guide": ("usr/share/doc/maint-guide/maint-guide.en.pdf", "usr/share/doc/maint-guide/html", "*.html"),
    "developers-reference": ("usr/share/developers-reference/developers-reference.pdf",
                             "usr/share/developers-reference", "*.html"),
    "debian-reference": ("usr/share/debian-reference/debian-reference.en.pdf", "usr/share/debian-reference",
                         "*.en.html"),
}
MIN_WORDS = 8
_NOT_WORD = re.compile(r"[^a-z0-9]+")


def words(text: str) -> str:
    return " " + " ".join(_NOT_WORD.sub(" ", text.lower()).split()) + " "


def letters(text: str) -> str:
    return _NOT_WORD.sub("", text.lower())


def html_sentences(folder: Path, pattern: str) -> list[str]:
    from pipelines.chunk import split_sentences
    from pipelines.clean import clean_page

    sentences: list[str] = []
    for path in sorted(folder.glob(pattern)):
        result, blocks = clean_page(path.read_bytes(), path.as_uri())
        for block in blocks:
            if block.kind in ("paragraph", "item", "term"):
                sentences += [s for s in split_sentences(block.text) if len(s.split()) >= MIN_WORDS]
    return list(dict.fromkeys(sentences))


def pypdf_pages(data: bytes) -> list[str]:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    return [page.extract_text() or "" for page in reader.pages]


def pdfminer_pages(data: bytes) -> list[str]:
    from pdfminer.high_level import extract_pages
    from pdfminer.layout import LTTextContainer

    pages = []
    for layout in extract_pages(io.BytesIO(data)):
        pages.append("".join(element.get_text() for element in layout if isinstance(element, LTTextContainer)))
    return pages


def webqa_pages(data: bytes) -> list[str]:
    from pipelines.pdf import extract_pdf

    result, _blocks = extract_pdf(data, "https://example.org/manual.pdf")
    return [result.text]


PARSERS: dict[str, Callable[[bytes], list[str]]] = {
    "pypdf": pypdf_pages, "pdfminer.six": pdfminer_pages,
}
if "--webqa" in sys.argv:
    PARSERS["webqa (pipelines/pdf.py)"] = webqa_pages


def main() -> int:
    logging.disable(logging.WARNING)  # pypdf warns about every font it cannot fully read
    if not CORPUS.exists():
        print(f"no corpus at {CORPUS}; run scripts/install-corpus-pdf.sh")
        return 2
    results: dict[str, dict[str, dict[str, float]]] = {}
    for manual, (pdf, html, pattern) in MANUALS.items():
        data = (CORPUS / pdf).read_bytes()
        sentences = html_sentences(CORPUS / html, pattern)
        results[manual] = {}
        pages = None
        for name, parse in PARSERS.items():
            started = time.process_time()
            texts = parse(data)
            seconds = time.process_time() - started
            pages = len(texts) if name != "webqa (pipelines/pdf.py)" else pages
            spaced, glued = words("\n".join(texts)), letters("".join(texts))
            found_words = sum(words(s) in spaced for s in sentences)
            found_letters = sum(letters(s) in glued for s in sentences)
            results[manual][name] = {
                "pages": pages or 0, "sentences": len(sentences),
                "words": round(found_words / len(sentences), 3), "letters": round(found_letters / len(sentences), 3),
                "cpu_ms_per_page": round(1000 * seconds / max(pages or 1, 1), 1),
            }
            row = results[manual][name]
            print(f"{manual:22} {name:26} pages {row['pages']:4}  sentences {row['sentences']:5}  "
                  f"words {row['words']:.3f}  letters {row['letters']:.3f}  cpu {row['cpu_ms_per_page']:6.1f} ms/page")
    out = ROOT / "benchmarks" / "results" / "pdf.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
