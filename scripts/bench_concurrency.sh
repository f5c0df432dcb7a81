#!/usr/bin/env bash
# Training throughput of k runs at once per GPU (docs/DISTRIBUTED.md, "Sweeps"; BENCH.md's table).
#
#   scripts/bench_concurrency.sh [K_LIST] [override ...]
#   STEPS=200 scripts/bench_concurrency.sh 1,2,4,6 experiment=ref_babilong_qa2 envs_parallel=4
#
# For each k in K_LIST (default 1,2,4,6): one `train_q_rag.py -m` sweep of k x GPUs short runs
# (seeds 1, 2, ...) started together by hydra/launcher=parallel with jobs_per_gpu=k, so k runs
# share each visible GPU (restrict CUDA_VISIBLE_DEVICES to measure one card). Prints one JSON
# line per k: each run's optimiser steps per second of its training loop (evaluations
# excluded), their sum per GPU (aggregate), the same from total steps over the wall-clock window
# of all loops (evaluations included: a lower bound), and the aggregate's ratio to k = 1.
# The overrides go to every run. Each JSON line names the card and the code tree (env TREE, default
# the git commit). Env: STEPS (optimiser steps per run, default 200), EVAL_EPISODES
# (one evaluation at the end, default 20), OUT (default runs/bench_concurrency/<time>), PYTHON (scripts/python.sh).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/python.sh"
cd "$(dirname "$0")/.."
PY="$PYTHON"
KS="${1:-1,2,4,6}"
shift || true
STEPS="${STEPS:-200}"
OUT="${OUT:-runs/bench_concurrency/$(date +%Y%m%d_%H%M%S)}"
mkdir -p "$OUT"
TREE="${TREE:-$(git rev-parse --short HEAD 2>/dev/null || echo project)}"
GPUS=$("$PY" -c "import torch; print(torch.cuda.device_count())")
SLOTS=$(( GPUS > 0 ? GPUS : 1 ))  # without a GPU, k processes on the CPU
for k in ${KS//,/ }; do
  n=$(( k * SLOTS ))
  echo "k=$k: $n runs of $STEPS steps -> $OUT/k$k (log: $OUT/k$k.log)" >&2
  "$PY" train_q_rag.py -m hydra/launcher=parallel "jobs_per_gpu=$k" "seed=$(seq -s, 1 "$n")" "steps_count=$STEPS" \
    "eval_interval=$STEPS" "eval_episodes=${EVAL_EPISODES:-20}" final_eval_episodes=0 logger.progress_bar=false \
    "$@" "hydra.sweep.dir=$OUT/k$k" > "$OUT/k$k.log" 2>&1 || { tail -n 20 "$OUT/k$k.log" >&2; exit 1; }
  "$PY" - "$OUT" "$k" "$n" "$SLOTS" "$GPUS" "$TREE" <<'PYEOF'
import json, sys
from pathlib import Path

import torch

out, tree = Path(sys.argv[1]), sys.argv[6]
k, n, slots, gpus = map(int, sys.argv[2:6])
loops = [json.loads(p.read_text())["train_loop"] for p in sorted((out / f"k{k}").glob("*/summary.json"))]
if len(loops) != n:
    sys.exit(f"k={k}: {len(loops)} of {n} runs wrote summary.json; see {out}/k{k}.log")
rates = [lp["steps"] / lp["seconds_without_eval"] for lp in loops]
window = max(lp["end"] for lp in loops) - min(lp["start"] for lp in loops)
card = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
row = {"workload": "train-concurrent", "tree": tree, "card": card, "runs_per_gpu": k, "gpus": gpus, "runs": n, "steps_per_run": loops[0]["steps"],
       "per_run_steps_per_s": [round(r, 3) for r in rates],
       "aggregate_steps_per_s": round(sum(rates) / slots, 3),
       "window_steps_per_s_per_gpu": round(sum(lp["steps"] for lp in loops) / window / slots, 3)}
results = out / "results.jsonl"
prior = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
base = next((r for r in prior if r["runs_per_gpu"] == 1), row if k == 1 else None)
if base is not None:
    row["ratio_to_one_run"] = round(row["aggregate_steps_per_s"] / base["aggregate_steps_per_s"], 2)
with results.open("a") as f:
    f.write(json.dumps(row) + "\n")
print(json.dumps(row), flush=True)
PYEOF
done
