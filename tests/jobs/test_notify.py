"""Notifications (jobs/notify.py) against a real receiver on loopback: the SSRF rule, bounded retries, the command."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest

from jobs.notify import NotifyError, post_webhook, run_command, webhook_target
from jobs.notify_config import NotifyConfig
from tests.support.fake_ollama import FakeOllama
from tests.support.receiver import Receiver
from tests.support.run import crawled, db, job_yaml, llm, run_job, write_job  # noqa: F401 - fixtures

BODY = {"job": "j", "changes": [{"question_id": "port", "before": {"value": 1}, "now": {"value": 2}}]}


def test_a_private_webhook_needs_the_crawls_opt_in() -> None:
    for url in ("http://127.0.0.1:9/hook", "http://10.1.2.3/hook", "http://[::1]:9/", "http://0177.0.0.1/"):
        with pytest.raises(NotifyError, match=r"SSRF guard.*allow_private_networks"):
            webhook_target(url, allow_private=False)
    target, host = webhook_target("http://127.0.0.1:9/hook?x=1", allow_private=True)
    assert (target, host) == ("http://127.0.0.1:9/hook?x=1", "127.0.0.1")


def test_the_post_goes_to_the_checked_address_with_its_host_name() -> None:
    with Receiver() as receiver:
        port = receiver.url.split(":")[2].split("/")[0]
        assert post_webhook(f"http://localhost:{port}/hook", BODY, timeout=5, attempts=1, allow_private=True) == 1
    assert receiver.posts == [BODY] and receiver.headers[0]["Host"] == f"localhost:{port}"


def test_a_busy_receiver_is_retried_a_bounded_number_of_times() -> None:
    with Receiver(statuses=[503]) as receiver:
        assert post_webhook(receiver.url, BODY, timeout=5, attempts=3, allow_private=True, backoff_s=0.01) == 2
    assert receiver.posts == [BODY, BODY]
    with Receiver(statuses=[503, 503, 503, 503]) as receiver:
        with pytest.raises(NotifyError, match=r"answered HTTP 503 \(3 POSTs\)"):
            post_webhook(receiver.url, BODY, timeout=5, attempts=3, allow_private=True, backoff_s=0.01)
    with Receiver(statuses=[404]) as receiver:  # a refusal is not retried
        with pytest.raises(NotifyError, match=r"answered HTTP 404 \(1 POST\)"):
            post_webhook(receiver.url, BODY, timeout=5, attempts=3, allow_private=True, backoff_s=0.01)


def test_a_receiver_that_is_down_is_a_notify_error() -> None:
    receiver = Receiver()
    url = receiver.url
    receiver.stop()  # bound, never served: the port refuses connections
    with pytest.raises(NotifyError, match=r"failed after 2 POSTs: ConnectError"):
        post_webhook(url, BODY, timeout=5, attempts=2, allow_private=True, backoff_s=0.01)


@pytest.mark.e2e
def test_the_command_gets_the_json_on_stdin_and_its_failure_is_named(tmp_path: Path) -> None:
    out = tmp_path / "got.json"
    run_command([sys.executable, "-c", f"import sys; open({str(out)!r}, 'w').write(sys.stdin.read())"], BODY,
                timeout=30)
    assert json.loads(out.read_text()) == BODY
    with pytest.raises(NotifyError, match=r"exited with 3: nope"):
        run_command([sys.executable, "-c", "import sys; sys.stderr.write('nope'); sys.exit(3)"], BODY, timeout=30)
    with pytest.raises(NotifyError, match="could not be started"):
        run_command([str(tmp_path / "missing")], BODY, timeout=30)


def test_the_config_wants_a_channel_and_an_http_url() -> None:
    assert NotifyConfig(command="notify-send 'webqa changed'").command == ["notify-send", "webqa changed"]
    for bad in ({}, {"webhook": "ftp://x/"}, {"command": []}, {"webhook": "https://x/", "attempts": 0},
                {"webhook": "https://x:99999/"}, {"webhook": "https://x:abc/"}):
        with pytest.raises(ValueError):
            NotifyConfig(**bad)


def test_a_receiver_that_trickles_its_answer_is_cut_off_by_the_attempts_bound() -> None:
    # Each read gets a byte within httpx's per-read timeout, so only a bound on the whole POST ends it.
    import socket
    import threading
    import time

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    stop = threading.Event()

    def trickle() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            for _ in range(150):  # 30 s at most, so that a regression fails rather than hangs
                if stop.wait(0.2):
                    return
                try:
                    conn.sendall(b"a")
                except OSError:
                    return

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    started = time.monotonic()
    try:
        with pytest.raises(NotifyError, match="no complete answer within 1 s"):
            post_webhook(f"http://127.0.0.1:{server.getsockname()[1]}/hook", BODY, timeout=1, attempts=1,
                         allow_private=True)
        assert time.monotonic() - started < 20
    finally:
        stop.set()
        server.close()


def test_a_webhook_secret_in_its_path_query_or_userinfo_reaches_no_message() -> None:
    # Slack-style webhooks carry their token in the path; others in ?token= or user:password@.
    receiver = Receiver(statuses=[500, 500])
    with receiver:
        address = receiver.url.split("//")[1].split("/")[0]
        url = f"http://hookuser:PASSWORD1@{address}/services/T0/B0/PATHTOKEN2?token=QUERYTOKEN3"
        with pytest.raises(NotifyError) as failed:
            post_webhook(url, BODY, timeout=5, attempts=2, allow_private=True, backoff_s=0.01)
    message = str(failed.value)
    assert message == f"webhook http://{address}/… answered HTTP 500 (2 POSTs)"
    with pytest.raises(NotifyError, match=r"SSRF guard") as blocked:
        webhook_target("http://u:PASSWORD1@10.1.2.3/hook/PATHTOKEN2", allow_private=False)
    with pytest.raises(ValueError) as bad_port:
        NotifyConfig(webhook="https://u:PASSWORD1@hooks.example.org:99999/services/PATHTOKEN2")
    # A password with an unencoded "#" or "/": the authority ends there, and the port is read from the password.
    unparsed = []
    for webhook in ("http://u:PASSWORD1#x@127.0.0.1:9/hook", "https://u:PASS/WORD1@hooks.example.org/x",
                    "https://hooks.example.org:99999/x?user=a@b&token=QUERYTOKEN3"):
        with pytest.raises(ValueError) as raised:
            NotifyConfig(webhook=webhook)
        unparsed.append(raised.value.errors()[0]["msg"])
        if "?" not in webhook:  # a login's fault; with an "@" in a bad port's query, all is hidden and only said
            assert "must be percent-encoded" in unparsed[-1], unparsed[-1]
    for text in (message, str(blocked.value), bad_port.value.errors()[0]["msg"], *unparsed):  # what the CLI says
        for secret in ("PASSWORD1", "PASS/", "PATHTOKEN2", "QUERYTOKEN3"):
            assert secret not in text, text


def test_a_webhook_with_user_and_password_posts_them_as_basic_auth() -> None:
    with Receiver() as receiver:
        url = receiver.url.replace("http://", "http://hook%40user:p%40s%3As@")
        assert post_webhook(url, BODY, timeout=5, attempts=1, allow_private=True) == 1
    assert receiver.headers[0]["Authorization"] == "Basic " + base64.b64encode(b"hook@user:p@s:s").decode()
    assert receiver.posts == [BODY]


@pytest.mark.e2e
def test_a_verbose_run_logs_no_webhook_token_nor_ollama_password(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    # httpx logs each request's URL at INFO, which -v and --log-file show: the webhook's tokens must not be in it.
    with Receiver() as receiver:
        address = receiver.url.split("//")[1].split("/")[0]
        hook = f"http://{address}/services/T0/B0/PATHTOKEN2?token=QUERYTOKEN3"
        extra = f"crawl:\n  allow_private_networks: true\nnotify:\n  webhook: {json.dumps(hook)}\n  attempts: 1\n"
        host = llm.url.replace("http://", "http://ollamauser:PASSWORD1@")
        first = run_job(tmp_path, write_job(tmp_path, job_yaml(["port"], extra=extra)), db, host=host)
        assert first.returncode == 0, first.stderr
        log = tmp_path / "run.log"
        second = run_job(tmp_path, write_job(tmp_path, job_yaml(["port", "tomatoes"], extra=extra)), db, "-v",
                         "--log-file", str(log), host=host)
        assert second.returncode == 0, second.stderr
    assert len(receiver.posts) == 1  # the new question was sent
    logged = log.read_text(encoding="utf-8")
    assert "exit 0" in logged  # the log file was written
    for text in (second.stderr, logged):
        for secret in ("PATHTOKEN2", "QUERYTOKEN3", "PASSWORD1"):
            assert secret not in text, text
