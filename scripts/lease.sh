#!/usr/bin/env bash
# One GPU lease of a round: training plans side by side, their evaluations, one archive back. Every
# verb is one device call (`run`); the round's settings live in a small file of shell assignments:
#
#   COMMIT=<short hash> bash scripts/lease.sh <settings> setup       # call 1: code copy, wheels, MPS, weight parts
#   bash scripts/lease.sh <settings> start <seconds>                 # call 2: last weight part, every training plan
#   bash scripts/lease.sh <settings> watch <seconds>                 # keep the machine: progress every 2 minutes
#   bash scripts/lease.sh <settings> eval <seconds>                  # stop training, every evaluation plan side by side
#   bash scripts/lease.sh <settings> pack                            # run files (no checkpoints) -> $OUT/round.tgz
#   bash scripts/lease.sh <settings> call <name> <seconds>           # the settings' CALL_<name> lines, in turn
#   bash scripts/lease.sh <settings> parts                           # only take the weight parts this call carries
#
# Settings (experiments/round7/lease.env is one): RUNS (run folders, relative to the code copy),
# TRAIN_PLANS and EVAL_PLANS (scripts/launch_plan.sh / launch_evals.sh plan files, relative to the
# repository; `<plan>:<folder>` puts that plan's runs in <folder> instead of RUNS), TIME_LIMIT (seconds a
# training run may take), MPS (1: CUDA MPS on every card, one daemon for the whole lease), EXTRA
# (overrides given to every training run after the plan's #@common ones). What is not a plan:
#   JOBS_SETUP, JOBS_START, JOBS_EVAL  bash arrays of command lines started in the background (in the code
#       copy) at the end of that verb, beside the plans: logs $RUNS/logs/job_<verb>_<i>.log, process ids in
#       $RUNS/job_pids (watched like the runs; eval does not stop them). experiments/round5/lease.env.
#   CALL_<name>  a bash array of command lines the `call <name>` verb runs in the foreground, one after the
#       other, each given the seconds left; for measurements rather than runs (experiments/bench/lease.env).
#   OLD_TREE  a second tree beside this one: setup unpacks .device/old_<OLD_TREE>.tgz (`git archive
#       --prefix=old/ -o .device/old_<commit>.tgz <commit>`) into $OLD, with its .code_version.
# Every assignment of the settings is exported (the lines read them), and so are CODE, OLD, SRC (the call's
# working tree, where carried files are), OUT, PYTHON, SITE and COMMIT (the copy's .code_version).
# Environment: CODE (the copy, /tmp/qrag), OLD (/tmp/qrag_old), PYTHON (python3), SITE (/tmp/site),
# FIRST_LOOK and POLL (the seconds before the first progress lines and between them: 90 and 120; the eval
# verb polls every 30).
#
# What travels (gitignored, built on the CPU machine; at most 64 MiB a call with the tree): wheels the
# machine lacks in .device/<any>whl folders (.device/whl: hydra-core, omegaconf, antlr4-python3-runtime;
# every verb installs the wheels its call carries) and fp16 model folders in parts, one part a call
# (scripts/device_parts.py makes them as large as the tree leaves room for: .device/part-<name>-1, -2, ...,
# each holding one `model.safetensors.part-*` piece, the first also the config and tokenizer files).
# Every verb takes the parts its call carries (`parts` does nothing else: for a model that needs more
# calls than the lease has verbs); each model's weights are joined into $CODE/.device/<name> (`MODEL` in a
# part; without one: minilm, as the hand-made .device/part1, part2 of rounds 5-8) once no part is missing
# (`PARTS` names how many there are), and their fp16 sha256 checked where the parts carry it. start gives
# every run `algo.model.name=.device/minilm` when MiniLM came in parts; another model is named by the
# plan's own lines (a plan line's value beats it), e.g. `algo=mpnet algo.model.name=.device/mpnet`, and
# start refuses while a carried model is incomplete.
# Each call re-lays the working tree, so everything long-running reads from a copy outside it ($CODE,
# made once by setup, with .code_version = $COMMIT, the commit the runs record: the copy has no .git).
# start and eval copy the settings' plan files from the call's tree first, so a second wave in the same
# lease is a second settings file (its own RUNS and plans) run with start / eval / pack, without setup.
# pack splits an archive over 15 MiB (a returned file may hold 16) into round.tgz.part-aa, -ab, ...
# (`cat round.tgz.part-* > round.tgz` joins them).
set -uo pipefail
SETTINGS="${1:?usage: $0 <settings file> setup|start|watch|eval|pack|parts|call [name] [seconds]}"
VERB="${2:?usage: $0 <settings file> setup|start|watch|eval|pack|parts|call [name] [seconds]}"
if [ "$VERB" = call ]; then
  NAME="${3:?usage: $0 <settings file> call <name> [seconds]}"; SECS="${4:-540}"
