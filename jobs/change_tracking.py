"""Each final answer's evidence, stored with its change since the job's previous successful run."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from jobs.answer import QuestionSpec
from jobs.changes import Evidence, classify
from jobs.history import evidence_from_row
from jobs.question_pairs import pair_previous
from jobs.runstore import RunStore


class ChangeTracker:
    """Stores each final answer's evidence and its change since the job's previous successful run."""

    def __init__(self, store: RunStore, lock: threading.Lock, run_id: int, previous_run_id: int | None,
                 questions: Sequence[tuple[str, str, str]]) -> None:
        """``questions``: the run's (id, question, scope key), each compared with the same question of the previous
        run; the scope is stored with its answer for the next run's comparison."""
        self.store = store
        self.scopes = {qid: scope for qid, _text, scope in questions}
        self.lock = lock
        self.run_id = run_id
        self.previous: dict[str, Evidence] = {}
        if previous_run_id is not None:
            rows = {r["question_id"]: r for r in store.final_answers(previous_run_id)}
            self.previous = {qid: evidence_from_row(rows[p]) for qid, p in pair_previous(rows, questions).items()
                             if p is not None}

    def record(self, spec: QuestionSpec, error: str | None) -> str:
        with self.lock:
            row = self.store.final_answer(self.run_id, spec.id)
            if row is None:
                # Failed before any attempt was stored (e.g. its URLs were never crawled).
                self.store.save_failure(self.run_id, spec.id, spec.question, error or "no answer")
                row = self.store.final_answer(self.run_id, spec.id)
                assert row is not None
            return self.fill(row)

    def fill(self, row: dict[str, Any]) -> str:
        evidence = evidence_from_row(row, stored=False)
        change = classify(self.previous.get(row["question_id"]), evidence)
        self.store.set_change(row["answer_id"], evidence.to_json(), change, self.scopes.get(row["question_id"]))
        return change
