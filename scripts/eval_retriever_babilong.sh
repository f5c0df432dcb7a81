#!/usr/bin/env bash
# BabiLong context-length sweep of one trained run (DESIGN §7.12, §9.1):
#   scripts/eval_retriever_babilong.sh <run folder> <gpu> <seed> [extra eval_retriever.py overrides...]
# Evaluates N in $LENGTHS (default 50 160 1200 4600 40000 400000 sentences ≈ 1K..10M tokens) on the
# whole bAbI test file (NUM_SAMPLES=-1), writing <run>/eval_seed<seed>_ns<N>.jsonl + .summary.json.
# Env vars: NUM_SAMPLES (default -1 = all), LENGTHS (space-separated), PYTHON (default python).
# Interrupted? Run the same command again: each file resumes where it stopped.
# Same sweep as one Hydra multirun:
#   python eval_retriever.py -m pretrained_path=<run> seed=<seed> envs.num_sentences=50,160,1200,4600,40000,400000 num_samples=-1
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 <run folder> <gpu id> <seed> [key=value ...]" >&2
  exit 2
fi
RUN="$1"; GPU="$2"; SEED="$3"; shift 3
LENGTHS="${LENGTHS:-50 160 1200 4600 40000 400000}"
NUM_SAMPLES="${NUM_SAMPLES:--1}"
PYTHON="${PYTHON:-python}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ ! -f "$RUN/config.yaml" ]; then
  echo "error: $RUN is not a training run folder (no config.yaml)" >&2
  exit 2
fi
for N in $LENGTHS; do
  echo "=== $RUN: envs.num_sentences=$N seed=$SEED num_samples=$NUM_SAMPLES (GPU $GPU) ==="
  CUDA_VISIBLE_DEVICES="$GPU" "$PYTHON" "$HERE/eval_retriever.py" pretrained_path="$RUN" seed="$SEED" \
    envs.num_sentences="$N" num_samples="$NUM_SAMPLES" "$@"
done
