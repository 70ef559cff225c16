"""Tell someone when answers changed: one webhook POST and/or one command per run with changes.

The signal of a change used to be exit code 5 alone. With ``notify:`` a run whose answers changed, are
new or are no longer answered (against the job's previous successful run; a first run has nothing to
compare with and sends nothing) sends one JSON body: the job, the runs, and per changed question its id,
before and now values and answers, and deep links (its section of report.html, its evidence at the
quote). A failed notification is the run's notice, never its exit code: the answers are stored either way.

The webhook obeys the crawl's SSRF rule: its host's addresses are checked (``address_problem``) and the
POST goes to the checked address (Host header and TLS name kept), so a DNS answer that changes between
check and connection cannot reach a private address; redirects are not followed. Every POST has a
timeout, and retries (network errors, 429, 5xx) are bounded by ``attempts`` with a growing wait.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from crawler.middlewares.ssrf import address_problem, blocked_message, parse_ip_host
from jobs.changes import REPORTABLE
from jobs.history import RunDiff, citations_of
from jobs.notify_config import NotifyConfig, shown_webhook
from jobs.report_html import fragment_link
from pipelines.redact import url_credentials

__all__ = ["NotifyError", "change_payload", "notify_changes", "post_webhook", "run_command", "webhook_target"]

USER_AGENT = "webqa-notify"
BACKOFF_S = 1.0
BACKOFF_MAX_S = 10.0
MAX_COMMAND_OUTPUT = 2000  # characters of a failed command's stderr kept for the notice


class NotifyError(Exception):
    """A notification that could not be delivered; the message says where and why."""


def _value(row: dict[str, Any] | None) -> Any:
    if row is None or row.get("value") is None:
        return None
    try:
        return json.loads(row["value"])
    except (TypeError, ValueError):
        return None


def _side(row: dict[str, Any] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {"run_id": row["run_id"], "answer": row.get("answer"), "value": _value(row), "error": row.get("error"),
            "not_enough_information": bool(row.get("not_enough_info"))}


def change_payload(job_name: str, diff: RunDiff, report: Path | None = None) -> dict[str, Any] | None:
    """The JSON body for a run's changes, or None when nothing changed (or nothing was there to compare with)."""
    if diff.run_a is None:
        return None
    changed = [c for c in diff.answers if c.change in REPORTABLE]
    if not changed:
        return None
    report_uri = report.resolve().as_uri() if report is not None else None
    items = []
    for c in changed:
        evidence = [link for link in (fragment_link(cit) for cit in citations_of(c.after or {}) if cit.get("valid"))
                    if link]
        items.append({"question_id": c.question_id, "question": c.question, "change": c.change,
                      "before": _side(c.before), "now": _side(c.after),
                      "report": f"{report_uri}#q-{c.question_id}" if report_uri else None,
                      "evidence": evidence})
    return {"job": job_name, "run_id": diff.run_b["run_id"], "previous_run_id": diff.run_a["run_id"],
            "report": report_uri, "changes": items}


def webhook_target(url: str, *, allow_private: bool) -> tuple[str, str]:
    """The URL to POST to with the host replaced by its checked address, and the host (for Host and TLS).

    Raises NotifyError when the host does not resolve or an address of it is not public and private
    networks are not allowed (the message names the switch).
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    literal = parse_ip_host(host)
    try:
        addresses = [literal] if literal is not None else [
            ipaddress.ip_address(info[4][0].split("%", 1)[0])
            for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
    except (OSError, UnicodeError) as exc:
        raise NotifyError(f"webhook {shown_webhook(url)}: cannot resolve {host}: {exc}") from None
    if not allow_private:
        for ip in addresses:
            problem = address_problem(ip)
            if problem:
                raise NotifyError(f"webhook {shown_webhook(url)}: {blocked_message(host, problem)} "
                                  "(crawl.allow_private_networks)")
    ip = addresses[0]
    shown = f"[{ip}]" if ip.version == 6 else str(ip)
    netloc = f"{shown}:{parts.port}" if parts.port else shown
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, "")), host


def within(seconds: float, call: Any, *args: Any) -> None:
    """``call(*args)`` with a bound on the whole of it: httpx bounds each connect, read and write, so a receiver
    that sends a byte now and then would hold the run's end. The call goes on in a daemon thread, abandoned."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call(*args)
            outcome.append(None)
        except BaseException as exc:  # handed to the caller below
            outcome.append(exc)

    worker = threading.Thread(target=run, name="webqa-notify", daemon=True)
    worker.start()
    worker.join(seconds)
    if not outcome:
        raise httpx.TimeoutException(f"no complete answer within {seconds:g} s")
    if outcome[0] is not None:
        raise outcome[0]


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code == 429 or exc.response.status_code >= 500
    return isinstance(exc, httpx.TransportError)


