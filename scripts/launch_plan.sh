#!/usr/bin/env bash
# Launch many training runs side by side on one machine, each in the background with a wall-clock
# limit, from a plan file (how docs/RESULTS.md's GPU rounds were run: one run keeps a GPU only
# 15-25 % busy, so several share each card).
#
#   scripts/launch_plan.sh <plan file> <out dir> [extra overrides applied to every run...]
#
# Plan file: one run per line, `<name> <gpu> <override> [<override> ...]`; `#` starts a comment,
# except `#@common <override> ...`: overrides given to every run. Each run trains with
# `python train_q_rag.py <common> <extra> <overrides> hydra.run.dir=<out dir>/<name>` (for one key the
# later value wins: a plan line's own beats the extra ones) under CUDA_VISIBLE_DEVICES=<gpu>, logs to
# <out dir>/logs/<name>.log and is stopped after TIME_LIMIT seconds by SIGTERM; its model_best.pt and
# metrics.jsonl stay usable (the best model is written at each evaluation). A run folder that holds
# metrics.jsonl is resumed (resume=true); one with summary.json (finished) is skipped.
# GPUS="0 1" maps the plan's GPU column onto the listed devices (column value modulo their number);
# unset, the column is used as is. The script returns at once; the background processes' ids are
# appended to <out dir>/pids. `scripts/launch_plan.sh --status <out dir>` reports progress: one line per run
# folder with the last evaluation (step, validation return, fact EM) and the best fact EM so far.
# Env: PYTHON (default: .venv/bin/python if present, else python; scripts/python.sh), TIME_LIMIT (780), THREADS (2: torch/tokenizer threads per run), GPUS.
set -euo pipefail
if [ "${1:-}" = --status ]; then
  OUTDIR="${2:?usage: $0 --status <out dir>}"
  . "$(dirname "${BASH_SOURCE[0]}")/python.sh"
  "$PYTHON" - "$OUTDIR" <<'EOF'  # the body and its end stay at column 0
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
print(f"{'run':28s} {'step':>5s} {'return':>7s} {'factEM':>7s} {'bestEM':>7s}  log tail")
for log in sorted((out / "logs").glob("*.log")):
    name = log.stem
    rows = []
    m = out / name / "metrics.jsonl"
    if m.exists():
        rows = [json.loads(x) for x in m.read_text().splitlines() if x.strip()]
    tail = (log.read_text(errors="replace").strip().splitlines() or [""])[-1][-60:]
    if rows:
        r = rows[-1]
        best = max(x.get("eval/fact_em", 0) for x in rows)
        print(f"{name:28s} {r['step']:5d} {r['eval/return']:7.3f} {r['eval/fact_em']:7.3f} {best:7.3f}  {tail}")
    else:
        print(f"{name:28s} {'-':>5s} {'-':>7s} {'-':>7s} {'-':>7s}  {tail}")
EOF
  exit 0
fi
if [ $# -lt 2 ]; then
  echo "usage: $0 <plan file> <out dir> [key=value ...]" >&2
  exit 2
fi
PLAN="$1"; OUTDIR="$2"; shift 2
. "$(dirname "${BASH_SOURCE[0]}")/python.sh"
TIME_LIMIT="${TIME_LIMIT:-780}"
THREADS="${THREADS:-2}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ -f "$PLAN" ] || { echo "error: plan file $PLAN not found" >&2; exit 2; }
read -r -a common <<< "$(sed -n 's/^#@common //p' "$PLAN" | tr '\n' ' ')"
read -r -a gpus <<< "${GPUS:-}"
mkdir -p "$OUTDIR/logs"
n=0
while read -r name gpu overrides; do
  case "$name" in ''|'#'*) continue ;; esac
  read -r -a ov <<< "$overrides"
  [ ${#gpus[@]} -gt 0 ] && gpu="${gpus[$((gpu % ${#gpus[@]}))]}"
  dir="$OUTDIR/$name"
  [ -f "$dir/summary.json" ] && { echo "skip $name: finished ($dir/summary.json)"; continue; }
  resume=()
  [ -f "$dir/metrics.jsonl" ] && resume=(resume=true)
  CUDA_VISIBLE_DEVICES="$gpu" OMP_NUM_THREADS="$THREADS" RAYON_NUM_THREADS="$THREADS" \
    setsid nohup timeout "$TIME_LIMIT" "$PYTHON" "$HERE/train_q_rag.py" ${common[@]+"${common[@]}"} "$@" "${ov[@]}" \
    "${resume[@]+"${resume[@]}"}" "hydra.run.dir=$dir" > "$OUTDIR/logs/$name.log" 2>&1 < /dev/null &
  echo $! >> "$OUTDIR/pids"
  n=$((n + 1))
done < "$PLAN"
echo "launched $n runs from $PLAN into $OUTDIR (limit ${TIME_LIMIT}s each)"
