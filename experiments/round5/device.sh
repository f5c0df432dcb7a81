#!/usr/bin/env bash
# Round 5 on one lent 4-GPU machine: Table 1 (NIAH, experiments/niah/), Table 3 + the generator
# (experiments/round5/) and Table 2 (experiments/table2/) side by side, in calls of at most 10 minutes:
#   bash experiments/round5/device.sh setup              # call 1: code, wheels and MiniLM's first half out
#                                                         #   of the tree; NIAH test sets on the CPUs
#   bash experiments/round5/device.sh start <seconds>    # call 2: MiniLM's second half, every training
#                                                         #   plan, the untrained encoders' evaluations
#   bash experiments/round5/device.sh watch <seconds>    # keep the machine: progress every 2 minutes
#   bash experiments/round5/device.sh eval <seconds>     # stop training, every evaluation side by side
#   bash experiments/round5/device.sh pack               # run files (no checkpoints) -> $OUT/{a,b,c,d}.tgz
# Each call re-lays the working tree, so long-running processes read code, weights and data from a copy
# outside it ($CODE). Run folders are given paths relative to $CODE; the paths a run records anyway are
# rewritten when the round is packed into the repository. The MiniLM weights (fp16, 44 MiB) travel split
# in two calls (`split -b 22M model.safetensors`: .device/p1 with the config and tokenizer, beside the
# wheels of the packages the machine lacks, .device/whl; then .device/p2): the tree (22 MiB) and the whole
# folder exceed one call's 64 MiB. The code is copied once (setup), so later calls may re-lay the tree.
# Cards: one seed of every qa3 method and of NIAH on each of GPUs 0-2 (a TIME_LIMIT cut leaves the
# methods compared at comparable steps); GPU 3 holds the generated-data qa3 seeds, Table 2 and the
# untrained encoders (plan files' GPU column).
set -uo pipefail
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
CODE=/tmp/qrag
ROUND=experiments/round5
export GPUS="0 1 2 3" THREADS=2 PYTHONUNBUFFERED=1 PYTHON=python3 PYTHONPATH=/tmp/site
export TIME_LIMIT="${TIME_LIMIT:-900}"
DIRS="runs/round5 runs/niah runs/table2"

alive() { for d in $DIRS; do [ -f "$CODE/$d/pids" ] && for p in $(cat "$CODE/$d/pids"); do kill -0 "$p" 2>/dev/null && return 0; done; done; return 1; }

status() {
  echo "--- $(date +%T)"
  for d in $DIRS; do (cd "$CODE" && bash scripts/plan_status.sh "$d" 2>&1 | grep -v "^run " | cut -c1-100); done
  tail -n 1 "$CODE/runs/niah/logs/testsets.log" 2>/dev/null
  echo "evaluations done: $(cd "$CODE" && find runs -name '*.summary.json' -path '*eval*' | wc -l)"
  nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used --format=csv,noheader
}

watch() {  # watch <seconds>: progress every 120 s until the time is up or nothing runs
  local end=$((SECONDS + $1))
  while [ $SECONDS -lt $end ] && alive; do
    sleep $(( end - SECONDS < 120 ? end - SECONDS : 120 )); status
  done
}

t2eval() {  # t2eval <gpu> <runs...>: Table 2's evaluations of these runs, in the background
  local gpu="$1"; shift
  CUDA_VISIBLE_DEVICES="$gpu" ONLY="$*" setsid nohup bash experiments/table2/table2_evals.sh runs/table2 \
    > "runs/table2/logs/eval_${1}.log" 2>&1 < /dev/null &
  echo $! >> runs/table2/pids
}