def post_webhook(url: str, body: dict[str, Any], *, timeout: float, attempts: int, allow_private: bool,
                 backoff_s: float = BACKOFF_S) -> int:
    """POST ``body`` as JSON; returns the number of POSTs made. Raises NotifyError after the last attempt."""
    target, host = webhook_target(url, allow_private=allow_private)
    parts = urlsplit(url)
    default_port = {"http": 80, "https": 443}[parts.scheme]
    port = parts.port
    headers = {"Host": host if port in (None, default_port) else f"{host}:{port}", "User-Agent": USER_AGENT}
    made = 0

    def post(client: httpx.Client) -> None:
        response = client.post(target, json=body, headers=headers, extensions={"sni_hostname": host})
        response.raise_for_status()

    def once(client: httpx.Client) -> None:
        nonlocal made
        made += 1
        within(timeout, post, client)  # notify.timeout is what one POST may take in all

    retrying = Retrying(stop=stop_after_attempt(attempts), wait=wait_exponential(multiplier=backoff_s, max=BACKOFF_MAX_S),
                        retry=retry_if_exception(_transient), reraise=True)
    # The target is rebuilt on the checked address, so the URL's user:password@ is sent as Basic auth, as curl does.
    auth = url_credentials(url)
    try:
        with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False, auth=auth) as client:
            retrying(once, client)
    except httpx.HTTPStatusError as exc:
        raise NotifyError(f"webhook {shown_webhook(url)} answered HTTP {exc.response.status_code} "
                          f"({made} POST{'s' if made != 1 else ''})") from None
    except httpx.HTTPError as exc:
        raise NotifyError(f"webhook {shown_webhook(url)} failed after {made} POST{'s' if made != 1 else ''}: "
                          f"{type(exc).__name__}: {exc or 'no detail'}") from None
    return made


def run_command(argv: list[str], body: dict[str, Any], *, timeout: float) -> None:
    """Run the command once with the JSON on stdin (no shell). Raises NotifyError on failure or timeout."""
    try:
        done = subprocess.run(argv, input=json.dumps(body, ensure_ascii=False, default=str), text=True,
                              capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise NotifyError(f"notify command {argv[0]} did not finish within {timeout:g} s") from None
    except OSError as exc:
        raise NotifyError(f"notify command {argv[0]} could not be started: {exc.strerror or exc}") from None
    if done.returncode != 0:
        said = " ".join(done.stderr.split())[:MAX_COMMAND_OUTPUT]
        raise NotifyError(f"notify command {argv[0]} exited with {done.returncode}" + (f": {said}" if said else ""))


def notify_changes(config: NotifyConfig, job_name: str, diff: RunDiff, report: Path | None, *,
                   allow_private: bool) -> list[str]:
    """Send the run's changes where the job says; returns one problem per channel that failed (none: sent,
    or nothing to send)."""
    body = change_payload(job_name, diff, report)
    if body is None:
        return []
    problems = []
    if config.webhook:
        try:
            post_webhook(config.webhook, body, timeout=config.timeout, attempts=config.attempts,
                         allow_private=allow_private)
        except NotifyError as exc:
            problems.append(f"notification not sent: {exc}")
    if config.command:
        try:
            run_command(list(config.command), body, timeout=config.timeout)
        except NotifyError as exc:
            problems.append(f"notification not sent: {exc}")
    return problems


def private_allowed(job_allows: bool, flag: bool) -> bool:
    """The crawl's opt-in for private networks: the job key, --allow-private-networks, or the environment."""
    from crawler.middlewares.ssrf import env_allows_private_networks

    try:
        return job_allows or flag or env_allows_private_networks()
    except ValueError:
        return False  # an unreadable switch keeps the guard on (the crawl reports it)


def announce(config: NotifyConfig | None, job_name: str, diff: RunDiff | None, out_dir: Path, formats: list[str], *,
             allow_private: bool) -> list[str]:
    """The runner's one call: notify when the job asks and the run has a comparison; the problems, if any."""
    if config is None or diff is None:
        return []
    report = out_dir / "report.html" if "html" in formats else None
    return notify_changes(config, job_name, diff, report, allow_private=allow_private)
