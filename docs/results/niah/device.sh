#!/usr/bin/env bash
# Table 1 (RULER NIAH, docs/results/niah/README.md) on a lent 4-GPU machine, in calls of at most 10 minutes:
#   bash docs/results/niah/device.sh start <seconds>   # wheels; test sets on the CPUs (background); training; watch
#   bash docs/results/niah/device.sh watch <seconds>   # progress every 2 minutes
#   bash docs/results/niah/device.sh eval <seconds>    # stop training (model_best.pt stays), the eval grid on 4 GPUs
#   bash docs/results/niah/device.sh pack              # run files (no checkpoints) + MANIFEST.json -> $OUT/niah.tgz
# As round 4 (docs/results/round4/device.sh): wheels in .device/whl, the MiniLM weights in .device/minilm.
# The plan's runs may share the cards with another plan's (launch both with scripts/launch_plan.sh).
set -uo pipefail
cd "$(dirname "$0")/../../.."
HERE=docs/results/niah
RUNS=runs/niah
export GPUS="0 1 2 3" THREADS=2 PYTHONUNBUFFERED=1 TIME_LIMIT="${TIME_LIMIT:-840}"
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
    tail -n 1 "$RUNS/logs/testsets.log" 2>/dev/null
    nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader
  done
}

case "$1" in
  start)
    mkdir -p "$RUNS/logs"
    # the 16K-1M test files on 40 of the 64 cores while the GPUs train (a few minutes; logs the check)
    setsid nohup python3 scripts/niah_testsets.py --jobs 40 > "$RUNS/logs/testsets.log" 2>&1 < /dev/null &
    bash scripts/launch_plan.sh "$HERE/plan_train.txt" "$RUNS" "algo.model.name=$PWD/.device/minilm" logger.progress_bar=false
    sleep 150; tail -n 3 "$RUNS"/logs/*.log | cut -c1-160
    watch $(($2 - 150)) ;;
  watch) watch "$2" ;;
  eval)  # training ends by TIME_LIMIT or here; model_best.pt of each run stays
    [ -f "$RUNS/pids" ] && kill $(cat "$RUNS/pids") 2>/dev/null; sleep 5; rm -f "$RUNS/pids"
    bash scripts/plan_status.sh "$RUNS" | cut -c1-110
    python3 scripts/niah_testsets.py --write-manifest  # records the 128K / 1M files' sha256 (refuses a changed one)
    timeout $(($2 - 30)) python3 scripts/niah_eval_grid.py "$RUNS" n_s1 n_s2 n_s3 n_noft --gpus 0,1,2,3 --per-gpu 4
    echo "eval grid exit $?" ;;
  pack)
    cp data/niah/ruler_gpt2/MANIFEST.json "$RUNS/"
    tar czf "$OUT/niah.tgz" --exclude='*.pt' --exclude='.eval_hydra' --exclude='tb_logs' --exclude='*.lock' "$RUNS"
    ls -la "$OUT" ;;
esac
