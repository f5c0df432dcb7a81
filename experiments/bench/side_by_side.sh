#!/usr/bin/env bash
# Speed round 3 (docs/BENCH.md) on one lent GPU, in calls of at most 10 minutes on the same warm machine:
#   bash experiments/bench/side_by_side.sh setup     # wheels, code copies, data, models; the packed-encoder self-check
#   bash experiments/bench/side_by_side.sh ref       # the reference (authors' code, unchanged) and this tree on the
#                                             #   same card, data and random BERT-base: W1, W2, W3, whole program
#                                             #   (PEER_STEPS=40 training steps each; REF_PART=train|eval: two calls)
#   bash experiments/bench/side_by_side.sh oldnew    # OLD_TREE and this tree on the repository's data: W1-W4, W6
#   bash experiments/bench/side_by_side.sh train     # qa3 runs sharing the card (old, new, new under CUDA MPS; RUNS,
#                                             #   MPS_RUNS), one qa3 step of each tree alone, a kernel profile
#   bash experiments/bench/side_by_side.sh corpus    # the 1M-passage corpus-index demonstration
#   bash experiments/bench/side_by_side.sh floor     # this tree's GPU tests (-m cuda), then experiments/bench/encoder_floor.py:
#                                             #   what the card allows for W1's acting and W3/W4's encoder
#   bash experiments/bench/side_by_side.sh parity    # the qa3 recipe's learning curve, OLD_TREE and this tree, 2 seeds
#                                             #   each, all four runs sharing the card (PARITY_STEPS, default 400)
# Env: SKIP_CHECK=1 skips setup's packed-encoder self-check; OLD_BENCH=new (setup) gives the old tree this
# tree's bench.py; WORKLOADS (oldnew, default W1,W2,W3,W4) and W6=0 choose oldnew's workloads, PROFILE_W3=1
# adds a cProfile of W3, PROFILE_W1=1 one of W1, ORDER="new old" runs this tree first; ABLATE_SET="key=value" adds a W1 line of this tree with that override (oldnew).
# Every JSON line lands in $OUT/<call>.jsonl and names card, tree and workload; experiments/bench/bench_table.py turns
# them into BENCH.md's tables. Each call re-lays the working tree, so setup copies the code to /tmp/new (this
# tree) and /tmp/old (OLD_TREE, a `git archive` in .device/old_<commit>.tgz); later calls run those copies.
# Carried (gitignored, built on the CPU machine), at most 64 MiB a call with the tree (~30 MiB): setup carries
# .device/whl (wheels the machine lacks), .device/peer (the reference at b821cdc: `fetch` github:griver/Q-RAG,
# then `git archive b821cdc`), .device/tok (MiniLM's config and tokenizer), .device/old_<commit>.tgz and
# .device/ma; ref carries .device/mb, oldnew .device/mc (or both, when ref is not run; MiniLM's fp16 weights in
# three parts: `split -n 3 -d model.safetensors`), corpus .device/xwhl (the faiss-cpu wheel), floor
# .device/twhl (pytest and its pure-Python dependencies, installed when the machine lacks them). The timing harness is
# experiments/bench/peer_harness.
set -uo pipefail
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
OLD_TREE="${OLD_TREE:-ac6029a}"
NEW_TREE="${NEW_TREE:?the commit of this tree (git rev-parse --short HEAD on the CPU machine)}"
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:.  # then the tree a command runs in (its cwd)
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
CARD="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)"
TORCH="$(python3 -c 'import torch; print(torch.__version__)')"
PEER=/tmp/ref
# BENCH.md's W1 settings as the reference's keys, and its data and random BERT-base
REF_COMMON="algo.model.model_name=/tmp/contriever-random envs.facts_train_path=/tmp/peerdata/qa2_two-supporting-facts_train.txt envs.facts_test_path=/tmp/peerdata/qa2_two-supporting-facts_test.txt envs.train_dataset.noise_sentence_sampler.dataset._target_=peer_noise.load envs.test_dataset.noise_sentence_sampler.dataset._target_=peer_noise.load envs.noise_train_path=/tmp/peerdata envs.noise_test_path=/tmp/peerdata"
REF_TRAIN="batch_size=64 accumulate_grads=1 max_action_length=64 max_action_length_in_memory=64 feedback.ground_truth.penalize_extra_steps=True feedback.never_terminate=True envs_parallel=1 logger.log_dir=/tmp/runs"
# the same settings as this project's keys (scripts/bench.py's W1), for the whole training program
W1_KEYS="envs.task=qa2_two-supporting-facts envs.num_sentences=100 envs.max_steps=6 batch_size=64 accumulate_grads=1 max_action_length=64 max_action_length_in_memory=64 envs_parallel=1 envs.positions_processor=relative feedback.ground_truth.penalize_extra_steps=true feedback.ground_truth.never_terminate=true"

