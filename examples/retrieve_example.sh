#!/usr/bin/env bash
# The worked example of the retriever tool (docs/RETRIEVER_TOOL.md, "Worked example"): train the
# offline demo retriever (skipped when $RUN already holds a model_best.pt), then ask the bAbI
# questions planted in chapter 1 of Persuasion (data/examples/, built by
# examples/make_retrieve_example.py) and show what it picks at each of 3 steps.
#   bash examples/retrieve_example.sh                # the newest finished demo run of runs/ (named on
#                                                    # stderr), else trains runs/retrieve_example_demo
#   RUN=runs/<a demo run> bash examples/retrieve_example.sh
# The interpreter: scripts/python.sh (the repository's .venv when there is one).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/python.sh"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ -z "${RUN:-}" ]; then
  RUN=runs/retrieve_example_demo
  # the quickstart's demo run, if it finished: newest first, by its .hydra/overrides.yaml
  for d in $(ls -1td runs/*/ 2>/dev/null); do
    if [ -f "$d/model_best.pt" ] && [ -f "$d/summary.json" ] && grep -qx -- "- experiment=demo" "$d/.hydra/overrides.yaml" 2>/dev/null; then
      RUN="${d%/}"
      echo "[retrieve_example] using the newest demo run $RUN (RUN=<run folder> picks another)" >&2
      break
    fi
  done
fi
if [ ! -f "$RUN/model_best.pt" ]; then
  "$PYTHON" train_q_rag.py experiment=demo hydra.run.dir="$RUN"
fi
"$PYTHON" retrieve.py run="$RUN" text=data/examples/persuasion_ch1_qa1.txt \
  questions=data/examples/persuasion_ch1_qa1.questions.jsonl steps=3 progress_bar=false
