#!/usr/bin/env bash
# Round 5 on one lent 4-GPU machine, in calls of at most 10 minutes (docs/RESULTS.md says how it ran):
#   bash docs/results/round5/device.sh weights             # call 1: the MiniLM weights out of the tree
#   bash docs/results/round5/device.sh start <seconds>     # call 2: code + wheels out of the tree, NIAH test
#                                                          #   sets generated, every training plan launched
#   bash docs/results/round5/device.sh watch <seconds>     # keep the machine: progress every 2 minutes
#   bash docs/results/round5/device.sh eval <seconds>      # stop training, launch every evaluation plan
#   bash docs/results/round5/device.sh pack                # run files (no checkpoints) -> $OUT/round5.tgz
# Each call re-lays the working tree, so long-running processes read code, weights and data from a copy
# outside it ($CODE). Paths given to runs are relative to $CODE: no machine path is
# recorded in a run folder. The MiniLM weights (fp16, .device/minilm) and the wheels of the packages the
# machine lacks (.device/whl) travel in separate calls (together they exceed one call's 64 MiB).
set -uo pipefail
SRC="$(cd "$(dirname "$0")/../../.." && pwd)"
CODE=/tmp/qrag
ROUND=docs/results/round5
RUNS=runs/round5
export GPUS="0 1 2 3" THREADS=2 PYTHONUNBUFFERED=1 PYTHON=python3 PYTHONPATH=/tmp/site
export TIME_LIMIT="${TIME_LIMIT:-1080}"

alive() { [ -f "$CODE/$RUNS/pids" ] && for p in $(cat "$CODE/$RUNS/pids"); do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }

status() {
  echo "--- $(date +%T)"; (cd "$CODE" && bash scripts/plan_status.sh "$RUNS" 2>&1 | cut -c1-120)
  nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used --format=csv,noheader
}

watch() {  # watch <seconds>: progress every 120 s until the time is up or nothing runs
  local end=$((SECONDS + $1))
  while [ $SECONDS -lt $end ] && alive; do
    sleep $(( end - SECONDS < 120 ? end - SECONDS : 120 )); status
  done
}

case "$1" in
  weights)
    mkdir -p "$CODE/.device" && cp -r "$SRC/.device/minilm" "$CODE/.device/" && du -sh "$CODE/.device/minilm"
    nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader; nproc ;;
  start)
    mkdir -p "$CODE"
    (cd "$SRC" && tar cf - --exclude=./.device --exclude=./runs --exclude=./.git .) | (cd "$CODE" && tar xf -)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$SRC"/.device/whl/*.whl || exit 1
    cd "$CODE" && mkdir -p "$RUNS/logs"
    bash "$ROUND/start_hook.sh" || exit 1          # test sets generated on the CPUs, in the background
    for plan in "$ROUND"/plan_train_*.txt; do
      bash scripts/launch_plan.sh "$plan" "$RUNS" algo.model.name=.device/minilm logger.progress_bar=false
    done
    sleep 150; tail -n 2 "$RUNS"/logs/*.log | cut -c1-160
    watch $(($2 - 150)) ;;
  watch) watch "$2" ;;
  eval)  # training ends by TIME_LIMIT; runs still going are stopped here (model_best.pt stays)
    end=$((SECONDS + $2))
    cd "$CODE"; pkill -f train_q_rag.py; sleep 5; rm -f "$RUNS/pids"; status
    for plan in "$ROUND"/plan_eval_*.txt; do bash scripts/launch_evals.sh "$plan" "$RUNS"; done
    [ -f "$ROUND/eval_hook.sh" ] && bash "$ROUND/eval_hook.sh"
    while alive && [ $SECONDS -lt $end ]; do
      sleep 30; echo "$(date +%T) $(ls "$RUNS"/*/eval_*.summary.json 2>/dev/null | wc -l) eval files done"
    done ;;
  pack)
    cd "$CODE"; status
    tar czf "$OUT/round5.tgz" --exclude='*.pt' --exclude='.eval_hydra' --exclude='tb*' --exclude='*.lock' "$RUNS"
    ls -la "$OUT" ;;
esac