tag() {  # tag <tree label> [workload]: add the tree (and workload, card) to each JSON line of stdin
  python3 -c '
import json, sys
for line in sys.stdin:
    if not line.startswith("{"):
        print(line, end="", flush=True)
        continue
    x = {**json.loads(line), "tree": sys.argv[1]}
    if len(sys.argv) > 2:
        x = {"workload": sys.argv[2], "card": sys.argv[3], **x}
    print(json.dumps(x), flush=True)
' "$@"
}

bench() {  # bench <tree dir> <tree label> <call> <bench.py args...> (OLD_TREE's bench.py predates --tree)
  local dir="$1" label="$2" call="$3"; shift 3
  (cd "$dir" && timeout 420 python3 scripts/bench.py "$@") 2>> "$OUT/$call.log" | tag "$label" >> "$OUT/$call.jsonl"
  echo "$label bench $* rc=${PIPESTATUS[0]}"
}

program() {  # program <tree dir> <label> <call> <steps>: the whole training program, wall seconds per step
  local dir="$1" label="$2" call="$3" steps="$4" t0 t1
  t0=$(date +%s.%N)
  (cd "$dir" && timeout 300 python3 train_q_rag.py paths.data_root=/tmp/pdata algo.model.name=/tmp/contriever-random \
    $W1_KEYS steps_count="$steps" eval_interval=100000 eval_episodes=2 final_eval_episodes=0 logger.progress_bar=false \
    hydra.run.dir=/tmp/runs/program_"$label") >> "$OUT/$call.log" 2>&1
  local rc=$?
  t1=$(date +%s.%N)
  python3 - "$t0" "$t1" "$steps" "$label" "$CARD" "$TORCH" "$rc" >> "$OUT/$call.jsonl" <<'PYEOF'
import json, sys
t0, t1, steps = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
print(json.dumps({"workload": "train-program", "tree": sys.argv[4], "card": sys.argv[5], "torch": sys.argv[6],
                  "s_per_step_wall": (t1 - t0) / steps, "steps": steps, "total_s": t1 - t0, "rc": int(sys.argv[7])}))
PYEOF
  echo "$label program rc=$rc $(tail -n 1 "$OUT/$call.jsonl")"
}

wheels() {  # wheels <folder under .device>: install its wheels into /tmp/site (no index, no dependencies)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$SRC/.device/$1"/*.whl
}

