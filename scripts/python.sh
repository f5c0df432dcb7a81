# Sourced by the scripts: PYTHON, the interpreter they run. $PYTHON when set; else the repository's
# .venv (scripts/install.sh makes it), so that the scripts work without activating it; else
# `python` on PATH.
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$(dirname "${BASH_SOURCE[0]}")/../.venv/bin/python" ]; then
    PYTHON="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv/bin/python"
  else
    PYTHON=python
  fi
fi
