"""Reading URL lists: text files, YAML lists and command-line arguments, with file:line for every problem.

The one reader of URL files: `webqa crawl -i`, a job's ``urls_file`` and ``scrapy crawl -a urls_file``
all go through ``read_url_file``, so a file means the same to each. Pure functions, so the rules (what
is a valid URL, what counts as a duplicate) are tested without a crawl.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import yaml

from pipelines.errors import ConfigError
from pipelines.redact import split_login

ALLOWED_SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}
# "example.org:8080/docs": urlsplit takes "example.org" for the scheme.
_HOST_PORT = re.compile(r"^[^:/?#]+:\d+(?:[/?#]|$)")
# A scheme as RFC 3986 writes it ("https:"): tells a line of prose from a URL with a space in it.
_HTTP = re.compile(r"(?i)^https?://")
# A comment starts at "#" after whitespace; "page#section" is a fragment.
_COMMENT = re.compile(r"\s#")
# "sitemap: URL" (or "sitemap:URL", any case, as robots.txt writes it): the URL is a sitemap whose pages are crawled.
_SITEMAP = re.compile(r"^\s*sitemap\s*:\s*(?=\S)", re.IGNORECASE)

# Far more URLs than any max_pages; the same limit as a job's urls_file.
MAX_URL_FILE_BYTES = 16 * 1024 * 1024
# How much of a file's line an error message may quote: enough to find the line, too little to leak it.
EXCERPT_CHARS = 40
# scheme://[userinfo@]rest: userinfo, query and fragment are never quoted (they carry passwords and tokens). Where
# the userinfo ends is redact.split_login's reading (a password may hold an unencoded "#", "/", "?" or "@").
_URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]{0,15}://")
# In other text the secret follows "key=", "key: " or the first field of "user:hash:…" (/etc/shadow).
_SECRET_START = re.compile(r"=|:\s")
# A long run mixing letters and digits without "/" or "." looks like a key, a hash or base64.
_TOKEN_RUN = re.compile(r"[A-Za-z0-9+_-]{16,}")


def excerpt(raw: str, limit: int = EXCERPT_CHARS) -> str:
    """Quote untrusted file content in an error message: a short, printable prefix, never a secret.

    A URL is shown without userinfo (``https://…@host/``), query or fragment; other text only up to
    ``=``, ``: `` or, when it has several colons, the first one (``root:$6$…`` → ``'root…'``,
    ``PATH=/usr/bin`` → ``'PATH…'``); anything is cut before a key-like run of 16+ letters and
    digits and after ``limit`` characters. Non-printable characters are escaped (``\\x00``), so a NUL
    or an ANSI escape cannot reach a terminal or cron mail.
    """
    scheme = _URL_SCHEME.match(raw)
    if scheme:
        login = split_login(raw)
        after = login[1] if login else raw[scheme.end():]
        path = re.match(r"[^?#]*", after).group()  # type: ignore[union-attr]
        lead = scheme.group() + ("…@" if login else "")
        shown, rest = lead + path, after[len(path):]
        authority = path.split("/", 1)[0]
        if authority.count(":") >= 2 and not authority.startswith("["):  # "https://" + a shadow line
            shown, rest = lead + authority.split(":", 1)[0], "…"
    else:
        shown = _SECRET_START.split(raw, 1)[0]
        if shown.count(":") >= 2:
            shown = shown.split(":", 1)[0]
        rest = raw[len(shown):]
    for run in _TOKEN_RUN.finditer(shown):
        if any(c.isdigit() for c in run.group()) and any(c.isalpha() for c in run.group()):
            shown, rest = shown[: run.start()], "…"
            break
    if len(shown) > limit:
        shown, rest = shown[:limit], "…"
    return repr(shown + "…" if rest else shown)


class NotARegularFileError(OSError):
    """A path that names a FIFO, a device, a socket or a folder: reading it could block or never end."""

    def __init__(self, path: Path, kind: str) -> None:
        super().__init__(f"{path}: is {kind}, not a regular file")
        self.kind = kind


def _file_kind(mode: int) -> str | None:
    """What a non-regular file is, in words, or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_bounded(path: str | Path, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of a regular file (one more than allowed shows it is too large).

    FIFOs, devices (``/dev/zero``), sockets and folders raise ``NotARegularFileError`` before
    anything is read: a FIFO without a writer blocks forever and ``/dev/zero`` never ends. The file
    is opened non-blocking and checked again with ``fstat``, so a path swapped after the first check
    is caught too. Other problems raise ``OSError`` (``FileNotFoundError``, ``PermissionError``).
    """
    path = Path(path)
    kind = _file_kind(os.stat(path).st_mode)
    if kind is not None:
        raise NotARegularFileError(path, kind)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ENXIO:  #: a socket (or a FIFO opened for writing) swapped in since stat
            raise NotARegularFileError(path, "a socket") from None
        raise
    with os.fdopen(fd, "rb") as handle:
        kind = _file_kind(os.fstat(handle.fileno()).st_mode)
        if kind is not None:
            raise NotARegularFileError(path, kind)
        return handle.read(limit + 1)


@dataclass(frozen=True)
class ListedUrl:
    url: str  # normalised
    origin: str  # "urls.txt:3", "argument 2", "job.yaml"
    # Listed as "sitemap: URL": a sitemap (or robots.txt, for the sitemaps it names) whose pages are crawled.
    sitemap: bool = False


def sitemap_entry(raw: str) -> str | None:
    """The URL of a ``sitemap: URL`` entry, or None for an ordinary URL."""
    match = _SITEMAP.match(raw)
    return raw[match.end():] if match else None


@dataclass(frozen=True)
class UrlProblem:
    origin: str
    raw: str
    reason: str
    # A second listing of a URL already listed: not a URL of its own, so never recorded as skipped.
    duplicate: bool = False

    def __str__(self) -> str:
        return f"{self.origin}: {excerpt(self.raw)}: {self.reason}"


def normalise_url(raw: str) -> tuple[str | None, str | None]:
    """Return ``(url, None)`` for a fetchable URL, else ``(None, reason)``.

    Normalising only what cannot change the page served (scheme and host case, the default port, the
    fragment, an empty path) keeps "the same page listed twice" detectable without guessing about
    query order.
    """
    text = raw.strip()
    if not text:
        return None, "empty URL"
    if any(ch.isspace() for ch in text):
        # A line of prose ("see the docs", "Note: see the docs") is not a URL with spaces: say what it lacks.
        if not _HTTP.match(text):
            scheme = text.split("://", 1)[0].lower() if "://" in text.split()[0] else ""
            if scheme and scheme.isascii() and scheme.replace("+", "").replace("-", "").replace(".", "").isalnum():
                return None, f"unsupported scheme '{scheme}'; only http and https are fetched"
            return None, "no scheme; write it as https://…"
        return None, "URL contains spaces; percent-encode them as %20"
    try:
        parts = urlsplit(text)
        port = parts.port  # raises ValueError on a port that is not a number or out of range
    except ValueError as exc:
        return None, f"not a valid URL ({exc})"
    scheme = parts.scheme.lower()
    if not scheme or (scheme not in ALLOWED_SCHEMES and _HOST_PORT.match(text)):
        return None, "no scheme; write it as https://…"
    if scheme not in ALLOWED_SCHEMES:
        return None, f"unsupported scheme '{scheme}'; only http and https are fetched"
    host = (parts.hostname or "").lower()
    if not host:
        return None, "no host"
    if port == DEFAULT_PORTS[scheme]:
        port = None
    netloc = host if port is None else f"{host}:{port}"
    if ":" in host:  # IPv6 literal
        netloc = f"[{host}]" if port is None else f"[{host}]:{port}"
    if parts.username or parts.password:
        return None, "credentials in URLs are not supported; they would be sent to every redirect target"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, "")), None


def collect_urls(entries: Iterable[tuple[str, str]]) -> tuple[list[ListedUrl], list[UrlProblem]]:
    """Validate ``(origin, raw)`` pairs, keeping the first of duplicates and reporting the rest."""
    seen: dict[str, str] = {}
    urls: list[ListedUrl] = []
    problems: list[UrlProblem] = []
    for origin, raw in entries:
        target = sitemap_entry(raw)
        url, reason = normalise_url(raw if target is None else target)
        key = url if target is None or url is None else f"sitemap: {url}"
        if url is None or key is None:
            problems.append(UrlProblem(origin, raw, reason or "invalid"))
        elif key in seen:
            problems.append(UrlProblem(origin, raw, f"duplicate of {seen[key]}; fetched once", duplicate=True))
        else:
            seen[key] = origin
            urls.append(ListedUrl(url, origin, sitemap=target is not None))
    return urls, problems


def read_url_file(path: str | Path) -> list[tuple[str, str]]:
    """Raw ``(origin, url)`` entries from a text file (one per line, ``#`` comments) or a YAML list.

    Raises ``OSError`` for an unreadable file (``NotARegularFileError`` for a FIFO, device, socket or
    folder) and ``ValueError`` (one line, with file:line where there is one) for a file over
    ``MAX_URL_FILE_BYTES`` or a YAML file that is not a list of strings.
    """
    path = Path(path)
    data = read_bounded(path, MAX_URL_FILE_BYTES)
    if len(data) > MAX_URL_FILE_BYTES:
        raise ValueError(
            f"{path}: URL file is larger than {MAX_URL_FILE_BYTES // (1024 * 1024)} MiB; "
            "split the URLs over several runs"
        )
    text = data.decode("utf-8-sig", errors="replace")
    if path.suffix.lower() in (".yaml", ".yml"):
        return _yaml_entries(path, text)
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = _COMMENT.split(line, 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if stripped:
            entries.append((f"{path}:{number}", stripped))
    return entries


def require_url_file(path: str | Path, *, mentioned_in: str | None = None) -> list[tuple[str, str]]:
    """``read_url_file`` for a crawl or a job: its entries, or one ``ConfigError`` line.

    A bad line is not an error here: ``collect_urls`` reports it as ``file:line: …`` and the crawl skips
    it, since one bad entry must not stop the others. A file with no valid URL at all is an error,
    because nothing in it can be crawled. ``mentioned_in`` says which setting named the file.
    """
    where = f" ({mentioned_in})" if mentioned_in else ""
    try:
        entries = read_url_file(path)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file{where}; check the path") from None
    except NotARegularFileError as exc:
        # A FIFO would block and /dev/zero never ends: refused before any read.
        raise ConfigError(f"{path}: is {exc.kind}{where}, expected a file with one URL per line") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder{where}, expected a file with one URL per line") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read{where}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    problem = _no_valid_url(path, entries, where)
    if problem is not None:
        raise ConfigError(problem)
    return entries


def _no_valid_url(path: str | Path, entries: list[tuple[str, str]], where: str = "") -> str | None:
    """Why a file's entries hold nothing to crawl (led by its first bad line), or None when one URL is valid."""
    urls, problems = collect_urls(entries)
    if urls:
        return None
    if not problems:
        return f"{path}: lists no URLs{where}; add one http(s) URL per line"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{problems[0]}{more}; the file lists no valid URL{where}"


def _yaml_entries(path: Path, text: str) -> list[tuple[str, str]]:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ValueError(f"{where}: YAML syntax error: {getattr(exc, 'problem', exc)}") from None
    if node is None:
        return []
    if isinstance(node, yaml.MappingNode):  # accept {urls: [...]} as well as a bare list
        for key, value in node.value:
            if key.value == "urls":
                node = value
                break
    if not isinstance(node, yaml.SequenceNode):
        raise ValueError(f"{path}:{node.start_mark.line + 1}: expected a list of URLs")
    entries = []
    for item in node.value:
        origin = f"{path}:{item.start_mark.line + 1}"
        sitemap = _sitemap_mapping(item)
        if sitemap is not None:
            entries.append((origin, f"sitemap: {sitemap}"))
            continue
        if not isinstance(item, yaml.ScalarNode):
            raise ValueError(f"{origin}: expected a URL string (or 'sitemap: URL')")
        entries.append((origin, str(item.value)))
    return entries


def _sitemap_mapping(node: yaml.Node) -> str | None:
    """The URL of a YAML ``- sitemap: URL`` item (a one-key mapping), else None."""
    if isinstance(node, yaml.MappingNode) and len(node.value) == 1:
        key, value = node.value[0]
        if isinstance(key, yaml.ScalarNode) and key.value.lower() == "sitemap" and isinstance(value, yaml.ScalarNode):
            return str(value.value)
    return None
