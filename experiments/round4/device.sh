#!/usr/bin/env bash
# Round 4 on a lent 2-GPU machine, in calls of at most 10 minutes (docs/RESULTS.md says how it ran):
#   bash experiments/round4/device.sh start <seconds>   # install wheels, launch plan_train.txt, watch
#   bash experiments/round4/device.sh watch <seconds>   # keep the machine: progress every 2 minutes
#   bash experiments/round4/device.sh eval <seconds>    # stop training, launch plan_eval.txt, watch
#   bash experiments/round4/device.sh pack              # run files (no checkpoints) -> $OUT/round4.tgz
# Wheels of the packages the machine lacks travel in .device/whl, the MiniLM weights (fp16) in
# .device/minilm (scripts/... GPU_ROUNDS notes); runs live in runs/round4 on the machine.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROUND=experiments/round4
RUNS=runs/round4
export GPUS="0 1" THREADS=2 PYTHONUNBUFFERED=1 TIME_LIMIT="${TIME_LIMIT:-1020}"
if [ ! -d /tmp/site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .device/whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site PYTHON=python3

alive() { [ -f "$RUNS/pids" ] && for p in $(cat "$RUNS/pids"); do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }

watch() {  # watch <seconds>: progress lines every 120 s until the time is up or nothing runs
  local end=$((SECONDS + $1))
  while [ $SECONDS -lt $end ] && alive; do
    sleep $(( end - SECONDS < 120 ? end - SECONDS : 120 ))
    echo "--- $(date +%T)"; bash scripts/plan_status.sh "$RUNS" 2>&1 | cut -c1-110
    nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader
  done
}

case "$1" in
  start)
    mkdir -p "$RUNS"
    bash scripts/launch_plan.sh "$ROUND/plan_train.txt" "$RUNS" \
      "algo.model.name=$PWD/.device/minilm" logger.progress_bar=false
    sleep 150; tail -n 3 "$RUNS"/logs/*.log | cut -c1-160
    watch $(($2 - 150)) ;;
  watch) watch "$2" ;;
  eval)  # training ends by TIME_LIMIT; runs still going when this starts are stopped (model_best.pt stays)
    end=$((SECONDS + $2))
    pkill -f train_q_rag.py; sleep 5; rm -f "$RUNS/pids"
    bash scripts/plan_status.sh "$RUNS" | cut -c1-110
    bash scripts/launch_evals.sh "$ROUND/plan_eval.txt" "$RUNS"
    while alive && [ $SECONDS -lt $end ]; do sleep 30; echo "$(date +%T) $(ls "$RUNS"/*/eval_*.summary.json 2>/dev/null | wc -l) eval files done"; done ;;
  pack)
    tar czf "$OUT/round4.tgz" --exclude='*.pt' --exclude='.eval_hydra' --exclude='tb' --exclude='*.lock' "$RUNS"
    ls -la "$OUT" ;;
esac
