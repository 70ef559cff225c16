"""URL lists without a crawl: normalise_url, collect_urls, read_url_file."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from crawler.urllist import (
    MAX_URL_FILE_BYTES,
    ListedUrl,
    NotARegularFileError,
    UrlProblem,
    collect_urls,
    excerpt,
    normalise_url,
    read_url_file,
)

# -- normalise_url -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("https://docs.example.org/guide/", "https://docs.example.org/guide/"),
        # Scheme and host are case-insensitive; the path is not.
        ("HTTPS://Docs.Example.ORG/Guide/Intro.html", "https://docs.example.org/Guide/Intro.html"),
        # An empty path is "/".
        ("http://example.org", "http://example.org/"),
        # The fragment never reaches the server.
        ("http://example.org/page.html#install", "http://example.org/page.html"),
        # The query is kept as written: its order may matter to the server.
        ("http://example.org/search?b=2&a=1#top", "http://example.org/search?b=2&a=1"),
        # The default port is the same server; another port is not.
        ("http://example.org:80/a", "http://example.org/a"),
        ("https://example.org:443/a", "https://example.org/a"),
        ("http://example.org:443/a", "http://example.org:443/a"),
        ("http://127.0.0.1:8765/x", "http://127.0.0.1:8765/x"),
        # IPv6 literals keep their brackets.
        ("http://[::1]:8080/x", "http://[::1]:8080/x"),
        ("http://[2001:DB8::1]/", "http://[2001:db8::1]/"),
        # Surrounding whitespace is not part of the URL.
        ("  https://example.org/a  \t", "https://example.org/a"),
        # Percent-encoding stays as given.
        ("https://example.org/a%20b", "https://example.org/a%20b"),
    ],
)
def test_normalise_url_accepts(raw: str, expected: str) -> None:
    assert normalise_url(raw) == (expected, None)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("", "empty URL"),
        ("   ", "empty URL"),
        ("ftp://example.org/file.txt", "unsupported scheme 'ftp'; only http and https are fetched"),
        ("file:///etc/passwd", "unsupported scheme 'file'; only http and https are fetched"),
        ("mailto:docs@example.org", "unsupported scheme 'mailto'; only http and https are fetched"),
        ("javascript:alert(1)", "unsupported scheme 'javascript'; only http and https are fetched"),
        ("example.org/page.html", "no scheme; write it as https://…"),
        ("//example.org/page.html", "no scheme; write it as https://…"),
        # urlsplit reads "example.org" as a scheme here; the user forgot one.
        ("example.org:8080/docs", "no scheme; write it as https://…"),
        ("localhost:8000", "no scheme; write it as https://…"),
        ("http:///page.html", "no host"),
        ("https://", "no host"),
        ("http://example.org/a b.html", "URL contains spaces; percent-encode them as %20"),
        ("see the docs at example.org", "no scheme; write it as https://…"),  # prose, not a URL with spaces
        ("Note: see the docs", "no scheme; write it as https://…"),  # "Note:" reads as a scheme, but is prose
        ("ftp://example.org/a b.txt", "unsupported scheme 'ftp'; only http and https are fetched"),
        ("HTTPS://example.org/a b.html", "URL contains spaces; percent-encode them as %20"),
        ("http://example.org/a\tb", "URL contains spaces; percent-encode them as %20"),
        (
            "https://user:secret@example.org/",
            "credentials in URLs are not supported; they would be sent to every redirect target",
        ),
        ("https://user@example.org/", "credentials in URLs are not supported; they would be sent to every redirect target"),
    ],
)
def test_normalise_url_rejects(raw: str, reason: str) -> None:
    assert normalise_url(raw) == (None, reason)


@pytest.mark.parametrize("raw", ["http://example.org:99999/", "http://example.org:port/", "http://[::1/"])
def test_normalise_url_rejects_malformed_netloc(raw: str) -> None:
    url, reason = normalise_url(raw)
    assert url is None
    assert reason is not None and reason.startswith("not a valid URL (")


# -- collect_urls --------------------------------------------------------------------------------


def test_collect_urls_keeps_first_of_duplicates_and_reports_the_rest() -> None:
    entries = [
        ("urls.txt:1", "https://example.org/a"),
        ("urls.txt:2", "ftp://example.org/b"),
        ("urls.txt:3", "HTTPS://EXAMPLE.org:443/a#section"),  # the same page as line 1
        ("urls.txt:4", "https://example.org/b"),
        ("argument 1", "https://example.org/b"),
        ("urls.txt:5", "https://example.org/a?x=1"),  # another page: the query differs
    ]
    urls, problems = collect_urls(entries)
    assert urls == [
        ListedUrl("https://example.org/a", "urls.txt:1"),
        ListedUrl("https://example.org/b", "urls.txt:4"),
        ListedUrl("https://example.org/a?x=1", "urls.txt:5"),
    ]
    assert problems == [
        UrlProblem("urls.txt:2", "ftp://example.org/b", "unsupported scheme 'ftp'; only http and https are fetched"),
        UrlProblem("urls.txt:3", "HTTPS://EXAMPLE.org:443/a#section", "duplicate of urls.txt:1; fetched once", duplicate=True),
        UrlProblem("argument 1", "https://example.org/b", "duplicate of urls.txt:4; fetched once", duplicate=True),
    ]
    assert str(problems[0]) == "urls.txt:2: 'ftp://example.org/b': unsupported scheme 'ftp'; only http and https are fetched"


def test_collect_urls_invalid_entry_does_not_count_as_seen() -> None:
    urls, problems = collect_urls([("a", "https://u:p@example.org/"), ("b", "https://example.org/")])
    assert urls == [ListedUrl("https://example.org/", "b")]
    assert [p.origin for p in problems] == ["a"]


def test_collect_urls_empty() -> None:
    assert collect_urls([]) == ([], [])


# -- read_url_file: text -------------------------------------------------------------------------


def test_text_file_comments_blank_lines_and_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "urls.txt"
    path.write_text(
        "# documentation to crawl\n"                       # 1
        "\n"                                               # 2
        "https://example.org/a\n"                          # 3
        "   # an indented comment\n"                       # 4
        "https://example.org/b   # trailing comment\n"     # 5
        "https://example.org/c\t# after a tab\n"           # 6
        "https://example.org/d#fragment\n"                 # 7 a fragment, not a comment
        "   https://example.org/e   \n"                    # 8
        "\t\n"                                             # 9
        "not a url\n",                                     # 10
        encoding="utf-8",
    )
    assert read_url_file(path) == [
        (f"{path}:3", "https://example.org/a"),
        (f"{path}:5", "https://example.org/b"),
        (f"{path}:6", "https://example.org/c"),
        (f"{path}:7", "https://example.org/d#fragment"),
        (f"{path}:8", "https://example.org/e"),
        (f"{path}:10", "not a url"),
    ]
    urls, problems = collect_urls(read_url_file(path))
    assert [u.url for u in urls] == [f"https://example.org/{x}" for x in "abcde"]
    assert problems == [UrlProblem(f"{path}:10", "not a url", "no scheme; write it as https://…")]


def test_text_file_bom_and_crlf(tmp_path: Path) -> None:
    path = tmp_path / "urls.txt"
    path.write_bytes("\ufeffhttps://example.org/a\r\n\r\nhttps://example.org/b\r\n".encode("utf-8"))
    assert read_url_file(path) == [(f"{path}:1", "https://example.org/a"), (f"{path}:3", "https://example.org/b")]


def test_text_file_with_any_other_suffix_is_text(tmp_path: Path) -> None:
    path = tmp_path / "list"
    path.write_text("- https://example.org/a\n", encoding="utf-8")
    # Not YAML: the dash is part of the entry, which then fails validation with its line.
    assert read_url_file(path) == [(f"{path}:1", "- https://example.org/a")]


def test_empty_text_file(tmp_path: Path) -> None:
    path = tmp_path / "urls.txt"
    path.write_text("# nothing yet\n\n", encoding="utf-8")
    assert read_url_file(path) == []


def test_missing_file_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_url_file(tmp_path / "missing.txt")


# -- read_url_file: YAML -------------------------------------------------------------------------


def test_yaml_list_with_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "urls.yaml"
    path.write_text(
        "# docs\n"                                       # 1
        "- https://example.org/a\n"                      # 2
        "\n"                                             # 3
        "- 'https://example.org/b#frag'  # a comment\n"  # 4
        "- ftp://example.org/c\n",                       # 5
        encoding="utf-8",
    )
    assert read_url_file(path) == [
        (f"{path}:2", "https://example.org/a"),
        (f"{path}:4", "https://example.org/b#frag"),
        (f"{path}:5", "ftp://example.org/c"),
    ]


def test_yaml_mapping_with_urls_key(tmp_path: Path) -> None:
    path = tmp_path / "job.yml"
    path.write_text("name: docs\nurls:\n  - https://example.org/a\n  - https://example.org/b\n", encoding="utf-8")
    assert read_url_file(path) == [(f"{path}:3", "https://example.org/a"), (f"{path}:4", "https://example.org/b")]


def test_empty_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "urls.yaml"
    path.write_text("# nothing\n", encoding="utf-8")
    assert read_url_file(path) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- https://example.org/a\n- [unclosed\n", ":3: YAML syntax error: "),
        ("name: docs\nquestions: []\n", ":1: expected a list of URLs"),
        ("just a string\n", ":1: expected a list of URLs"),
        ("- https://example.org/a\n- url: https://example.org/b\n", ":2: expected a URL string"),
        ("- https://example.org/a\n- [https://example.org/b]\n", ":2: expected a URL string"),
    ],
)
def test_yaml_errors_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "urls.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as err:
        read_url_file(path)
    assert str(err.value).startswith(f"{path}{message}"), str(err.value)


def test_yaml_entries_validate_like_text_entries(tmp_path: Path) -> None:
    path = tmp_path / "urls.yaml"
    path.write_text("- https://example.org/a\n- https://EXAMPLE.org/a\n- example.org/b\n", encoding="utf-8")
    urls, problems = collect_urls(read_url_file(path))
    assert urls == [ListedUrl("https://example.org/a", f"{path}:1")]
    assert problems == [
        UrlProblem(f"{path}:2", "https://EXAMPLE.org/a", f"duplicate of {path}:1; fetched once", duplicate=True),
        UrlProblem(f"{path}:3", "example.org/b", "no scheme; write it as https://…"),
    ]


def test_binary_bodies_are_told_from_markup() -> None:
    import random

    from crawler.spiders.urls import looks_binary

    rng = random.Random(1)
    assert looks_binary(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + rng.randbytes(5000))
    assert looks_binary(b"PK\x03\x04" + rng.randbytes(5000))  # a zip archive
    assert not looks_binary(b"  <!DOCTYPE html><html><body><p>zero\x00byte</p></body></html>")
    assert not looks_binary("\ufeff<html>caf\u00e9</html>".encode("utf-8"))
    assert not looks_binary("<html>x</html>".encode("utf-16"))  # BOM first
    assert not looks_binary(b"Plain text without markup, still text.\n")


# -- bounded, non-blocking reads and short quotes (issue 13 rows 5 and 8) -------------------------


def _read_in_thread(path: Path) -> BaseException | object:
    """read_url_file(path) with a bound: a read that blocks (a FIFO without a writer) fails the test."""
    outcome: list[BaseException | object] = []

    def target() -> None:
        try:
            outcome.append(read_url_file(path))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive(), f"reading {path} blocked"
    return outcome[0]


def test_fifo_device_and_socket_are_refused_before_any_read(tmp_path: Path) -> None:
    fifo = tmp_path / "urls.fifo"
    os.mkfifo(fifo)
    sock_path = tmp_path / "urls.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(sock_path))
    try:
        for path, kind in ((fifo, "a named pipe (FIFO)"), (Path("/dev/zero"), "a character device"),
                           (sock_path, "a socket"), (tmp_path, "a folder")):
            outcome = _read_in_thread(path)
            assert isinstance(outcome, NotARegularFileError), (path, outcome)
            assert outcome.kind == kind
    finally:
        server.close()


def test_url_file_over_16_mib_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "urls.txt"
    with path.open("wb") as handle:
        handle.truncate(MAX_URL_FILE_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(ValueError, match=r"urls\.txt: URL file is larger than 16 MiB; split the URLs"):
        read_url_file(path)
    with path.open("r+b") as handle:
        handle.truncate(MAX_URL_FILE_BYTES)  # exactly at the limit is fine
    assert read_url_file(path) == [(f"{path}:1", "\0" * MAX_URL_FILE_BYTES)]


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("root:$6$saltsalt$0123456789abcdefABCDEF:19000:0:99999:7:::", "'root…'"),  # /etc/shadow
        ("root:*:20228:0:99999:7:::", "'root…'"),
        ("PATH=/usr/bin\0HOME=/root\0AWS_SECRET_ACCESS_KEY=abc", "'PATH…'"),  # /proc/self/environ
        ("password: hunter2", "'password…'"),
        ("b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAA", "'…'"),  # a key's base64
        ("https://user:secret@example.org/a?token=s3cr3t#x", "'https://…@example.org/a…'"),
        ("http://admin:hunter2secret#x@127.0.0.1:35563", "'http://…@127.0.0.1:35563'"),  # unencoded "#", "/"
        ("https://admin:hunter2/secret@gpu1/x", "'https://…@gpu1/x'"),
        # An "@" in a query ends no login: what follows it is never quoted as a host.
        ("https://h.org/p?to=a@b&token=abc123", "'https://h.org/p…'"),
        ("https://u:pw@h.org/a?mail=x@evil&k=TOK1", "'https://…@h.org/a…'"),
        ("http://u:p#w@gpu1:1/x?mail=a@b&t=TOK1", "'http://…@gpu1:1/x…'"),
        ("https://medium.com/@alice/post", "'https://medium.com/@alice/post'"),
        ("http://u:2024#TOK1@gpu1/", "'http://…@gpu1/'"),
        ("https://root:*:20228:0:99999:7:::", "'https://root…'"),
        ("x" * 100, "'" + "x" * 40 + "…'"),
        ("\x1b[31mred\x07", "'\\x1b[31mred\\x07'"),  # escaped, never sent to a terminal as is
        # What helps find the line stays readable.
        ("ftp://example.org/docs", "'ftp://example.org/docs'"),
        ("example.org:8080/docs", "'example.org:8080/docs'"),
        ("mailto:a@b.org", "'mailto:a@b.org'"),
    ],
)
def test_excerpt_quotes_a_short_printable_prefix_and_no_secret(raw: str, shown: str) -> None:
    assert excerpt(raw) == shown


def test_problems_in_a_secret_file_do_not_echo_it(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    shadow.write_text("root:$6$saltsalt$0123456789abcdefABCDEF:19000:0:99999:7:::\ndaemon:*:20228:0:99999:7:::\n")
    _, problems = collect_urls(read_url_file(shadow))
    assert [str(p) for p in problems] == [
        f"{shadow}:1: 'root…': unsupported scheme 'root'; only http and https are fetched",
        f"{shadow}:2: 'daemon…': unsupported scheme 'daemon'; only http and https are fetched",
    ]
