"""Reading URL lists: text files, YAML lists and command-line arguments, with file:line for every problem.

Pure functions, so the rules (what is a valid URL, what counts as a duplicate) are tested without a crawl.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import yaml

ALLOWED_SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}
# "example.org:8080/docs": urlsplit takes "example.org" for the scheme.
_HOST_PORT = re.compile(r"^[^:/?#]+:\d+(?:[/?#]|$)")
# A comment starts at "#" after whitespace; "page#section" is a fragment.
_COMMENT = re.compile(r"\s#")


@dataclass(frozen=True)
class ListedUrl:
    url: str  # normalised
    origin: str  # "urls.txt:3", "argument 2", "job.yaml"


@dataclass(frozen=True)
class UrlProblem:
    origin: str
    raw: str
    reason: str

    def __str__(self) -> str:
        return f"{self.origin}: {self.raw!r}: {self.reason}"


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
        url, reason = normalise_url(raw)
        if url is None:
            problems.append(UrlProblem(origin, raw, reason or "invalid"))
        elif url in seen:
            problems.append(UrlProblem(origin, raw, f"duplicate of {seen[url]}; fetched once"))
        else:
            seen[url] = origin
            urls.append(ListedUrl(url, origin))
    return urls, problems


def read_url_file(path: str | Path) -> list[tuple[str, str]]:
    """Raw ``(origin, url)`` entries from a text file (one per line, ``#`` comments) or a YAML list.

    Raises ``OSError`` for an unreadable file and ``ValueError`` (with file:line) for a YAML file that
    is not a list of strings.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8-sig", errors="replace")
    if path.suffix.lower() in (".yaml", ".yml"):
        return _yaml_entries(path, text)
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = _COMMENT.split(line, 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if stripped:
            entries.append((f"{path}:{number}", stripped))
    return entries


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
        if not isinstance(item, yaml.ScalarNode):
            raise ValueError(f"{origin}: expected a URL string")
        entries.append((origin, str(item.value)))
    return entries
