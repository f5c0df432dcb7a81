#!/usr/bin/env bash
# Writes this round's plan files (experiments/table2b/README.md says what each asks):
#   bash experiments/table2b/make_plans.sh        # PYTHON as in scripts/python.sh; OUT (experiments/table2b)
# rows_*: Table 2's trained rows, curve_*: the learning curve over training-set size, noft_*: the
# untrained encoder (deterministic: one run). Round 5's recipe (experiments/table2/plan_train.txt) on the
# shipped training files, selected on their 100-question validation files; every best checkpoint on
# every test question (num_samples -1). Overrides holding ${...} are single-quoted: each evaluation
# chain is one `bash -c` line (scripts/launch_evals.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. scripts/python.sh
OUT="${OUT:-experiments/table2b}"  # a test writes them elsewhere and compares
COMMON="paths=embedded algo=minilm batch_size=64 accumulate_grads=1 algo.optimizer.lr=5e-5 algo.scheduler.warmup=100 eval_interval=50 eval_episodes=100 envs_parallel=16"
H="experiment=paper_hotpotqa steps_count=600"
BEAM="eval.planner=beam"
OOD="eval_env=musique envs.max_steps=4 'output_dir=\${pretrained_path}/ood_musique'"
REAL_H="'++paths.hotpotqa_dir=\${paths.root_dir}/data/hotpotqa' 'output_dir=\${pretrained_path}/real_test'"
REAL_M="eval_env=musique envs.max_steps=4 '++paths.musique_dir=\${paths.root_dir}/data/musique' 'output_dir=\${pretrained_path}/ood_musique'"
"$PYTHON" scripts/seed_plan.py "$OUT/rows" --gpus 2 --seeds 1-3 --samples -1 --common "$COMMON" \
  --note "Table 2b: Q-RAG on the real HotpotQA (733) and MuSiQue (573) training questions and on the generated HotpotQA stand-ins, 3 seeds each" \
  --setting hqrag "$H" \
  --setting hgen "$H paths=generated validation_fraction=0.2" \
  --setting mqrag "experiment=paper_musique steps_count=600" \
  --eval hqrag "" --eval hqrag "$BEAM" --eval hqrag "$OOD" --eval hqrag "$OOD $BEAM" \
  --eval hgen "$REAL_H" --eval hgen "$REAL_M" \
  --eval mqrag "" --eval mqrag "$BEAM"
"$PYTHON" scripts/seed_plan.py "$OUT/curve" --gpus 2 --seeds 1-3 --samples -1 --common "$COMMON" \
  --note "Table 2b: the learning curve over training-set size, 100 and 250 of the 733 real HotpotQA training questions (all: rows_train.txt's hqrag), 3 seeds each" \
  --setting hn100 "$H train_samples=100" \
  --setting hn250 "$H train_samples=250" \
  --eval hn100 "" --eval hn250 ""
"$PYTHON" scripts/seed_plan.py "$OUT/noft" --gpus 2 --seeds 1 --samples -1 --common "$COMMON" \
  --note "Table 2b: the untrained encoder (w/o FT), one run: no weight is drawn, so every seed gives the same records" \
  --setting hnoft "experiment=paper_hotpotqa steps_count=0" \
  --eval hnoft "" --eval hnoft "$BEAM" --eval hnoft "$OOD" --eval hnoft "$OOD $BEAM"
