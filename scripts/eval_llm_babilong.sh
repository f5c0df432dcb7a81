#!/usr/bin/env bash
# Reader sweep over BabiLong context lengths (DESIGN §9.1/§9.4):
#   scripts/eval_llm_babilong.sh <logdir> <llm> <task> <gpu>
# For every N in $LENGTHS whose retriever log <logdir>/eval_seed${SEED}_ns${N}.jsonl exists, runs
# eval_llm_synthetics.py once per chunk filter in $FILTERS on GPU <gpu> (CUDA_VISIBLE_DEVICES; use
# "cpu" for none). All results accumulate in <logdir>/results_<basename(llm)>.json.
# Environment knobs: SEED (0), LENGTHS ("50 160 1200 4600 40000 400000"), FILTERS ("none gt"),
# PYTHON (default: .venv/bin/python if present, else python; scripts/python.sh), EXTRA_ARGS (passed through, e.g. "--max_tokens 32 --backend transformers").
set -euo pipefail
if [ $# -ne 4 ]; then
  echo "usage: $0 <logdir> <llm> <task> <gpu>" >&2
  exit 2
fi
LOGDIR="$1"; LLM="$2"; TASK="$3"; GPU="$4"
SEED="${SEED:-0}"
LENGTHS="${LENGTHS:-50 160 1200 4600 40000 400000}"
FILTERS="${FILTERS:-none gt}"
. "$(dirname "${BASH_SOURCE[0]}")/python.sh"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "$GPU" = "cpu" ]; then export CUDA_VISIBLE_DEVICES=""; else export CUDA_VISIBLE_DEVICES="$GPU"; fi

found=0
for N in $LENGTHS; do
  LOG="$LOGDIR/eval_seed${SEED}_ns${N}.jsonl"
  if [ ! -f "$LOG" ]; then
    echo "skip N=$N: $LOG not found (run eval_retriever.py with envs.num_sentences=$N)" >&2
    continue
  fi
  found=1
  for F in $FILTERS; do
    # shellcheck disable=SC2086
    "$PYTHON" "$ROOT/eval_llm_synthetics.py" "$LOG" --llm_name "$LLM" --babi_task "$TASK" \
      --chunk_filter "$F" ${EXTRA_ARGS:-}
  done
done
if [ "$found" = 0 ]; then
  echo "error: no retriever logs eval_seed${SEED}_ns<N>.jsonl in $LOGDIR for N in: $LENGTHS" >&2
  exit 1
fi
echo "results: $LOGDIR/results_$(basename "$LLM").json"
