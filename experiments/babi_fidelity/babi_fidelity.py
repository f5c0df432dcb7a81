"""Put generated bAbI qa1-qa5 files side by side with the real ones: one table of statistics per task.

    python experiments/babi_fidelity/babi_fidelity.py --out experiments/babi_fidelity/babi_fidelity.md

For every task it reads the real training file (``--real``, default the shipped real files
data/babilong/babi/en-10k) and the generated training file (``--generated``, default
data/babilong/babi-generated/en-10k; ``--seed N`` generates afresh instead), computes the
statistics of envs/data/babi_stats.py and writes a markdown table: real value, generated value,
the tolerance tests/data_babilong/test_babi_fidelity.py holds the generator to, and whether the
generated value is inside it. The real test file's value is shown too, as a measure of how much
two real files of the same task differ. Exits 1 when any statistic is out of tolerance.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from envs.data.babi_generator import GEN_TASKS, generate_task
from envs.data.babi_stats import STATS, compare, read_lines, story_stats

REPO = Path(__file__).resolve().parents[2]


def _file(root: Path, task: str, split: str) -> Path:
    name = f"{GEN_TASKS[task]}_{split}.txt"
    for path in (root / f"{name}.gz", root / name):
        if path.exists():
            return path
    sys.exit(f"no {root / name}[.gz]: pass --real/--generated, or --seed N to generate afresh")


def _fmt(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".") if x == x else "–"


def report(real_root: Path, gen_root: Path | None, seed: int | None, tasks: list[str]) -> tuple[str, bool]:
    out = ["# Generated bAbI qa1-qa5 against the real bAbI v1.2 en-10k files", ""]
    out += [
        "Written by `python experiments/babi_fidelity/babi_fidelity.py` (statistics: `envs/data/babi_stats.py`).",
        "*Real* is the real training file, *generated* the generated training file, *real test* the",
        "real test file (how far two real files of one task differ). Tolerances are absolute, or",
        "relative where a percentage is shown; count tables (question forms, answers, gold-fact kinds)",
        "are compared by total-variation distance (0 = same shares). Distances count statements",
        "back from the question (1 = the statement just before it).",
        "",
    ]
    all_ok = True
    for task in tasks:
        real_lines = read_lines(_file(real_root, task, "train"))
        real_test = story_stats(task, read_lines(_file(real_root, task, "test")), "real test")
        n_real = sum("\t" in ln for ln in real_lines)
        if seed is not None:
            gen_lines, src = generate_task(task, 10_000, seed, "train"), f"generated with seed {seed}"
        else:
            path = _file(gen_root, task, "train")
            gen_lines, src = read_lines(path), str(path.relative_to(REPO) if path.is_relative_to(REPO) else path)
        n_gen = sum("\t" in ln for ln in gen_lines)
        real, gen = story_stats(task, real_lines, "real"), story_stats(task, gen_lines, "generated")
        rows = compare(task, real, gen)
        test_rows = {r.name: r for r in compare(task, real, real_test)}
        all_ok &= all(r.ok for r in rows)
        out += [f"## {GEN_TASKS[task]}", "", f"{n_real} real questions; {n_gen} generated ({src}).", ""]
        out += ["| statistic | real | generated | tolerance | within | real test |", "|---|---|---|---|---|---|"]
        for r in rows:
            ok = "yes" if r.ok else "**no**"
            out.append(
                f"| {r.name} | {_fmt(r.real)} | {_fmt(r.generated)} | {r.tol} | {ok} | {_fmt(test_rows[r.name].generated)} |"
            )
        out.append("")
    return "\n".join(out), all_ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--real", type=Path, default=REPO / "data/babilong/babi/en-10k")
    ap.add_argument("--generated", type=Path, default=REPO / "data/babilong/babi-generated/en-10k")
    ap.add_argument("--seed", type=int, default=None, help="generate 10 000 questions per task instead of reading")
    ap.add_argument("--tasks", nargs="+", default=list(STATS), choices=list(STATS))
    ap.add_argument("--out", type=Path, default=None, help="write the markdown here (default: print it)")
    args = ap.parse_args()
    text, ok = report(args.real, args.generated, args.seed, args.tasks)
    if args.out:
        args.out.write_text(text)
        print(f"wrote {args.out}")
    else:
        print(text)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
