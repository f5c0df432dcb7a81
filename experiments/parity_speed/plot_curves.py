"""Overlay the learning curves of several training runs (e.g. a speed switch on vs off, same seeds).

    python experiments/parity_speed/plot_curves.py --run "switches on=RUN_A" --run "switches off=RUN_B" [--run LABEL=DIR ...]
        --metrics return,fact_em --out experiments/parity_speed/parity_speed_switches.png [--table parity.md]

Reads ``DIR/metrics.jsonl`` as rl/run/train.py writes it: one line per in-training evaluation, with
``step`` (optimiser steps, the x axis) and ``eval/return``, ``eval/fact_em``, ``eval/fact_f1`` (plus
``lr``/``alpha`` after step 0). A metric name M reads key M if the file has it, else ``eval/M``.
Runs sharing a label (seeds) are averaged per step; the plot shades their min-max. The table lists,
per metric and per step present in every run, each label's value and |first label - second label|.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: runs on training machines without a display
import matplotlib.pyplot as plt  # noqa: E402


def read_run(run_dir: Path, metrics: Sequence[str]) -> dict[str, dict[int, float]]:
    """metric -> {step: value} for one run folder; fails naming the file and its keys if one is missing."""
    path = run_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    keys = sorted({k for r in rows for k in r})
    out: dict[str, dict[int, float]] = {}
    for m in metrics:
        key = m if m in keys else f"eval/{m}"
        if key not in keys:
            raise SystemExit(f"{path}: no metric {m!r} (looked for keys {m!r} and 'eval/{m}'); keys present: {keys}")
        # keyed by step so a resumed run that re-logs a step keeps its latest value only
        out[m] = {int(r["step"]): float(r[key]) for r in rows if key in r}
    return out


def aggregate(runs: list[dict[str, dict[int, float]]], metric: str, steps: list[int]):
    """Mean, min and max over the runs of one label at each step."""
    vals = [[run[metric][s] for run in runs] for s in steps]
    return [sum(v) / len(v) for v in vals], [min(v) for v in vals], [max(v) for v in vals]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--run",
        action="append",
        required=True,
        metavar="LABEL=DIR",
        help="a run folder with metrics.jsonl; repeat a label to average seeds",
    )
    p.add_argument("--metrics", default="return,fact_em", help="comma-separated, e.g. return,fact_em,fact_f1")
    p.add_argument("--out", required=True, type=Path, help="png to write")
    p.add_argument("--table", type=Path, help="also write the comparison table here as markdown")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, tuple[float, float]]:
    """Plot and print the table; returns metric -> (max |diff|, mean |diff|) of the first two labels."""
    args = parse_args(argv)
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    by_label: dict[str, list[dict[str, dict[int, float]]]] = {}  # insertion order = --run order
    for spec in args.run:
        label, sep, run_dir = spec.partition("=")
        if not sep or not label or not run_dir:
            raise SystemExit(f"--run expects LABEL=DIR, got {spec!r}")
        by_label.setdefault(label, []).append(read_run(Path(run_dir), metrics))
    labels = list(by_label)

    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 3.8), squeeze=False)
    lines, stats = [], {}
    for ax, m in zip(axes[0], metrics):
        for label, runs in by_label.items():
            # per label, only steps every seed reached, so the mean never mixes different seed sets
            steps = sorted(set.intersection(*(set(r[m]) for r in runs)))
            mean, lo, hi = aggregate(runs, m, steps)
            ax.plot(steps, mean, marker=".", label=f"{label} (n={len(runs)})")
            if len(runs) > 1:
                ax.fill_between(steps, lo, hi, alpha=0.2)
        ax.set(title=m, xlabel="optimiser step", ylabel=m)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)

        # table over steps present in all runs of all labels: the only fair point-by-point comparison
        common = sorted(set.intersection(*(set(r[m]) for runs in by_label.values() for r in runs)))
        means = {label: aggregate(runs, m, common)[0] for label, runs in by_label.items()}
        diff = len(labels) >= 2
        head = labels + ([f"abs diff ({labels[0]} vs {labels[1]})"] if diff else [])
        lines += [f"### {m}", "", "| step | " + " | ".join(head) + " |", "|---:" * (len(head) + 1) + "|"]
        diffs = []
        for i, s in enumerate(common):
            cells = [means[label][i] for label in labels]
            if diff:
                diffs.append(abs(cells[0] - cells[1]))
                cells.append(diffs[-1])
            lines.append(f"| {s} | " + " | ".join(f"{c:.4f}" for c in cells) + " |")
        if diffs:
            stats[m] = (max(diffs), sum(diffs) / len(diffs))
            lines += ["", f"max abs diff: {stats[m][0]:.4f}, mean abs diff: {stats[m][1]:.4f} over {len(diffs)} steps"]
        lines.append("")

    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    plt.close(fig)
    table = "\n".join(lines)
    print(table)
    if args.table:
        args.table.parent.mkdir(parents=True, exist_ok=True)
        args.table.write_text(table, encoding="utf-8")
    return stats


if __name__ == "__main__":
    main(sys.argv[1:])
