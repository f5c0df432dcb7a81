#!/usr/bin/env bash
# One GPU lease of a round: training plans side by side, their evaluations, one archive back. Every
# verb is one device call (`run`); the round's settings live in a small file of shell assignments:
#
#   COMMIT=<short hash> bash scripts/lease.sh <settings> setup       # call 1: code copy, wheels, MPS, weight parts
#   bash scripts/lease.sh <settings> start <seconds>                 # call 2: last weight part, every training plan
#   bash scripts/lease.sh <settings> watch <seconds>                 # keep the machine: progress every 2 minutes
#   bash scripts/lease.sh <settings> eval <seconds>                  # stop training, every evaluation plan side by side
#   bash scripts/lease.sh <settings> pack                            # run files (no checkpoints) -> $OUT/round.tgz
#
# Settings (experiments/round7/lease.env is one): RUNS (run folders, relative to the code copy),
# TRAIN_PLANS and EVAL_PLANS (scripts/launch_plan.sh / launch_evals.sh plan files, relative to the
# repository), TIME_LIMIT (seconds a training run may take), MPS (1: CUDA MPS on every card, one daemon
# for the whole lease), EXTRA (overrides given to every training run after the plan's #@common ones).
# Environment: CODE (the copy, /tmp/qrag), PYTHON (python3), SITE (/tmp/site), FIRST_LOOK and POLL (the
# seconds before the first progress lines and between them: 90 and 120; the eval verb polls every 30).
#
# What travels (gitignored, built on the CPU machine; at most 64 MiB a call with the tree): .device/whl
# (wheels the machine lacks: hydra-core, omegaconf, antlr4-python3-runtime) and the fp16 MiniLM folder in
# parts, .device/part1, .device/part2, ... (the config and tokenizer files plus `model.safetensors.part-*` pieces
# of `split -b 22M`); every verb takes the parts its call carries, and the weights are joined into
# $CODE/.device/minilm once no part is missing (`.device/part*/PARTS` names how many there are).
# Each call re-lays the working tree, so everything long-running reads from a copy outside it ($CODE,
# made once by setup, with .code_version = $COMMIT, the commit the runs record: the copy has no .git).
# start and eval copy the settings' plan files from the call's tree first, so a second wave in the same
# lease is a second settings file (its own RUNS and plans) run with start / eval / pack, without setup.
set -uo pipefail
SETTINGS="${1:?usage: $0 <settings file> setup|start|watch|eval|pack [seconds]}"
VERB="${2:?usage: $0 <settings file> setup|start|watch|eval|pack [seconds]}"
SECS="${3:-540}"
SRC="$(cd "$(dirname "$0")/.." && pwd)"
CODE="${CODE:-/tmp/qrag}"
case "$SETTINGS" in /*) ;; *) SETTINGS="$SRC/$SETTINGS" ;; esac  # relative: to the repository
. "$SETTINGS" || { echo "error: cannot read settings $SETTINGS" >&2; exit 2; }
: "${RUNS:?settings: RUNS}" "${TRAIN_PLANS:?settings: TRAIN_PLANS}" "${EVAL_PLANS:?settings: EVAL_PLANS}"
SITE="${SITE:-/tmp/site}"  # where the carried wheels are installed
export THREADS="${THREADS:-2}" PYTHONUNBUFFERED=1 PYTHON="${PYTHON:-python3}" PYTHONPATH="$SITE" TIME_LIMIT="${TIME_LIMIT:-900}"
GPUS="$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | tr '\n' ' ')"
export GPUS
if [ "${MPS:-1}" = 1 ]; then  # the daemon's pipe folder is fixed, so processes of later calls find it
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/qrag_mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/qrag_mps/log
fi

take_parts() {  # copy the weight parts this call carries; join them once every part is there
  local m="$CODE/.device/minilm" want
  mkdir -p "$m"
  for d in "$SRC"/.device/part*/; do [ -d "$d" ] && cp -r "$d". "$m/"; done
  want="$(cat "$m/PARTS" 2>/dev/null || echo 0)"
  if [ -f "$m/model.safetensors" ] || [ "$want" -eq 0 ]; then return 0; fi  # joined, or no parts: the run's own model
  if [ "$(ls "$m"/model.safetensors.part-* 2>/dev/null | wc -l)" -eq "$want" ] && [ "$want" -gt 0 ]; then
    cat "$m"/model.safetensors.part-* > "$m/model.safetensors" && rm "$m"/model.safetensors.part-* \
      && sha256sum "$m/model.safetensors"
  else
    echo "weights: $(ls "$m"/model.safetensors.part-* 2>/dev/null | wc -l) of $want parts here"
  fi
}