case "$1" in
  setup)  # code, wheels, the weights' first half; NIAH's 16K-1M test files on 24 of the 64 cores in the
    # background (16K first: the manifest check says at once whether this machine writes the recorded
    # bytes), then their hashes recorded, then the untrained encoder's grid once its run folder is done
    mkdir -p "$CODE/.device/minilm"
    (cd "$SRC" && tar cf - --exclude=./.device --exclude=./runs --exclude=./.git .) | (cd "$CODE" && tar xf -)
    cp "$SRC"/.device/p1/* "$CODE/.device/minilm/"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$SRC"/.device/whl/*.whl || exit 1
    cd "$CODE"; for d in $DIRS; do mkdir -p "$d/logs"; done
    python3 scripts/niah_testsets.py --jobs 24 --lengths 16k 2>&1 | tail -n 3
    setsid nohup bash -c "python3 scripts/niah_testsets.py --jobs 24 && python3 scripts/niah_testsets.py --write-manifest \
      && until [ -f runs/niah/n_noft/summary.json ]; do sleep 10; done \
      && python3 experiments/niah/niah_eval_grid.py runs/niah n_noft --gpus 3 --per-gpu 2" \
      > runs/niah/logs/testsets.log 2>&1 < /dev/null &
    echo $! >> runs/niah/pids
    nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader; nproc ;;
  start)  # the weights' second half, every training plan, the untrained encoders' evaluations
    cd "$CODE"; M=.device/minilm
    cat "$M"/model.safetensors.part-aa "$SRC"/.device/p2/model.safetensors.part-ab > "$M/model.safetensors" \
      && rm "$M"/model.safetensors.part-aa && ls -la "$M" || exit 1
    for plan in "$ROUND"/plan_train_*.txt; do
      bash scripts/launch_plan.sh "$plan" runs/round5 algo.model.name=.device/minilm logger.progress_bar=false
    done
    bash scripts/launch_plan.sh experiments/niah/plan_train.txt runs/niah algo.model.name=.device/minilm logger.progress_bar=false
    bash scripts/launch_plan.sh experiments/table2/plan_train.txt runs/table2 algo.model.name=.device/minilm logger.progress_bar=false
    sleep 100
    bash scripts/launch_evals.sh "$ROUND/early_eval.txt" runs/round5   # the untrained encoder (t_noft)
    t2eval 3 h_noft
    sleep 50; tail -n 2 runs/*/logs/*.log | cut -c1-160
    watch $(($2 - 150)) ;;
  watch) watch "$2" ;;
  eval)  # training ends by TIME_LIMIT; runs still going are stopped here (model_best.pt stays)
    end=$((SECONDS + $2))
    cd "$CODE"; pkill -f train_q_rag.py; sleep 5; status
    for plan in "$ROUND"/plan_eval_*.txt; do bash scripts/launch_evals.sh "$plan" runs/round5; done
    t2eval 0 h_qrag_s1; t2eval 1 h_gen; t2eval 2 m_qrag
    setsid nohup python3 experiments/niah/niah_eval_grid.py runs/niah n_s1 n_s2 n_s3 --lengths 4k,16k,32k,128k \
      --gpus 0,1,2,3 --per-gpu 2 > runs/niah/logs/grid_seeds.log 2>&1 < /dev/null &
    echo $! >> runs/niah/pids
    setsid nohup python3 experiments/niah/niah_eval_grid.py runs/niah n_s1 --lengths 1m --gpus 0,1,2,3 --per-gpu 1 \
      > runs/niah/logs/grid_1m.log 2>&1 < /dev/null &
    echo $! >> runs/niah/pids
    while alive && [ $SECONDS -lt $end ]; do sleep 60; status | tail -n 6; done ;;
  pack)  # settings, curves and summaries in one archive, the per-sample records in three (each under the
    # 16 MiB a returned file may hold); left out: checkpoints, including the temporary ones a killed
    # run leaves (.model_last.pt.tmp<pid>, 0.7 GB each: round 5's first pack was 0.5 GB for that reason)
    cd "$CODE"; status
    tar czf "$OUT/a.tgz" --exclude='*.pt' --exclude='*.pt.tmp*' --exclude='tb_logs' --exclude='.eval_hydra' \
      --exclude='*.lock' --exclude='eval_*.jsonl' $DIRS
    find runs -name 'eval_*.jsonl' ! -path '*/niah/*' | tar czf "$OUT/b.tgz" -T -
    find runs -name 'eval_*.jsonl' -path '*/niah/*' ! -name '*test1m*' | tar czf "$OUT/c.tgz" -T -
    find runs -name 'eval_*test1m.jsonl' | tar czf "$OUT/d.tgz" -T -
    cp data/niah/ruler_gpt2/MANIFEST.json "$OUT/"
    ls -la "$OUT" ;;
esac
