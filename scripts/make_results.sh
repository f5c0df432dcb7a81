#!/usr/bin/env bash
# Regenerate every table and plot of the result rounds from their committed raw records:
#   scripts/make_results.sh              # every experiments/<round>/ whose MANIFEST.json names a report
#   scripts/make_results.sh round4       # only the rounds named
# A round keeps its raw records in one archive, experiments/<round>/runs.tar.xz (made by
# scripts/pack_round.py <runs> experiments/<round>/runs.tar.xz; a clone from before it has runs.tgz,
# read the same way), its sha256 in the round's MANIFEST.json beside the command that makes the
# round's tables ("report": {runs} is the unpacked archive, {round} the round's folder). The archive
# is checked against its sha256, unpacked into a temporary folder (by Python's tarfile: no xz tool
# needed), and the report writes into experiments/<round>/; its printed summary goes to <round>/summary.txt.
# Rounds without a report in their manifest (rounds 2-3, whose raw files were never committed; round 7,
# whose README names its seed_report.py command) are left as they are.
# Env: PYTHON (default: .venv/bin/python if present, else python; scripts/python.sh),
# EXPERIMENTS (the folder of the rounds: experiments).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/python.sh"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$HERE"
EXPERIMENTS="${EXPERIMENTS:-experiments}"
# prints the archive's name and sha256, then the report's arguments, one a line ({runs}, {round} filled in)
read_manifest() {
  "$PYTHON" - "$@" <<'EOF'
import json, sys
manifest, runs, round_dir = sys.argv[1:]
m = json.load(open(manifest))
name = next((n for n in ("runs.tar.xz", "runs.tgz") if n in m.get("archives", {})), None)
if name is None:
    sys.exit()  # no lines: the caller names what is missing
print(name)
print(m["archives"][name]["sha256"])
print("\n".join(a.replace("{runs}", runs).replace("{round}", round_dir) for a in m["report"]))
EOF
}
unpack() { "$PYTHON" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' "$@"; }
has_report() { [ -f "$1/MANIFEST.json" ] && grep -q '"report"' "$1/MANIFEST.json"; }
if [ $# -gt 0 ]; then
  rounds=("$@")
else
  rounds=()
  for d in "$EXPERIMENTS"/*/; do has_report "$d" && rounds+=("$(basename "$d")"); done
fi
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
made=0
for r in "${rounds[@]}"; do
  dir="$EXPERIMENTS/$r"
  [ -d "$dir" ] || { echo "error: no round folder $dir" >&2; exit 2; }
  has_report "$dir" || { echo "error: $dir/MANIFEST.json names no report (raw records not committed)" >&2; exit 2; }
  echo "== $dir"
  runs="$TMP/$r"
  mapfile -t lines < <(read_manifest "$dir/MANIFEST.json" "$runs" "$dir")
  [ "${#lines[@]}" -gt 2 ] || { echo "error: $dir/MANIFEST.json: no archives.runs.tar.xz (or runs.tgz) sha256, or no report" >&2; exit 2; }
  archive="$dir/${lines[0]}"
  got="$(sha256sum "$archive" | cut -d' ' -f1)"
  [ "$got" = "${lines[1]}" ] || { echo "error: $archive has sha256 $got, its MANIFEST.json says ${lines[1]}" >&2; exit 1; }
  mkdir -p "$runs" && unpack "$archive" "$runs"
  # the summary replaces the committed one only once the report has succeeded
  "$PYTHON" "${lines[@]:2}" > "$dir/.summary.txt.tmp" \
    || { rm -f "$dir/.summary.txt.tmp"; echo "error: the report of $dir failed; $dir/summary.txt left as it was" >&2; exit 1; }
  mv "$dir/.summary.txt.tmp" "$dir/summary.txt"
  rm -rf "$runs"
  made=$((made + 1))
done
echo "made the reports of $made round(s)"
