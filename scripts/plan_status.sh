#!/usr/bin/env bash
# Progress of the runs started by scripts/launch_plan.sh: one line per run folder with the last
# evaluation (step, validation return, fact EM) and the best fact EM so far.
#   scripts/plan_status.sh <out dir>
set -euo pipefail
OUTDIR="${1:?usage: $0 <out dir>}"
. "$(dirname "${BASH_SOURCE[0]}")/python.sh"
"$PYTHON" - "$OUTDIR" <<'EOF'
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