else
  SECS="${3:-540}"
fi
SRC="$(cd "$(dirname "$0")/.." && pwd)"
CODE="${CODE:-/tmp/qrag}" OLD="${OLD:-/tmp/qrag_old}" SITE="${SITE:-/tmp/site}"  # SITE: where carried wheels go
export SRC CODE OLD SITE OUT="${OUT:-/tmp/out}"
case "$SETTINGS" in /*) ;; *) SETTINGS="$SRC/$SETTINGS" ;; esac  # relative: to the repository
set -a  # every assignment of the settings is exported: CALL_ and JOBS_ lines read them
. "$SETTINGS" || { echo "error: cannot read settings $SETTINGS" >&2; exit 2; }
set +a
: "${RUNS:?settings: RUNS}"
export THREADS="${THREADS:-2}" PYTHONUNBUFFERED=1 PYTHON="${PYTHON:-python3}" PYTHONPATH="$SITE" TIME_LIMIT="${TIME_LIMIT:-900}"
[ "$VERB" = setup ] || COMMIT="${COMMIT:-$(cat "$CODE/.code_version" 2>/dev/null)}"  # setup is told it
export COMMIT="${COMMIT:-}"
GPUS="$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | tr '\n' ' ')"
export GPUS
if [ "${MPS:-1}" = 1 ]; then  # the daemon's pipe folder is fixed, so processes of later calls find it
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/qrag_mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/qrag_mps/log
fi

take_wheels() {  # install the wheels this call carries (no index, no dependencies)
  local d
  for d in "$SRC"/.device/*whl/; do
    compgen -G "$d*.whl" > /dev/null || continue
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$d"*.whl \
      || { echo "error: the wheels of $d did not install" >&2; exit 1; }
  done
}

take_parts() {  # copy the weight parts this call carries; join each model's once every part is there
  local d m name want have
  for d in "$SRC"/.device/part*/; do
    [ -d "$d" ] || continue
    name="$(cat "$d/MODEL" 2>/dev/null || echo minilm)"
    mkdir -p "$CODE/.device/$name" && cp -r "$d". "$CODE/.device/$name/"
  done
  for m in "$CODE"/.device/*/; do
    m="${m%/}"; name="$(basename "$m")"
    want="$(cat "$m/PARTS" 2>/dev/null || echo 0)"
    if [ -f "$m/model.safetensors" ] || [ "$want" -eq 0 ]; then continue; fi  # joined, or no parts
    have="$(ls "$m"/model.safetensors.part-* 2>/dev/null | wc -l)"
    if [ "$have" -eq "$want" ]; then
      cat "$m"/model.safetensors.part-* > "$m/model.safetensors.tmp" && rm "$m"/model.safetensors.part-* || return 1
      if [ -f "$m/model.safetensors.sha256" ] && ! (cd "$m" && sed 's/model.safetensors$/model.safetensors.tmp/' \
          model.safetensors.sha256 | sha256sum -c --quiet -); then
        echo "error: weights $name: the joined file's sha256 is not the one its parts carry" >&2; return 1
      fi
      mv "$m/model.safetensors.tmp" "$m/model.safetensors" && echo "weights $name: joined, $(sha256sum "$m/model.safetensors")"
    else
      echo "weights $name: $have of $want parts here"
    fi
  done
}

complete() {  # every model that came in parts is joined
  local m
  for m in "$CODE"/.device/*/; do
    [ -f "$m/PARTS" ] && [ ! -f "$m/model.safetensors" ] && { echo "error: weights $(basename "$m") incomplete" >&2; return 1; }
  done
  return 0
}