case "$1" in
  setup)
    wheels whl || exit 1
    rm -rf /tmp/new /tmp/old && mkdir -p /tmp/new /tmp/minilm
    (cd "$SRC" && tar cf - --exclude=./.device --exclude=./runs --exclude=./.git --exclude=./docs .) | (cd /tmp/new && tar xf -)
    tar xzf "$SRC/.device/old_$OLD_TREE.tgz" -C /tmp   # -> /tmp/old
    # OLD_BENCH=new: the old tree runs this tree's scripts/bench.py (when the old one lacks an option used
    # here, e.g. --sync-debug; only where the two trees' APIs that bench.py calls are the same)
    [ "${OLD_BENCH:-old}" = new ] && cp /tmp/new/scripts/bench.py /tmp/old/scripts/bench.py
    cp -r "$SRC/.device/tok" /tmp/tok && cp /tmp/tok/* /tmp/minilm/ && cp "$SRC"/.device/ma/* /tmp/minilm/
    rm -rf "$PEER" && cp -r "$SRC/.device/peer/Q-RAG" "$PEER" && H="$SRC/experiments/bench/peer_harness" \
      && cp "$H/noise.py" "$PEER/peer_noise.py" && cp "$H"/timed_train.py "$H"/timed_eval.py "$PEER/" \
      && cp -r "$H/stubs" /tmp/peer_stubs
    python3 "$SRC/experiments/bench/peer_harness/make_data.py" /tmp/peerdata
    python3 "$SRC/experiments/bench/peer_harness/to_project_data.py" /tmp/peerdata /tmp/pdata
    python3 "$SRC/experiments/bench/peer_harness/make_random_bert.py" /tmp/tok /tmp/contriever-random 12 768
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader; nproc
    echo "torch $TORCH"
    # MiniLM's weights arrive in three calls: the self-check runs a random MiniLM-shaped BERT (weights don't
    # change whether the packed and padded paths agree, or their speed)
    python3 -c "from transformers import BertConfig, BertModel, AutoTokenizer; BertModel(BertConfig.from_pretrained('/tmp/tok')).save_pretrained('/tmp/minilm-random'); AutoTokenizer.from_pretrained('/tmp/tok').save_pretrained('/tmp/minilm-random')"
    [ "${SKIP_CHECK:-0}" = 1 ] && { echo "packed-encoder check skipped"; exit 0; }
    (cd /tmp/new && timeout 240 python3 experiments/bench/check_packed_encoder.py --minilm /tmp/minilm-random) > "$OUT/setup.jsonl" 2> "$OUT/setup.log"
    echo "packed-encoder check rc=$?"; cat "$OUT/setup.jsonl"; tail -n 5 "$OUT/setup.log" ;;
  ref)  # the reference and this tree, same card, data and model; REF_PART=train (W1, whole program) or eval
    # (W2, W3) splits it in two calls of the same workloads (all in one call passed 10 minutes on an H200)
    PART="${REF_PART:-all}"
    [ -d "$SRC/.device/mb" ] && cp "$SRC"/.device/mb/* /tmp/minilm/
    cd "$PEER"
    if [ "$PART" != eval ]; then
      PYTHONPATH=/tmp/site:/tmp/peer_stubs timeout 280 python3 timed_train.py "$OUT/peer_train.json" $REF_COMMON $REF_TRAIN \
        steps_count="${PEER_STEPS:-40}" eval_interval=100000 eval_episodes=2 > "$OUT/peer_train.log" 2>&1
      echo "reference train rc=$?"; grep -a TIMING "$OUT/peer_train.log"
    fi
    if [ "$PART" != train ]; then
      for N in 1200 40000; do  # the 40 000-sentence run builds its haystacks for minutes first
        PYTHONPATH=/tmp/site:/tmp/peer_stubs timeout $([ $N = 1200 ] && echo 120 || echo 330) python3 timed_eval.py "$OUT/peer_eval_$N.json" "$N" 3 \
          $REF_COMMON $REF_TRAIN > "$OUT/peer_eval_$N.log" 2>&1
        echo "reference eval $N rc=$?"; grep -a EVALTIMING "$OUT/peer_eval_$N.log" | cut -c1-200
      done
    fi
    cd /tmp/new
    python3 experiments/bench/bench_table.py peer "$OUT" --card "$CARD" --torch "$TORCH" >> "$OUT/ref.jsonl"
    if [ "$PART" != eval ]; then
      bench /tmp/new "$NEW_TREE" ref --workloads W1 --encoder /tmp/contriever-random --data-root /tmp/pdata \
        --iters 60 --warmup 10
      program /tmp/new "$NEW_TREE" ref "${PEER_STEPS:-40}"
    fi
    [ "$PART" != train ] && bench /tmp/new "$NEW_TREE" ref --workloads W2,W3 --encoder /tmp/contriever-random \
      --data-root /tmp/pdata --episodes 3
    python3 experiments/bench/bench_table.py table "$OUT/ref.jsonl" ;;
  oldnew)  # OLD_TREE and this tree on the repository's data, interleaved
    for part in mb mc; do [ -d "$SRC/.device/$part" ] && cp "$SRC/.device/$part"/* /tmp/minilm/; done
    # join MiniLM's weights only once all three parts are here (a partial join used to delete the parts)
    if [ -e /tmp/minilm/msplit.00 ] && [ -e /tmp/minilm/msplit.01 ] && [ -e /tmp/minilm/msplit.02 ]; then
      cat /tmp/minilm/msplit.0? > /tmp/minilm/model.safetensors && rm /tmp/minilm/msplit.0? && ls -la /tmp/minilm
    fi
    for tree in ${ORDER:-old new}; do  # ORDER="new old": this tree first
      label=$([ $tree = old ] && echo "$OLD_TREE" || echo "$NEW_TREE")
      bench /tmp/$tree "$label" oldnew --workloads "${WORKLOADS:-W1,W2,W3,W4}" --tokenizer /tmp/tok \
        --data-root /tmp/new/data --iters 40 --warmup 10 --episodes 3
    done
    [ -n "${ABLATE_SET:-}" ] && bench /tmp/new "$NEW_TREE" oldnew --workloads W1 --tokenizer /tmp/tok \
      --data-root /tmp/new/data --iters 40 --warmup 10 --set "$ABLATE_SET"
    [ "${W6:-1}" = 1 ] && bench /tmp/new "$NEW_TREE" oldnew --workloads W6 --tokenizer /tmp/tok --data-root /tmp/new/data
    if [ "${PROFILE_W3:-0}" = 1 ]; then  # where a W3 episode's host time goes (cProfile, profile.log)
      bench /tmp/new "$NEW_TREE+cprofile" profile --workloads W3 --tokenizer /tmp/tok --data-root /tmp/new/data \
        --episodes 2 --profile
      grep -a -A 30 "function calls" "$OUT/profile.log" | tail -n 32
    fi
    if [ "${PROFILE_W1:-0}" = 1 ]; then  # the same for a W1 iteration (profile_w1.log)
      (cd /tmp/new && timeout 300 python3 scripts/bench.py --workloads W1 --tokenizer /tmp/tok --data-root /tmp/new/data \
        --iters 15 --warmup 5 --profile) > /dev/null 2> "$OUT/profile_w1.log"
      grep -a -A 30 "function calls" "$OUT/profile_w1.log" | tail -n 32
    fi
    (cd /tmp/new && python3 experiments/bench/bench_table.py table "$OUT/oldnew.jsonl" --baseline "$OLD_TREE") ;;
  train)  # training throughput: runs sharing the card, per tree; one qa3 step alone; a kernel profile
    # Env: TRAIN_TREES (default "old new"), RUNS (runs per card for each tree, a comma list, default 4),
    # MPS_RUNS (the same for this tree under CUDA MPS, default 4; empty: no MPS), STEP_LINES (default 1: one
    # qa3 step of each tree alone, host-device syncs counted), PROFILE (default 1: a kernel profile of one step)
    QA3="experiment=offline_babilong_qa3 envs_parallel=16 algo.model.name=/tmp/minilm paths.data_root=/tmp/new/data"
    TREES="${TRAIN_TREES:-old new}"
    if [ "${STEP_LINES:-1}" = 1 ]; then
      for tree in $TREES; do
        label=$([ $tree = old ] && echo "$OLD_TREE" || echo "$NEW_TREE")
        bench /tmp/$tree "$label" train --workloads W1 --encoder /tmp/minilm --task qa3_three-supporting-facts \
          --data-root /tmp/new/data --iters 20 --warmup 5 --set envs_parallel=16 --sync-debug 3
      done
    fi
    concurrency() {  # concurrency <tree dir> <label> <runs list>
      local n; n=$(echo "$3" | tr ',' ' ' | wc -w)
      (cd "$1" && TREE="$2" STEPS="${TRAIN_STEPS:-150}" EVAL_EPISODES=4 OUT=/tmp/runs/conc_"${2//+/_}" PYTHON=python3 \
        CUDA_VISIBLE_DEVICES=0 timeout $((200 * n)) bash scripts/bench_concurrency.sh "$3" $QA3) 2>> "$OUT/train.log" \
        | tag "$2" train-concurrent "$CARD" >> "$OUT/train.jsonl"
      echo "$2 concurrency ($3 runs) rc=${PIPESTATUS[0]}"; tail -n "$n" "$OUT/train.jsonl" | cut -c1-400
    }
    for tree in $TREES; do
      concurrency /tmp/$tree "$([ $tree = old ] && echo "$OLD_TREE" || echo "$NEW_TREE")" "${RUNS:-4}"
    done
    # under CUDA's multi-process service (kernels of different processes may overlap; the card's settings are
    # untouched: a user-space daemon, stopped at the end)
    # MPS_TREES (default new): the trees run under MPS
    if [ -n "${MPS_RUNS-4}" ] && command -v nvidia-cuda-mps-control > /dev/null; then
      export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
      mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY" && nvidia-cuda-mps-control -d && echo "MPS on"
      for tree in ${MPS_TREES:-new}; do
        concurrency /tmp/$tree "$([ $tree = old ] && echo "$OLD_TREE" || echo "$NEW_TREE")+mps" "${MPS_RUNS-4}"
      done
      echo quit | nvidia-cuda-mps-control; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    else
      echo "MPS not run (MPS_RUNS empty or no nvidia-cuda-mps-control)"
    fi
    if [ "${PROFILE:-1}" = 1 ]; then
      bench /tmp/new "$NEW_TREE" train --workloads W1 --encoder /tmp/minilm --task qa3_three-supporting-facts \
        --data-root /tmp/new/data --iters 20 --warmup 5 --set envs_parallel=16 --torch-profile 5
      grep -a -A 40 "torch-profile" "$OUT/train.log" | head -n 45
      # where the host's time goes in one qa3 step (cProfile, by own and cumulative time; timing distorted)
      bench /tmp/new "$NEW_TREE+cprofile" profile --workloads W1 --encoder /tmp/minilm --task qa3_three-supporting-facts \
        --data-root /tmp/new/data --iters 10 --warmup 5 --set envs_parallel=16 --profile
    fi
    ;;
  floor)  # this tree's GPU tests, then the floors under W1 and W3/W4 (experiments/bench/encoder_floor.py)
    [ -d "$SRC/.device/twhl" ] && wheels twhl  # pytest, when the machine lacks it
    (cd /tmp/new && timeout 300 python3 -m pytest -q -m cuda tests/rl -p no:cacheprovider) \
      > "$OUT/gpu_tests.log" 2>&1
    echo "GPU tests rc=$?"; tail -n 5 "$OUT/gpu_tests.log"
    (cd /tmp/new && timeout 240 python3 experiments/bench/encoder_floor.py --tree "$NEW_TREE") 2>> "$OUT/floor.log" \
      | tag "$NEW_TREE" floor "$CARD" >> "$OUT/floor.jsonl"
    echo "floor rc=${PIPESTATUS[0]}"; cat "$OUT/floor.jsonl" | cut -c1-300; tail -n 3 "$OUT/floor.log" ;;
  corpus)  # the corpus index over 1M passages built from the shipped data (an untrained MiniLM Q-network)
    wheels xwhl || exit 1
    (cd /tmp/new && timeout 560 python3 scripts/corpus_index_demo.py --out /tmp/cidx --model /tmp/minilm \
      --n-passages 1000000 --questions 50 --device cuda --no-progress --time-limit 480) >> "$OUT/corpus.jsonl" 2>> "$OUT/corpus.log"
    echo "corpus index demo rc=$?"; tail -n 2 "$OUT/corpus.jsonl"; tail -n 5 "$OUT/corpus.log" ;;
  parity)  # the qa3 recipe's learning curve: OLD_TREE and this tree, seeds 1 and 2, four runs on the card at once
    QA3="experiment=offline_babilong_qa3 envs_parallel=16 algo.model.name=/tmp/minilm paths.data_root=/tmp/new/data"
    STEPS="${PARITY_STEPS:-400}"
    mkdir -p "$OUT/parity"
    for tree in old new; do
      label=$([ $tree = old ] && echo "$OLD_TREE" || echo "$NEW_TREE")
      for seed in 1 2; do
        (cd /tmp/$tree && CUDA_VISIBLE_DEVICES=0 timeout 560 python3 train_q_rag.py $QA3 seed=$seed steps_count="$STEPS" \
          eval_interval=50 eval_episodes=100 final_eval_episodes=0 logger.progress_bar=false \
          hydra.run.dir=/tmp/runs/parity_${tree}_s$seed > "$OUT/parity/${label}_s$seed.log" 2>&1; \
          echo "$label seed $seed rc=$?") &
      done
    done
    wait
    for tree in old new; do
      label=$([ $tree = old ] && echo "$OLD_TREE" || echo "$NEW_TREE")
      for seed in 1 2; do
        cp /tmp/runs/parity_${tree}_s$seed/metrics.jsonl "$OUT/parity/${label}_s$seed.metrics.jsonl"
        python3 -c "import json,sys; print(sys.argv[1], json.load(open(sys.argv[2]))['train_loop'])" "$label s$seed" \
          /tmp/runs/parity_${tree}_s$seed/summary.json
      done
    done ;;
  *) echo "usage: $0 setup|ref|oldnew|train|corpus|parity" >&2; exit 2 ;;
esac
