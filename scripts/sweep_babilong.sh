#!/usr/bin/env bash
# BabiLong context-length sweeps, of a trained retriever or of a reader over its logs:
#   scripts/sweep_babilong.sh retriever <run folder> <gpu> <seed> [extra eval_retriever.py overrides...]
#   scripts/sweep_babilong.sh llm <logdir> <llm> <task> <gpu>
# The interpreter: PYTHON (default: .venv/bin/python if present, else python; scripts/python.sh).
#
# retriever (DESIGN §7.12, §9.1): evaluates N in $LENGTHS on the whole bAbI test file
# (NUM_SAMPLES=-1). Lengths follow the official BabiLong rule by default (LENGTH_UNIT=tokens: a GPT-2
# token budget, 1000 = "1K" ... 10000000 = "10M"; docs/DATA_BABILONG.md), writing
# <run>/eval_seed<seed>_nt<N>.jsonl + .summary.json; LENGTH_UNIT=sentences counts haystack sentences
# as the reference did (grid 50 160 1200 4600 40000 400000; files _ns<N>).
# Env vars: NUM_SAMPLES (default -1 = all), LENGTHS (space-separated), LENGTH_UNIT.
# Interrupted? Run the same command again: each file resumes where it stopped.
# Same sweep as one Hydra multirun:
#   python eval_retriever.py -m pretrained_path=<run> seed=<seed> envs.length_unit=tokens \
#     envs.num_tokens=1000,4000,32000,128000,1000000,10000000 num_samples=-1
#
# llm (DESIGN §9.1/§9.4): for every N in $LENGTHS whose retriever log
# <logdir>/eval_seed${SEED}_ns${N}.jsonl exists, runs eval_llm_synthetics.py once per chunk filter in
# $FILTERS on GPU <gpu> (CUDA_VISIBLE_DEVICES; use "cpu" for none). All results accumulate in
# <logdir>/results_<basename(llm)>.json.
# Env vars: SEED (0), LENGTHS ("50 160 1200 4600 40000 400000"), FILTERS ("none gt"), EXTRA_ARGS
# (passed through, e.g. "--max_tokens 32 --backend transformers").
set -euo pipefail
usage() {
  echo "usage: $0 retriever <run folder> <gpu id> <seed> [key=value ...]" >&2
  echo "       $0 llm <logdir> <llm> <task> <gpu>" >&2
  exit 2
}
[ $# -ge 1 ] || usage
MODE="$1"; shift
. "$(dirname "${BASH_SOURCE[0]}")/python.sh"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

sweep_retriever() {
  [ $# -ge 3 ] || usage
  local RUN="$1" GPU="$2" SEED="$3"; shift 3
  local LENGTH_UNIT="${LENGTH_UNIT:-tokens}" KEY
  case "$LENGTH_UNIT" in
    tokens) LENGTHS="${LENGTHS:-1000 4000 32000 128000 1000000 10000000}"; KEY="envs.length_unit=tokens envs.num_tokens" ;;
    sentences) LENGTHS="${LENGTHS:-50 160 1200 4600 40000 400000}"; KEY="envs.num_sentences" ;;
    *) echo "error: LENGTH_UNIT must be tokens or sentences, not $LENGTH_UNIT" >&2; exit 2 ;;
  esac
  local NUM_SAMPLES="${NUM_SAMPLES:--1}"
  if [ ! -f "$RUN/config.yaml" ]; then
    echo "error: $RUN is not a training run folder (no config.yaml)" >&2
    exit 2
  fi
  for N in $LENGTHS; do
    echo "=== $RUN: $KEY=$N seed=$SEED num_samples=$NUM_SAMPLES (GPU $GPU) ==="
    # shellcheck disable=SC2086  # KEY holds one or two overrides
    CUDA_VISIBLE_DEVICES="$GPU" "$PYTHON" "$HERE/eval_retriever.py" pretrained_path="$RUN" seed="$SEED" \
      $KEY="$N" num_samples="$NUM_SAMPLES" "$@"
  done
}

sweep_llm() {
  [ $# -eq 4 ] || usage
  local LOGDIR="$1" LLM="$2" TASK="$3" GPU="$4"
  local SEED="${SEED:-0}" LENGTHS="${LENGTHS:-50 160 1200 4600 40000 400000}" FILTERS="${FILTERS:-none gt}"
  if [ "$GPU" = "cpu" ]; then export CUDA_VISIBLE_DEVICES=""; else export CUDA_VISIBLE_DEVICES="$GPU"; fi
  local found=0
  for N in $LENGTHS; do
    LOG="$LOGDIR/eval_seed${SEED}_ns${N}.jsonl"
    if [ ! -f "$LOG" ]; then
      echo "skip N=$N: $LOG not found (run eval_retriever.py with envs.num_sentences=$N)" >&2
      continue
    fi
    found=1
    for F in $FILTERS; do
      # shellcheck disable=SC2086
      "$PYTHON" "$HERE/eval_llm_synthetics.py" "$LOG" --llm_name "$LLM" --babi_task "$TASK" \
        --chunk_filter "$F" ${EXTRA_ARGS:-}
    done
  done
  if [ "$found" = 0 ]; then
    echo "error: no retriever logs eval_seed${SEED}_ns<N>.jsonl in $LOGDIR for N in: $LENGTHS" >&2
    exit 1
  fi
  echo "results: $LOGDIR/results_$(basename "$LLM").json"
}

case "$MODE" in
  retriever) sweep_retriever "$@" ;;
  llm) sweep_llm "$@" ;;
  *) echo "error: the mode is retriever or llm, not $MODE" >&2; usage ;;
esac
