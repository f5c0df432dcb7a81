#!/usr/bin/env bash
# The evaluations behind Table 2's retrieval columns on the real HotpotQA / MuSiQue test questions
# (experiments/table2/plan_train.txt trains the runs; experiments/table2/report_table2.py reads what this writes).
#
#   experiments/table2/table2_evals.sh <runs dir> [extra eval_retriever.py overrides...]
#
# Per run, all test questions (num_samples=-1), seed 42, best checkpoint, fixed budget T:
#   HotpotQA (T = 2): greedy -> <run>/eval_seed42.jsonl, Plan Q-RAG (eval.planner=beam) -> _beam4x3;
#   MuSiQue out of domain (eval_env=musique, T = 4) -> <run>/ood_musique/eval_seed42_musique_T4.jsonl
#   and _musique_T4_beam4x3 (the evaluation names the dataset and T that are not the run's;
#   docs/EVALUATION.md "Output files"; round 5's records predate that and keep the bare names).
# h_gen was trained on the generated stand-ins: its test data is pointed back at the real questions
# (paths.hotpotqa_dir), written under <run>/real_test/. h_n100 / h_n250 capped their training questions
# with envs.length, which the evaluation resets (-1). m_qrag (MuSiQue in domain) is evaluated on MuSiQue.
# A run folder that is missing is skipped with a message; evaluation files resume by sample id.
# Env: PYTHON (default: .venv/bin/python if present, else python; scripts/python.sh); ONLY="h_noft m_qrag ..." evaluates only the runs named (several calls with
# different ONLY run side by side). Runs one after another on the visible GPU.
set -uo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 <runs dir> [key=value ...]" >&2
  exit 2
fi
RUNS="$1"; shift
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
. "$HERE/scripts/python.sh"
ev() {  # ev <run> <overrides...>
  local run="$1"; shift
  [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $run "* ]] && return 0
  [ -f "$RUNS/$run/config.yaml" ] || { echo "skip $run: no run folder $RUNS/$run" >&2; return 0; }
  "$PYTHON" "$HERE/eval_retriever.py" "pretrained_path=$RUNS/$run" num_samples=-1 progress_bar=false "$@" \
    || echo "FAILED $run $*" >&2
}
both() {  # greedy and Plan Q-RAG
  ev "$@"
  ev "$@" eval.planner=beam
}
for run in h_noft h_qrag_s1 h_qrag_s2; do
  both "$run" "$@"
  both "$run" eval_env=musique envs.max_steps=4 "output_dir=$RUNS/$run/ood_musique" "$@"
done
real_hotpotqa='++paths.hotpotqa_dir=${paths.root_dir}/data/hotpotqa'
both h_gen "$real_hotpotqa" "output_dir=$RUNS/h_gen/real_test" "$@"
both h_gen eval_env=musique envs.max_steps=4 '++paths.musique_dir=${paths.root_dir}/data/musique' \
  "output_dir=$RUNS/h_gen/ood_musique" "$@"
for run in h_n100 h_n250; do
  ev "$run" envs.length=-1 "$@"
done
both m_qrag "$@"
