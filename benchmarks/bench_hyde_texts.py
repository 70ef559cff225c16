"""Benchmark helper: the hypothetical answer passages of HyDE (issue 23), written once per dev-set question.

A HyDE passage depends on the question and the chat model only, not on the crawled database, so it is written
here ahead of time (while a database is still being embedded) and read back by ``bench_stage.py --variants hyde
--hyde-texts FILE``. Each question is asked once through the product's client (``OllamaClient.chat_json``, the
prompt and schema of ``bench_stage.HYDE_PROMPT``) against the chat stand-in (benchmarks/chat_server.py), with
the reply capped at ``--num-predict`` tokens; the seconds per question are recorded beside each passage.

    build/llm-venv/bin/python benchmarks/chat_server.py --model gemma3 --port 0     # prints its URL
    .venv/bin/python benchmarks/bench_hyde_texts.py --devset git --chat URL --chat-model gemma3:270m
    # → benchmarks/results/hyde-git-gemma3-270m.json

An existing file is resumed (questions already written are not asked again).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import bench_recall as br
import common
from bench_stage import HYDE_PROMPT, HYDE_SCHEMA


def texts_path(devset: str, model: str) -> Path:
    return common.RESULTS / f"hyde-{devset}-{model.replace(':', '-')}.json"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--devset", choices=sorted(br.DEVSETS), default="python")
    parser.add_argument("--chat", required=True, metavar="URL", help="the chat stand-in's URL")
    parser.add_argument("--chat-model", default="gemma3:270m")
    parser.add_argument("--num-predict", type=int, default=120, help="reply cap in tokens (two sentences fit)")
    parser.add_argument("--ids", default="", help="only these question ids (comma-separated)")
    args = parser.parse_args(argv)
    from jobs.errors import LLMError
    from jobs.llm import OllamaClient, OllamaSettings

    br.use_devset(args.devset)
    questions = br.load_devset("127.0.0.1:1").questions
    if args.ids:
        wanted = set(args.ids.split(","))
        questions = [q for q in questions if q.id in wanted]
    path = texts_path(args.devset, args.chat_model)
    done: dict[str, dict] = json.loads(path.read_text())["texts"] if path.exists() else {}
    settings = OllamaSettings(host=args.chat, model=args.chat_model, timeout_s=300, reply_timeout_s=300,
                              max_attempts=1, options={"temperature": 0.0, "seed": 15, "num_predict": args.num_predict})
    with OllamaClient(settings) as chat:
        for q in questions:
            if q.question in done:
                continue
            started = time.perf_counter()
            try:
                reply = chat.chat_json(HYDE_PROMPT % q.question, HYDE_SCHEMA)
                passage, valid = str((reply.data or {}).get("passage") or ""), reply.valid_json
            except LLMError as exc:
                passage, valid = "", False
                print(f"  {q.id}: {exc}", file=sys.stderr)
            done[q.question] = {"id": q.id, "passage": passage, "valid_json": valid,
                                "seconds": round(time.perf_counter() - started, 2)}
            print(f"{q.id:<32} {done[q.question]['seconds']:>6.1f}s  {passage[:110]!r}", flush=True)
            # One plain file rewritten after each question (not save_result's history): a stopped run resumes.
            path.write_text(json.dumps({"command": common.command_line(), "model": args.chat_model,
                                        "num_predict": args.num_predict, "texts": done}, indent=1, ensure_ascii=False))
    seconds = [t["seconds"] for t in done.values()]
    print(f"{len(done)} passages; seconds median {statistics.median(seconds):.1f}, max {max(seconds):.1f}; "
          f"empty {sum(not t['passage'] for t in done.values())}; wrote {path.relative_to(common.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
