"""Write seeded, generated bAbI v1.2-format task files for qa1-qa5 (not the real bAbI data).

    python scripts/generate_babi.py --out data/babilong/babi-generated/en-10k --seed 0 --gzip

That command (the default --out) writes the shipped data/babilong/babi-generated/en-10k byte for
byte. The generator follows rules measured on the real files (docs/DATA_BABILONG.md; compare with
experiments/babi_fidelity/babi_fidelity.py). Files are named like the real en-10k ones ({task}_{split}.txt); with
--gzip they are written as {task}_{split}.txt.gz (deterministic bytes), which the loader reads.
Every file is re-checked by an independent simulation (envs.data.babi_generator.check_babi_lines)
before it is written.
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

from envs.data.babi_generator import GEN_TASKS, check_babi_lines, generate_task

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "data/babilong/babi-generated/en-10k")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tasks", nargs="+", default=list(GEN_TASKS), choices=list(GEN_TASKS))
    ap.add_argument("--train-questions", type=int, default=10_000)
    ap.add_argument("--test-questions", type=int, default=1_000)
    ap.add_argument("--gzip", action="store_true", help="write .txt.gz (deterministic bytes)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for key in args.tasks:
        for split, n in (("train", args.train_questions), ("test", args.test_questions)):
            lines = generate_task(key, n, args.seed, split)
            assert check_babi_lines(key, lines) == n
            text = "".join(line + "\n" for line in lines).encode("utf-8")
            path = args.out / f"{GEN_TASKS[key]}_{split}.txt"
            if args.gzip:
                path = path.with_name(path.name + ".gz")
                path.write_bytes(gzip.compress(text, compresslevel=9, mtime=0))
            else:
                path.write_bytes(text)
            print(f"{path}: {n} questions, {len(lines)} lines")


if __name__ == "__main__":
    main()