plans() {  # the plan files as they are in this call's tree: a later wave's plans need no new setup
  for plan in "$@"; do
    case "$plan" in /*) continue ;; esac  # an absolute path is read where it is
    mkdir -p "$CODE/$(dirname "$plan")" && cp "$SRC/$plan" "$CODE/$plan" || exit 1
  done
}

alive() { [ -f "$CODE/$RUNS/pids" ] && for p in $(cat "$CODE/$RUNS/pids"); do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }

status() {
  echo "--- $(date +%T)"
  (cd "$CODE" && bash scripts/plan_status.sh "$RUNS" 2>&1 | cut -c1-72)
  echo "evaluations done: $(find "$CODE/$RUNS" -name 'eval_*.summary.json' 2>/dev/null | wc -l)"
  nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used --format=csv,noheader 2>/dev/null || true
}

watch() {  # watch <seconds>: progress every 120 s until the time is up or nothing runs
  local end=$((SECONDS + $1))
  while [ $SECONDS -lt "$end" ] && alive; do
    sleep $(( end - SECONDS < ${POLL:-120} ? end - SECONDS : ${POLL:-120} )); status
  done
}

case "$VERB" in
  setup)
    [ -n "${COMMIT:-}" ] || { echo "error: COMMIT=<the tree's commit> must be set (the copy has no .git)" >&2; exit 2; }
    mkdir -p "$CODE"
    (cd "$SRC" && tar cf - --exclude=./.device --exclude=./runs --exclude=./.git --exclude='./.venv*' .) | (cd "$CODE" && tar xf -)
    echo "$COMMIT" > "$CODE/.code_version"
    if compgen -G "$SRC/.device/whl/*.whl" > /dev/null; then
      "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$SRC"/.device/whl/*.whl || exit 1
    fi
    if [ "${MPS:-1}" = 1 ]; then
      mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
      nvidia-cuda-mps-control -d || { echo "error: MPS did not start" >&2; exit 1; }
    fi
    take_parts
    mkdir -p "$CODE/$RUNS/logs"
    nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader; nproc ;;
  start)
    take_parts
    read -r -a extra <<< "${EXTRA:-}"
    if [ -f "$CODE/.device/minilm/PARTS" ]; then  # carried weights: every run reads them
      [ -f "$CODE/.device/minilm/model.safetensors" ] || { echo "error: weights incomplete" >&2; exit 1; }
      extra=(algo.model.name=.device/minilm ${extra[@]+"${extra[@]}"})
    fi
    cd "$CODE" || exit 1
    plans $TRAIN_PLANS $EVAL_PLANS
    for plan in $TRAIN_PLANS; do
      bash scripts/launch_plan.sh "$plan" "$RUNS" logger.progress_bar=false ${extra[@]+"${extra[@]}"}
    done
    sleep "${FIRST_LOOK:-90}"; tail -q -n 1 "$RUNS"/logs/*.log | cut -c1-150
    watch $((SECS - ${FIRST_LOOK:-90} - 10)) ;;
  watch) take_parts; watch "$SECS" ;;
  eval)  # training runs still going are stopped (their model_best.pt stays), then every evaluation chain
    end=$((SECONDS + SECS))
    cd "$CODE" || exit 1
    plans $EVAL_PLANS
    if alive; then for p in $(cat "$RUNS/pids"); do kill -TERM "$p" 2>/dev/null; done; sleep 5; fi  # no pkill there
    status
    for plan in $EVAL_PLANS; do bash scripts/launch_evals.sh "$plan" "$RUNS"; done
    while alive && [ $SECONDS -lt "$end" ]; do sleep "${POLL:-30}"; echo "$(date +%T) evaluations done: $(find "$RUNS" -name 'eval_*.summary.json' | wc -l)"; done
    if grep -q "FAILED" "$RUNS"/logs/eval_*.log; then  # launch_evals.sh's line for a failed evaluation
      grep -h -B3 "FAILED" "$RUNS"/logs/eval_*.log | tail -n 20; exit 1
    fi ;;
  pack)  # settings, curves, summaries and records; no checkpoints (also not a killed run's .pt.tmp*)
    cd "$CODE" || exit 1
    status
    tar czf "$OUT/round.tgz" --exclude='*.pt' --exclude='*.pt.tmp*' --exclude='tb_logs' --exclude='.eval_hydra' \
      --exclude='*.lock' "$RUNS"
    ls -la "$OUT" ;;
  *) echo "error: unknown verb $VERB (setup|start|watch|eval|pack)" >&2; exit 2 ;;
esac
