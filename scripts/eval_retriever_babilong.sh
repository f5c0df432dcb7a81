#!/usr/bin/env bash
# BabiLong context-length sweep of one trained run (DESIGN §7.12, §9.1):
#   scripts/eval_retriever_babilong.sh <run folder> <gpu> <seed> [extra eval_retriever.py overrides...]
# Evaluates N in $LENGTHS on the whole bAbI test file (NUM_SAMPLES=-1). Lengths follow the official
# BabiLong rule by default (LENGTH_UNIT=tokens: a GPT-2 token budget, 1000 = "1K" ... 10000000 = "10M";
# docs/DATA_BABILONG.md), writing <run>/eval_seed<seed>_nt<N>.jsonl + .summary.json; LENGTH_UNIT=sentences
# counts haystack sentences as the reference did (grid 50 160 1200 4600 40000 400000; files _ns<N>).
# Env vars: NUM_SAMPLES (default -1 = all), LENGTHS (space-separated), LENGTH_UNIT, PYTHON (default: .venv/bin/python if present, else python; scripts/python.sh).
# Interrupted? Run the same command again: each file resumes where it stopped.
# Same sweep as one Hydra multirun:
#   python eval_retriever.py -m pretrained_path=<run> seed=<seed> envs.length_unit=tokens \
#     envs.num_tokens=1000,4000,32000,128000,1000000,10000000 num_samples=-1
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 <run folder> <gpu id> <seed> [key=value ...]" >&2
  exit 2
fi
RUN="$1"; GPU="$2"; SEED="$3"; shift 3
LENGTH_UNIT="${LENGTH_UNIT:-tokens}"
case "$LENGTH_UNIT" in
  tokens) LENGTHS="${LENGTHS:-1000 4000 32000 128000 1000000 10000000}"; KEY="envs.length_unit=tokens envs.num_tokens" ;;
  sentences) LENGTHS="${LENGTHS:-50 160 1200 4600 40000 400000}"; KEY="envs.num_sentences" ;;
  *) echo "error: LENGTH_UNIT must be tokens or sentences, not $LENGTH_UNIT" >&2; exit 2 ;;
esac
NUM_SAMPLES="${NUM_SAMPLES:--1}"
. "$(dirname "${BASH_SOURCE[0]}")/python.sh"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
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
