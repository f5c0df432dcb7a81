"""Table 1's evaluation grid: every run × the eight NIAH subtasks × 4K..1M, spread over GPUs.

    python experiments/niah/niah_eval_grid.py runs/niah n_s1 n_s2 n_s3 n_noft --gpus 0,1,2,3 --per-gpu 4
    python experiments/niah/niah_eval_grid.py runs/niah n_s1 --lengths 4k --tasks niah_multiquery --dry-run

Each cell is one `eval_retriever.py` call: the run's best checkpoint, greedy at the run's fixed
budget T, seed 42, every sample of the test file (scripts/niah_testsets.py: 100 at every length; 30
at 1M up to round 5), written to ``<runs dir>/<run>/niah/<task>/eval_seed42_test<len>.jsonl`` (+ summary and meta)
with a ``.testset.json`` beside it naming the test file and its sha256. Q-value stopping is scored
from these records (experiments/niah/niah_report.py): stopping only truncates the greedy sequence, and every
step's max Q is logged (docs/EVALUATION.md), so no second pass is needed. The test files are checked
against their manifest first; a mismatch stops everything. Cells whose summary already covers the
file are skipped, and an interrupted cell resumes (eval_retriever.py resumes by sample). Longest
cells start first, ``--per-gpu`` at a time on each GPU; logs in ``<runs dir>/logs/niah_eval/``.
Extra ``key=value`` arguments go to every eval_retriever.py call.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from envs.data.common import content_sha256  # noqa: E402
from envs.data.niah_generator import TASKS  # noqa: E402

sys.path.insert(0, str(REPO / "scripts"))
import niah_testsets as testsets  # noqa: E402

SEED = 42


def cell_dir(runs: Path, run: str, task: str) -> Path:
    return runs / run / "niah" / task


def stem(length: str) -> str:
    return f"eval_seed{SEED}_test{length}"


def command(runs: Path, run: str, task: str, length: str, root: Path, extra: list[str]) -> list[str]:
    return [
        os.environ.get("PYTHON", sys.executable),
        str(REPO / "eval_retriever.py"),
        f"pretrained_path={runs / run}",
        f"++envs.data_path={root / task}",
        f"envs.task={task}",
        f"envs.test_split=test{length}",
        f"num_samples={testsets.SAMPLES[length]}",
        f"output_dir={cell_dir(runs, run, task)}",
        f"seed={SEED}",
        "progress_bar=false",
        *extra,
    ]


def done(runs: Path, run: str, task: str, length: str) -> bool:
    path = cell_dir(runs, run, task) / f"{stem(length)}.summary.json"
    return path.is_file() and json.loads(path.read_text()).get("n") == testsets.SAMPLES[length]


def write_testset(runs: Path, run: str, task: str, length: str, root: Path) -> None:
    test_file = root / task / f"test{length}.jsonl.gz"
    side = cell_dir(runs, run, task) / f"{stem(length)}.testset.json"
    side.write_text(
        json.dumps({"file": f"{task}/test{length}.jsonl.gz", "sha256": content_sha256(test_file)}, indent=1) + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs_dir", type=Path)
    ap.add_argument("runs", nargs="+", help="run folders under runs_dir; then key=value overrides for every eval")
    ap.add_argument("--root", type=Path, default=testsets.ROOT, help="test sets (scripts/niah_testsets.py)")
    ap.add_argument("--gpus", default="0", help="comma-separated GPU ids")
    ap.add_argument("--per-gpu", type=int, default=4, help="evaluations at a time on each GPU")
    ap.add_argument("--lengths", default=",".join(testsets.LENGTHS))
    ap.add_argument("--tasks", default="all")
    ap.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = ap.parse_intermixed_args(argv)  # overrides may follow the options
    runs = [r for r in args.runs if "=" not in r]
    extra = [r for r in args.runs if "=" in r]
    tasks = list(TASKS) if args.tasks == "all" else args.tasks.split(",")
    lengths = args.lengths.split(",")
    manifest = json.loads((args.root / "MANIFEST.json").read_text())
    bad, unrecorded = testsets.verify([(t, n) for n in lengths for t in tasks], args.root, manifest)
    if bad:
        print("\n".join(f"MISMATCH {line}" for line in bad), file=sys.stderr)
        return 1
    for line in unrecorded:
        print(f"UNRECORDED {line}")
    cells = [(r, t, n) for n in lengths for t in tasks for r in runs if not done(args.runs_dir, r, t, n)]
    cells.sort(key=lambda c: -testsets.LENGTHS[c[2]])
    if args.dry_run:
        for run, task, length in cells:
            print(" ".join(command(args.runs_dir, run, task, length, args.root, extra)))
        return 0
    logs = args.runs_dir / "logs" / "niah_eval"
    logs.mkdir(parents=True, exist_ok=True)
    slots = [g for g in args.gpus.split(",") for _ in range(args.per_gpu)]
    running: dict[str, tuple[subprocess.Popen, tuple[str, str, str]]] = {}
    failed = []
    t0 = time.time()
    while cells or running:
        for slot in [s for s in map(str, range(len(slots))) if s not in running]:
            if not cells:
                break
            run, task, length = cells.pop(0)
            cell_dir(args.runs_dir, run, task).mkdir(parents=True, exist_ok=True)
            env = {**os.environ, "CUDA_VISIBLE_DEVICES": slots[int(slot)]}
            log = open(logs / f"{run}_{task}_{length}.log", "w")
            cmd = command(args.runs_dir, run, task, length, args.root, extra)
            running[slot] = (subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), (run, task, length))
        time.sleep(2)
        for slot, (proc, cell) in list(running.items()):
            if proc.poll() is None:
                continue
            del running[slot]
            if proc.returncode == 0:
                write_testset(args.runs_dir, *cell, args.root)
            else:
                failed.append(cell)
            print(f"{time.time() - t0:6.0f}s {'ok' if proc.returncode == 0 else 'FAILED'} {' '.join(cell)}", flush=True)
    for cell in failed:
        print(f"FAILED {' '.join(cell)}: {logs / ('_'.join(cell) + '.log')}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