plans() {  # the plan files as they are in this call's tree: a later wave's plans need no new setup
  local e plan
  for e in "$@"; do
    plan="${e%%:*}"
    case "$plan" in /*) continue ;; esac  # an absolute path is read where it is
    mkdir -p "$CODE/$(dirname "$plan")" && cp "$SRC/$plan" "$CODE/$plan" || exit 1
  done
}

folders() {  # RUNS and every folder a plan entry names (`<plan>:<folder>`)
  local e
  { echo "$RUNS"; for e in ${TRAIN_PLANS:-} ${EVAL_PLANS:-}; do case "$e" in *:*) echo "${e#*:}" ;; esac; done; } | sort -u
}

alive() {
  local f p
  for f in $(folders | sed 's|$|/pids|') "$RUNS/job_pids"; do
    [ -f "$CODE/$f" ] && for p in $(cat "$CODE/$f"); do kill -0 "$p" 2>/dev/null && return 0; done
  done
  return 1
}

jobs_of() {  # jobs_of <verb> <lines...>: each line in the background, its process id in $RUNS/job_pids
  local verb="$1" i=0 line
  shift
  for line in "$@"; do
    i=$((i + 1))
    (
      cd "$CODE" || exit 1
      setsid nohup bash -c "$line" > "$RUNS/logs/job_${verb}_$i.log" 2>&1 < /dev/null &
      echo $! >> "$RUNS/job_pids"
    )
    echo "job_${verb}_$i started: ${line:0:100}"
  done
}

status() {
  local f
  echo "--- $(date +%T)"
  for f in $(folders); do (cd "$CODE" && bash scripts/launch_plan.sh --status "$f" 2>&1 | cut -c1-72); done
  for f in "$CODE/$RUNS"/logs/job_*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(tail -n 1 "$f" | cut -c1-100)"; done
  echo "evaluations done: $(for f in $(folders); do find "$CODE/$f" -name 'eval_*.summary.json' 2>/dev/null; done | wc -l)"
  nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used --format=csv,noheader 2>/dev/null || true
}

watch() {  # watch <seconds>: progress every 120 s until the time is up or nothing runs
  local end=$((SECONDS + $1))
  while [ $SECONDS -lt "$end" ] && alive; do
    sleep $(( end - SECONDS < ${POLL:-120} ? end - SECONDS : ${POLL:-120} )); status
  done
}

take_wheels
case "$VERB" in
  setup)
    [ -n "${COMMIT:-}" ] || { echo "error: COMMIT=<the tree's commit> must be set (the copy has no .git)" >&2; exit 2; }
    mkdir -p "$CODE"
    (cd "$SRC" && tar cf - --exclude=./.device --exclude=./runs --exclude=./.git --exclude='./.venv*' .) | (cd "$CODE" && tar xf -)
    echo "$COMMIT" > "$CODE/.code_version"
    if [ -n "${OLD_TREE:-}" ]; then
      rm -rf "$OLD" && mkdir -p "$OLD" && tar xzf "$SRC/.device/old_$OLD_TREE.tgz" -C "$OLD" --strip-components=1 \
        && echo "$OLD_TREE" > "$OLD/.code_version" || { echo "error: no tree .device/old_$OLD_TREE.tgz" >&2; exit 1; }
    fi
    if [ "${MPS:-1}" = 1 ]; then
      mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
      nvidia-cuda-mps-control -d || { echo "error: MPS did not start" >&2; exit 1; }
    fi
    take_parts || exit 1
    for f in $(folders); do mkdir -p "$CODE/$f/logs"; done
    jobs_of setup ${JOBS_SETUP[@]+"${JOBS_SETUP[@]}"}
    nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader; nproc ;;
  start)
    take_parts || exit 1
    complete || exit 1
    read -r -a extra <<< "${EXTRA:-}"
    if [ -f "$CODE/.device/minilm/PARTS" ]; then  # carried MiniLM weights: every run reads them
      extra=(algo.model.name=.device/minilm ${extra[@]+"${extra[@]}"})
    fi
    cd "$CODE" || exit 1
    plans ${TRAIN_PLANS:-} ${EVAL_PLANS:-}
    for e in ${TRAIN_PLANS:-}; do
      dest="$RUNS"; case "$e" in *:*) dest="${e#*:}" ;; esac
      bash scripts/launch_plan.sh "${e%%:*}" "$dest" logger.progress_bar=false ${extra[@]+"${extra[@]}"}
    done
    jobs_of start ${JOBS_START[@]+"${JOBS_START[@]}"}
    sleep "${FIRST_LOOK:-90}"
    for f in $(folders); do tail -q -n 1 "$f"/logs/*.log 2>/dev/null | cut -c1-150; done
    watch $((SECS - ${FIRST_LOOK:-90} - 10)) ;;
  watch) take_parts || exit 1; watch "$SECS" ;;
  parts) take_parts || exit 1 ;;
  eval)  # training runs still going are stopped (their model_best.pt stays), then every evaluation chain
    end=$((SECONDS + SECS))
    take_parts || exit 1
    cd "$CODE" || exit 1
    plans ${EVAL_PLANS:-}
    stopped=0
    for f in $(folders); do  # no pkill there; the jobs' own processes (job_pids) go on
      [ -f "$f/pids" ] && for p in $(cat "$f/pids"); do kill -TERM "$p" 2>/dev/null && stopped=1; done
    done
    [ "$stopped" = 0 ] || sleep 5
    status
    for e in ${EVAL_PLANS:-}; do
      dest="$RUNS"; case "$e" in *:*) dest="${e#*:}" ;; esac
      bash scripts/launch_evals.sh "${e%%:*}" "$dest"
    done
    jobs_of eval ${JOBS_EVAL[@]+"${JOBS_EVAL[@]}"}
    while alive && [ $SECONDS -lt "$end" ]; do
      sleep "${POLL:-30}"; echo "$(date +%T) evaluations done: $(for f in $(folders); do find "$f" -name 'eval_*.summary.json'; done | wc -l)"
    done
    if grep -q "FAILED" $(for f in $(folders); do ls "$f"/logs/eval_*.log 2>/dev/null; done) /dev/null; then  # launch_evals.sh's line
      grep -h -B3 "FAILED" $(for f in $(folders); do ls "$f"/logs/eval_*.log 2>/dev/null; done) | tail -n 20; exit 1
    fi ;;
  pack)  # settings, curves, summaries and records; no checkpoints (also not a killed run's .pt.tmp*)
    take_parts || exit 1
    cd "$CODE" || exit 1
    status
    mkdir -p "$OUT"
    tar czf "$OUT/round.tgz" --exclude='*.pt' --exclude='*.pt.tmp*' --exclude='tb_logs' --exclude='.eval_hydra' \
      --exclude='*.lock' $(folders)
    if [ "$(stat -c %s "$OUT/round.tgz")" -gt $((15 * 1024 * 1024)) ]; then
      split -b 15M "$OUT/round.tgz" "$OUT/round.tgz.part-" && rm "$OUT/round.tgz"
    fi
    ls -la "$OUT" ;;
  call)  # the lines of CALL_<name>, in turn, in the code copy, with this tree's PYTHONPATH after the wheels
    take_parts || exit 1
    [[ "$NAME" =~ ^[A-Za-z0-9_]+$ ]] && declare -p "CALL_$NAME" > /dev/null 2>&1 \
      || { echo "error: the settings have no CALL_$NAME lines" >&2; exit 2; }
    declare -n lines="CALL_$NAME"
    end=$((SECONDS + SECS)) rc=0
    mkdir -p "$OUT"
    cd "$CODE" || exit 1
    for line in "${lines[@]}"; do  # a failed line is reported and the next one runs (as the calls ran them)
      [ $SECONDS -lt "$end" ] || { echo "error: no time left for: ${line:0:100}" >&2; exit 1; }
      PYTHONPATH="$SITE:." timeout $((end - SECONDS)) bash -c "$line" || { rc=$?; echo "call $NAME: rc=$rc: ${line:0:100}"; }
    done
    exit "$rc" ;;
  *) echo "error: unknown verb $VERB (setup|start|watch|eval|pack|parts|call)" >&2; exit 2 ;;
esac
