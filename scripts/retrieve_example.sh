#!/usr/bin/env bash
# The worked example of the retriever tool (README, "A trained retriever as a tool"): train the
# offline demo retriever (skipped when $RUN already holds a model_best.pt), then ask the bAbI
# questions planted in chapter 1 of Persuasion (data/examples/, built by
# scripts/make_retrieve_example.py) and show what it picks at each of 3 steps.
#   bash scripts/retrieve_example.sh                 # trains into runs/retrieve_example_demo first
#   RUN=runs/<a demo run> bash scripts/retrieve_example.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
RUN="${RUN:-runs/retrieve_example_demo}"
if [ ! -f "$RUN/model_best.pt" ]; then
  "$PY" train_q_rag.py experiment=demo hydra.run.dir="$RUN"
fi
"$PY" retrieve.py run="$RUN" text=data/examples/persuasion_ch1_qa1.txt \
  questions=data/examples/persuasion_ch1_qa1.questions.jsonl steps=3 progress_bar=false
