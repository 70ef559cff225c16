"""The runs and answers of webqa: ``runs``, ``run_pages``, ``answers``, ``selections`` and ``prompts``.

``RunStore`` is the only code that writes SQL on those tables (their DDL and migrations are in
pipelines/schema.py, see docs/architecture.md). It reads the crawl tables only to snapshot a run's pages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipelines.errors import StoreError
from pipelines.redact import redact_text
from pipelines.sql import insert_rows
from pipelines.store import Store, utcnow

# A run in one of these states is in progress, or was killed in it ('running': files of webqa < 0.2).
IN_PROGRESS = ("crawling", "answering", "running")


class RunStore(Store):
    """The answering side: runs, answers, selections and prompts, each answer committed when made."""

    def begin_run(self, job_name: str, job_file: str | None, job_hash: str | None, *, questions: int, answerer: str,
                  model: str | None, method: str, dry_run: bool, pid: int, crawling: bool) -> int:
        """Insert the run row the moment a run starts, before its crawl: a killed crawl leaves a run to resume.

        ``previous_run_id`` is the job's last done/partial run that was not a dry run: the run this
        one's answers and pages are compared with.
        """
        previous = self.previous_successful_run(job_name)
        row = self.conn.execute(
            "INSERT INTO runs (job_name, job_file, job_hash, started_at, status, phase, questions, answerer, model, "
            "method, dry_run, pid, previous_run_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING run_id",
            [job_name, job_file, job_hash, utcnow(), "crawling" if crawling else "answering",
             "crawl" if crawling else "answer", questions, answerer, model, method, dry_run, pid, previous],
        ).fetchone()
        assert row is not None
        return int(row[0])

    def start_answering(self, run_id: int, job_name: str, crawl_run_id: int | None,
                        page_urls: Sequence[str] | None, *, answerer: str, model: str | None) -> None:
        """The crawl is over: record the job's pages as they stand now (``snapshot_pages``) and move on.

        ``page_urls`` lists the job's pages (normalised); None means every stored page is the job's.
        """
        with self.transaction():
            self.conn.execute("UPDATE runs SET status = 'answering', phase = 'answer', answerer = ?, model = ?, "
                              "crawl_run_id = coalesce(?, crawl_run_id) "
                              "WHERE run_id = ?", [answerer, model, crawl_run_id, run_id])
            self.conn.execute("DELETE FROM run_pages WHERE run_id = ?", [run_id])
            self.snapshot_pages(run_id, job_name, page_urls)

    def previous_successful_run(self, job_name: str, before: int | None = None) -> int | None:
        """The job's last run that finished its questions (done or partial), dry runs left out."""
        row = self.conn.execute(
            "SELECT max(run_id) FROM runs WHERE job_name = ? AND status IN ('done', 'partial') AND NOT dry_run "
            "AND (? IS NULL OR run_id < ?)",
            [job_name, before, before],
        ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def snapshot_pages(self, run_id: int, job_name: str, page_urls: Sequence[str] | None) -> None:
        """Record (url, content hash, fetch time) of the job's pages as they stand now: the pages the run
        answers from (``page_urls``, the job's scope), or every stored page (None) for a job that lists no
        URL or searches the whole database.

        A page dropped since its stored copy was fetched or confirmed (its server answered 404 or 410, or
        robots.txt now disallows it: ``Store.dropped_pages``) is left out: it is gone, even though its
        last content is still stored. That holds when a later crawl skipped it as fresh, too.
        """
        dropped = list(self.dropped_pages())
        where, params = ("true", []) if page_urls is None else ("list_contains(?, p.url)", [list(page_urls)])
        self.conn.execute(
            "INSERT INTO run_pages (run_id, url, content_hash, fetched_at) "
            f"SELECT ?, p.url, p.content_hash, p.fetched_at FROM pages p WHERE p.content_hash IS NOT NULL AND {where} "
            "AND NOT list_contains(?, p.url)",
            [run_id, *params, dropped],
        )

    def run_row(self, run_id: int) -> dict[str, Any] | None:
        rows = self.query_dicts("SELECT * FROM runs WHERE run_id = ?", [run_id])
        return rows[0] if rows else None

    def last_run(self, job_name: str) -> dict[str, Any] | None:
        """The job's most recent run that was not a dry run (any status)."""
        rows = self.query_dicts(
            "SELECT * FROM runs WHERE job_name = ? AND NOT dry_run ORDER BY run_id DESC LIMIT 1", [job_name]
        )
        return rows[0] if rows else None

    def resume_run(self, run_id: int, pid: int, questions: int) -> None:
        """Mark a killed or interrupted run as in progress again, in this process, in the phase it stopped in."""
        self.conn.execute(
            "UPDATE runs SET status = CASE WHEN phase = 'crawl' THEN 'crawling' ELSE 'answering' END, "
            "finished_at = NULL, pid = ?, questions = ?, exit_code = NULL, reason = NULL, resumable = false, "
            "resumed = coalesce(resumed, 0) + 1 WHERE run_id = ?",
            [pid, questions, run_id],
        )

    def final_answers(self, run_id: int) -> list[dict[str, Any]]:
        """The final answer of every question of a run that has one (one row per question id)."""
        return self.query_dicts(
            "SELECT * FROM answers WHERE run_id = ? AND final ORDER BY answer_id", [run_id]
        )

    def final_answer(self, run_id: int, question_id: str) -> dict[str, Any] | None:
        rows = self.query_dicts(
            "SELECT * FROM answers WHERE run_id = ? AND question_id = ? AND final ORDER BY answer_id DESC LIMIT 1",
            [run_id, question_id],
        )
        return rows[0] if rows else None

    def save_failure(self, run_id: int, question_id: str, question: str, error: str) -> int:
        """A question that failed before any attempt could be stored (e.g. its URLs were never crawled).

        Stored as its final answer, so that every question a run went through has exactly one.
        """
        return self.save_attempt(
            {"run_id": run_id, "question_id": question_id, "question": question, "attempt": 1, "final": True,
             "citations": "[]", "grounded": False, "answerer": "none", "error": error},
            [], None, None, None,
        )

    def set_change(self, answer_id: int, evidence: str, change: str | None, scope: str | None = None) -> None:
        self.conn.execute("UPDATE answers SET evidence = ?, change = ?, scope = ? WHERE answer_id = ?",
                          [evidence, change, scope, answer_id])

    def run_pages(self, run_id: int) -> dict[str, dict[str, Any]]:
        if not self.has_table("run_pages"):
            return {}
        return {r["url"]: r for r in self.query_dicts(
            "SELECT url, content_hash, fetched_at FROM run_pages WHERE run_id = ? ORDER BY url", [run_id])}

    def has_table(self, table: str) -> bool:
        row = self.conn.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND database_name = current_database()",
            [table],
        ).fetchone()
        return bool(row and row[0])

    def require_runs(self) -> None:
        """For the commands that read runs: one line, not a traceback, for a file no run ever wrote to."""
        if not self.has_table("runs"):
            raise StoreError(f"{self.path}: no runs are recorded in this database (no `runs` table: not a webqa "
                             "database, or its first command was stopped while creating it); run `webqa run` first")

    def has_column(self, table: str, column: str) -> bool:
        """For read-only commands on a database written by an older webqa (not migrated yet)."""
        row = self.conn.execute(
            "SELECT count(*) FROM duckdb_columns() WHERE table_name = ? AND column_name = ? "
            "AND database_name = current_database()",
            [table, column],
        ).fetchone()
        return bool(row and row[0])

    def finish_run(self, run_id: int, status: str, counts: dict[str, int], notes: str | None = None, *,
                   exit_code: int | None = None, reason: str | None = None, resumable: bool = False) -> None:
        # `webqa runs` prints these as stored: a URL's user:password@ in an error is left out here, once.
        notes, reason = (redact_text(t) if t is not None else None for t in (notes, reason))
        self.conn.execute(
            "UPDATE runs SET finished_at = ?, status = ?, answered = ?, grounded = ?, not_enough_info = ?, "
            "failed = ?, notes = ?, exit_code = ?, reason = ?, resumable = ? WHERE run_id = ?",
            [utcnow(), status, counts.get("answered", 0), counts.get("grounded", 0),
             counts.get("not_enough_info", 0), counts.get("failed", 0), notes, exit_code, reason, resumable, run_id],
        )

    def save_attempt(self, answer: dict[str, Any], selections: Sequence[dict[str, Any]], prompt: str | None,
                     prompt_version: str | None, raw_reply: str | None, rerank: dict[str, Any] | None = None) -> int:
        """Insert one attempt with its selection trail and prompt in one transaction; returns its id.

        A final attempt demotes earlier final attempts of the same question in the same run, so the
        report always has exactly one answer per question.
        """
        columns = list(ANSWER_COLUMNS)
        values = [answer.get(c) for c in columns]
        with self.transaction():
            if answer.get("final") and answer.get("run_id") is not None:
                self.conn.execute(
                    "UPDATE answers SET final = false WHERE run_id = ? AND question_id = ? AND final",
                    [answer["run_id"], answer["question_id"]],
                )
            row = self.conn.execute(
                f"INSERT INTO answers ({', '.join(columns)}, created_at) VALUES ({', '.join('?' for _ in columns)}, ?) "
                "RETURNING answer_id",
                [*values, utcnow()],
            ).fetchone()
            assert row is not None
            answer_id = int(row[0])
            if selections:
                insert_rows(
                    self.conn, f"INSERT INTO selections (answer_id, {', '.join(SELECTION_COLUMNS)}) VALUES",
                    [[answer_id, *[s.get(c) for c in SELECTION_COLUMNS]] for s in selections],
                )
            if prompt is not None:
                self.conn.execute(
                    "INSERT INTO prompts VALUES (?, ?, ?, ?)", [answer_id, prompt_version, prompt, raw_reply]
                )
            if rerank is not None:
                self.conn.execute(
                    f"INSERT INTO reranks (answer_id, {', '.join(RERANK_COLUMNS)}) "
                    f"VALUES (?, {', '.join('?' for _ in RERANK_COLUMNS)})",
                    [answer_id, *[rerank.get(c) for c in RERANK_COLUMNS]],
                )
        return answer_id

    def rerank_of(self, answer_id: int) -> dict[str, Any] | None:
        """The stored rerank of an attempt, or None (no rerank, or a file from before reranks, opened read-only)."""
        if not self.has_table("reranks"):
            return None
        rows = self.query_dicts("SELECT * FROM reranks WHERE answer_id = ?", [answer_id])
        return rows[0] if rows else None

    def set_final(self, answer_id: int, attempt_ids: Sequence[int] = ()) -> None:
        """Make ``answer_id`` the final attempt of its question.

        In a run, every other attempt of the question in that run is demoted. Answers of `webqa ask`
        have no run: only the given ``attempt_ids`` (the attempts of that one ask) are demoted, never
        the answers of earlier asks.
        """
        with self.transaction():
            row = self.conn.execute("SELECT run_id, question_id FROM answers WHERE answer_id = ?", [answer_id]).fetchone()
            if row is None:
                raise StoreError(f"no answer {answer_id}")
            if row[0] is not None:
                self.conn.execute(
                    "UPDATE answers SET final = (answer_id = ?) WHERE run_id = ? AND question_id = ?",
                    [answer_id, row[0], row[1]],
                )
            else:
                ids = sorted({answer_id, *attempt_ids})
                self.conn.execute(
                    "UPDATE answers SET final = (answer_id = ?) WHERE run_id IS NULL AND list_contains(?, answer_id)",
                    [answer_id, ids],
                )

    # -- reads for runner, history, explain ------------------------------------------------------

    def attempt_counts(self, run_id: int) -> dict[str, int]:
        """question id → how many attempts the run stored for it."""
        return dict(self.conn.execute(
            "SELECT question_id, count(*) FROM answers WHERE run_id = ? GROUP BY ALL", [run_id]).fetchall())

    def last_successful_runs(self, job_name: str, count: int) -> list[int]:
        """The job's last ``count`` done/partial runs that were not dry runs, newest first."""
        return [int(r[0]) for r in self.conn.execute(
            "SELECT run_id FROM runs WHERE job_name = ? AND status IN ('done', 'partial') AND NOT dry_run "
            "ORDER BY run_id DESC LIMIT ?", [job_name, count]).fetchall()]

    def job_names(self) -> list[str]:
        """The jobs that have runs, by name."""
        return [str(r[0]) for r in self.conn.execute("SELECT DISTINCT job_name FROM runs ORDER BY 1").fetchall()]

    def runs(self, job: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Runs (of ``job``, or all), newest first, at most ``limit``."""
        sql = "SELECT * FROM runs" + (" WHERE job_name = ?" if job else "") + " ORDER BY run_id DESC"
        params: list[Any] = [job] if job else []
        if limit:
            sql += " LIMIT ?"
            params.append(limit)
        return self.query_dicts(sql, params)

    def change_counts(self, run_ids: Sequence[int]) -> dict[int, dict[str, int]]:
        """run id → {answer change kind → number of final answers} for the runs ``run_ids``."""
        changes: dict[int, dict[str, int]] = {}
        for run_id, kind, n in self.conn.execute(
                "SELECT run_id, change, count(*) FROM answers WHERE final AND change IS NOT NULL "
                "AND list_contains(?, run_id) GROUP BY ALL", [list(run_ids)]).fetchall():
            changes.setdefault(int(run_id), {})[str(kind)] = int(n)
        return changes

    def job_questions(self, job_name: str) -> list[dict[str, Any]]:
        """(run_id, question_id, question, scope, answer_id) of each final answer of every done/partial run of the job
        (dry runs left out), oldest run first: enough to follow one question from run to run."""
        # A database of schema 11 opened read-only (webqa history) is not upgraded: its answers have no scope, which
        # pairing reads as "any scope", as for rows written before the column.
        scope = "a.scope" if self.has_column("answers", "scope") else "NULL AS scope"
        return self.query_dicts(
            f"SELECT a.run_id, a.question_id, a.question, {scope}, a.answer_id FROM answers a JOIN runs r USING (run_id) "
            "WHERE r.job_name = ? AND a.final AND r.status IN ('done', 'partial') AND NOT r.dry_run "
            "ORDER BY a.run_id, a.answer_id", [job_name])

    def answers_with_start(self, answer_ids: Sequence[int]) -> list[dict[str, Any]]:
        """The answers of these ids with their run's start time, in run order."""
        if not answer_ids:
            return []
        return self.query_dicts(
            "SELECT a.*, r.started_at FROM answers a JOIN runs r USING (run_id) WHERE list_contains(?, a.answer_id) "
            "ORDER BY a.run_id", [list(answer_ids)])

    def answer(self, answer_id: int) -> dict[str, Any] | None:
        rows = self.query_dicts("SELECT * FROM answers WHERE answer_id = ?", [answer_id])
        return rows[0] if rows else None

    def run_attempts(self, run_id: int, question_id: str) -> list[dict[str, Any]]:
        """(answer_id, attempt, final) of every attempt of a question of a run, in order."""
        return self.query_dicts(
            "SELECT answer_id, attempt, final FROM answers WHERE run_id = ? AND question_id = ? "
            "ORDER BY attempt, answer_id",
            [run_id, question_id],
        )

    def ask_attempts(self, question_id: str, question: str, first: int, last: int) -> list[dict[str, Any]]:
        """(answer_id, attempt, final) of the `webqa ask` answers to ``question`` with ids first..last."""
        return self.query_dicts(
            "SELECT answer_id, attempt, final FROM answers WHERE run_id IS NULL AND question_id = ? AND question = ? "
            "AND answer_id BETWEEN ? AND ? ORDER BY answer_id",
            [question_id, question, first, last],
        )

    def selections_of(self, answer_id: int) -> list[dict[str, Any]]:
        return self.query_dicts("SELECT * FROM selections WHERE answer_id = ? ORDER BY rank", [answer_id])

    def prompt_of(self, answer_id: int) -> dict[str, Any] | None:
        rows = self.query_dicts("SELECT * FROM prompts WHERE answer_id = ?", [answer_id])
        return rows[0] if rows else None

    def query_dicts(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        cursor = self.conn.execute(sql, params)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]


ANSWER_COLUMNS = (
    "run_id", "question_id", "question", "attempt", "final", "answer", "confidence", "citations", "grounded",
    "not_enough_info", "failed_citations", "valid_json", "answerer", "model", "method", "latency_s",
    "prompt_tokens", "eval_tokens", "error", "retry_reason", "host", "answered", "value", "value_type", "value_problem",
)
RERANK_COLUMNS = (
    "status", "error", "model", "candidates", "before", "after", "dropped", "appended", "prompt_tokens",
    "eval_tokens", "seconds", "prompt", "raw_reply",
)
SELECTION_COLUMNS = (
    "chunk_id", "url", "heading_path", "rank", "score", "keyword_score", "bm25_score", "embedding_score",
    "matched_terms", "tokens", "sent", "source_number", "reason",
)
