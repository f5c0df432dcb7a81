#!/usr/bin/env bash
# Run a command under CUDA's multi-process service (MPS), so that the kernels of several training runs
# sharing a GPU may overlap instead of taking turns (docs/DISTRIBUTED.md, "Sweeps"; docs/BENCH.md,
# "Round 5": 8 qa3 runs on one H200 made 30.1 aggregate optimiser steps/s with MPS, 17.5 without).
#
#   scripts/with_mps.sh python train_q_rag.py -m hydra/launcher=parallel jobs_per_gpu=8 seed=1,2,3,4,5,6,7,8 ...
#   scripts/with_mps.sh scripts/bench_concurrency.sh 4,8 experiment=offline_babilong_qa3 envs_parallel=16
#
# The daemon is the user-space `nvidia-cuda-mps-control -d` with its pipe and log folders in a private
# temporary folder (no setting of the card changes, other users' processes are not affected); it is
# stopped and the folder removed when the command ends, however it ends. Exits with the command's
# status; 2 when MPS is not available here (then run the command without this wrapper) or no private
# folder can be made under $TMPDIR.
set -uo pipefail
if [ $# -eq 0 ]; then
  echo "usage: scripts/with_mps.sh <command> [args...]" >&2
  exit 2
fi
if ! command -v nvidia-cuda-mps-control > /dev/null; then
  echo "with_mps.sh: nvidia-cuda-mps-control not found (it ships with the NVIDIA driver's utilities);" \
    "run the command without MPS" >&2
  exit 2
fi
# without the folder, the daemon's pipe and log would land at /pipe and /log
dir="$(mktemp -d "${TMPDIR:-/tmp}/qrag_mps.XXXXXX")" || {
  echo "with_mps.sh: cannot make a temporary folder under ${TMPDIR:-/tmp} (set TMPDIR to a writable folder)" >&2
  exit 2
}
export CUDA_MPS_PIPE_DIRECTORY="$dir/pipe" CUDA_MPS_LOG_DIRECTORY="$dir/log"
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
stop() {
  echo quit | nvidia-cuda-mps-control > /dev/null 2>&1
  rm -rf "$dir"
}
trap stop EXIT
if ! nvidia-cuda-mps-control -d; then
  echo "with_mps.sh: the MPS daemon did not start; its log:" >&2
  tail -n 20 "$CUDA_MPS_LOG_DIRECTORY"/* >&2 2> /dev/null
  exit 2
fi
echo "with_mps.sh: MPS on (pipe $CUDA_MPS_PIPE_DIRECTORY)" >&2
"$@"
