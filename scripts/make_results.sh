#!/usr/bin/env bash
# Regenerate every table and plot of the result rounds from their committed raw files:
#   scripts/make_results.sh              # every docs/results/<round>/ that holds runs/
#   scripts/make_results.sh round4       # only the rounds named
# For each round: python scripts/report_round.py docs/results/<round>/runs --out docs/results/<round>
# (curves, lengths, table3, generated .md/.png; the printed summary goes to <round>/summary.txt);
# docs/results/niah (Table 1): scripts/niah_report.py; docs/results/table2: scripts/report_table2.py.
# Raw files come from a GPU round's run folders via scripts/pack_round.py. Rounds without runs/
# (rounds 2-3, whose raw files were never committed) are listed and left as they are.
# Env: PYTHON (default: .venv/bin/python if present, else python; scripts/python.sh), RESULTS (the folder of the rounds: docs/results).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/python.sh"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$HERE"
RESULTS="${RESULTS:-docs/results}"
if [ $# -gt 0 ]; then
  rounds=("$@")
else
  rounds=()
  for d in "$RESULTS"/*/; do rounds+=("$(basename "$d")"); done
fi
made=0
for r in "${rounds[@]}"; do
  dir="$RESULTS/$r"
  [ -d "$dir" ] || { echo "error: no round folder $dir" >&2; exit 2; }
  if [ ! -d "$dir/runs" ]; then
    [ $# -gt 0 ] && { echo "error: $dir has no runs/ (raw files not committed)" >&2; exit 2; }
    continue
  fi
  echo "== $dir"
  case "$r" in  # Table 1 (NIAH) and Table 2 (HotpotQA / MuSiQue) have reports of their own
    niah) report=(scripts/niah_report.py "$dir/runs" --seeds n_s1,n_s2,n_s3 --untrained n_noft --out "$dir") ;;
    table2) report=(scripts/report_table2.py "$dir/runs" --out "$dir/table2.md") ;;
    *) report=(scripts/report_round.py "$dir/runs" --out "$dir") ;;
  esac
  # the summary replaces the committed one only once the report has succeeded
  "$PYTHON" "${report[@]}" > "$dir/.summary.txt.tmp" \
    || { rm -f "$dir/.summary.txt.tmp"; echo "error: the report of $dir failed; $dir/summary.txt left as it was" >&2; exit 1; }
  mv "$dir/.summary.txt.tmp" "$dir/summary.txt"
  made=$((made + 1))
done
echo "made the reports of $made round(s)"
