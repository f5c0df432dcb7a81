#!/usr/bin/env bash
# Launch retriever evaluations side by side, each line a background chain over context lengths
# (the evaluation half of scripts/launch_plan.sh).
#
#   scripts/launch_evals.sh <eval plan> <runs dir> [extra eval_retriever.py overrides...]
#
# Eval plan: one chain per line, `<run name> <gpu> <num_samples> <N1,N2,...> [override ...]`;
# `#` starts a comment. Each chain runs `python eval_retriever.py pretrained_path=<runs dir>/<run>
# <length N> num_samples=<num_samples> progress_bar=false <extra> <overrides>` for each N in turn
# under CUDA_VISIBLE_DEVICES=<gpu>, logging to <runs dir>/logs/eval_<run>_<line>.log. <length N> is
# BabiLong's official token budget `envs.length_unit=tokens envs.num_tokens=N` (N = 1000 is "1K"),
# or with LENGTH_UNIT=sentences the reference's `envs.num_sentences=N`, or with LENGTH_UNIT=split the
# test file `envs.test_split=testN` of a folder of test sets (NIAH and RULER QA: N = 4k, 16k, ... 1m;
# scripts/niah_testsets.py). A plan whose lengths are in
# one unit says so in a `#@length_unit tokens|sentences|split|none` line (rounds 2-3 count sentences): that
# unit is used, and a LENGTH_UNIT that contradicts it is an error (an eval at "1200 tokens" instead
# of 1200 sentences would be a silent mistake). Data whose test set has no length (HotpotQA, MuSiQue:
# experiments/table2b/) say `#@length_unit none` and put `-` in the lengths column: one evaluation per
# line, no length override; a `-` under another unit, or a length under none, is refused before any
# chain starts. An override holding `${...}` (a config interpolation) is single-quoted in the plan, as
# each chain is one `bash -c` line. The
# evaluation files resume by sample id, so relaunching a plan finishes what a stop interrupted.
# GPUS="0 1" maps the GPU column as in scripts/launch_plan.sh; process ids go to <runs dir>/pids.
# Env: PYTHON (default: .venv/bin/python if present, else python; scripts/python.sh), THREADS (2), LENGTH_UNIT (tokens | sentences | split |
# none; default: the plan's #@length_unit, else tokens).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 <eval plan> <runs dir> [key=value ...]" >&2
  exit 2
fi
PLAN="$1"; RUNS="$2"; shift 2
. "$(dirname "${BASH_SOURCE[0]}")/python.sh"
THREADS="${THREADS:-2}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ -f "$PLAN" ] || { echo "error: eval plan $PLAN not found" >&2; exit 2; }
plan_unit="$(sed -n 's/^#@length_unit[[:space:]]\{1,\}\([a-z]*\).*/\1/p' "$PLAN" | tail -n 1)"
if [ -n "$plan_unit" ] && [ -n "${LENGTH_UNIT:-}" ] && [ "$LENGTH_UNIT" != "$plan_unit" ]; then
  echo "error: LENGTH_UNIT=$LENGTH_UNIT, but $PLAN says #@length_unit $plan_unit" >&2; exit 2
fi
LENGTH_UNIT="${LENGTH_UNIT:-${plan_unit:-tokens}}"
case "$LENGTH_UNIT" in
  tokens) length_arg() { echo "envs.length_unit=tokens envs.num_tokens=$1"; } ;;
  sentences) length_arg() { echo "envs.num_sentences=$1"; } ;;
  split) length_arg() { echo "envs.test_split=test$1"; } ;;
  none) length_arg() { :; } ;;
  *) echo "error: LENGTH_UNIT must be tokens, sentences, split or none, not $LENGTH_UNIT" >&2; exit 2 ;;
esac
bad="$(awk -v none="$([ "$LENGTH_UNIT" = none ] && echo 1 || echo 0)" \
  '$1 !~ /^#/ && NF && (none == 1) != ($4 == "-") { print NR ": " $0; exit }' "$PLAN")"
[ -z "$bad" ] || { echo "error: $PLAN line $bad: the lengths column is - exactly when the unit is none ($LENGTH_UNIT)" >&2; exit 2; }
read -r -a gpus <<< "${GPUS:-}"
mkdir -p "$RUNS/logs"
n=0
while read -r name gpu samples lengths overrides; do
  case "$name" in ''|'#'*) continue ;; esac
  n=$((n + 1))
  [ -f "$RUNS/$name/config.yaml" ] || { echo "skip $name: no run folder $RUNS/$name" >&2; continue; }
  [ ${#gpus[@]} -gt 0 ] && gpu="${gpus[$((gpu % ${#gpus[@]}))]}"
  log="$RUNS/logs/eval_${name}_$n.log"
  cmd=""
  for N in ${lengths//,/ }; do
    cmd+="\"$PYTHON\" \"$HERE/eval_retriever.py\" pretrained_path=\"$RUNS/$name\" $(length_arg "$N")"
    cmd+=" num_samples=$samples progress_bar=false $* $overrides || echo \"FAILED N=$N\"; "
  done
  CUDA_VISIBLE_DEVICES="$gpu" OMP_NUM_THREADS="$THREADS" RAYON_NUM_THREADS="$THREADS" \
    setsid nohup bash -c "$cmd" > "$log" 2>&1 < /dev/null &
  echo $! >> "$RUNS/pids"
done < "$PLAN"
echo "launched $n evaluation chains from $PLAN"
