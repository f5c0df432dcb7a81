"""Collect retriever-evaluation summaries into a task × context-length table and a plot.

    python scripts/collect_results.py runs/<run> [runs/<run2> ...] --out DIR [--by task|run]
        [--paper] [--split-mixed]

Reads every ``eval_seed*.summary.json`` written by eval_retriever.py in the given run folders
(or summary files given directly). A table cell averages only files whose evaluation settings
are identical apart from the seed and the checkpoint (a mean over seeds, or over the runs of a
seed sweep); a cell whose files differ in anything else (T, split, data, stopping, ...) is
refused, naming the files and the settings, unless ``--split-mixed`` gives each setting its own
row. Writes into ``--out`` (required: nothing lands in the current folder unasked):
* ``results_long.csv``: one row per summary (run, task, length, seed, planner, n, fact EM/F1, return);
* ``results.csv`` and ``results.md``: rows = task (or run, ``--by run``), columns = context length,
  cells = mean ± std over seeds of fact F1 and fact EM;
* ``results.png``: fact F1 and fact EM against context length (log x), one line per row;
  ``--paper`` overlays the paper's Table 3 QA3 Q-RAG fact F1 points (DESIGN §10.2).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# BabiLong context grid (DESIGN §7.12): num_sentences -> (label, ≈ tokens)
GRID = {
    50: ("1K", 1e3),
    160: ("4K", 4e3),
    1200: ("32K", 32e3),
    4600: ("128K", 128e3),
    40000: ("1M", 1e6),
    400000: ("10M", 1e7),
}
TOKENS_PER_SENTENCE = 20  # off-grid BabiLong sizes: rough token estimate for the x axis
# DESIGN §10.2, Table 3: BabiLong QA3 fact F1 (×100) of Q-RAG, mean over 3 seeds
PAPER_QA3_F1 = {"1K": 97.8, "4K": 97.4, "32K": 97.1, "128K": 96.8, "1M": 96.5}
UNITS = {"k": 1e3, "m": 1e6}
# Settings (an eval file's meta) that may differ within one cell: what a mean over seeds averages.
SEED_KEYS = ("seed", "checkpoint_hash")


def find_summaries(paths: Sequence[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_file() and p.name.endswith(".summary.json"):
            out.append(p)
        elif p.is_dir():
            out += sorted(p.glob("eval_seed*.summary.json"))
        else:
            raise SystemExit(f"{p}: neither a run folder nor a .summary.json file")
    return out


def length_of(settings: dict[str, Any]) -> tuple[str, float | None]:
    """(column label, ≈ context tokens for the x axis)."""
    sizing = settings.get("length") or {}
    if sizing.get("unit") == "tokens" and isinstance(sizing.get("num_tokens"), int):
        t = sizing["num_tokens"]  # BabiLong's official sizing: 1000 is "1K", 1000000 "1M"
        label = f"{t // 10**6}M" if t % 10**6 == 0 else f"{t // 1000}K" if t % 1000 == 0 else f"nt{t}"
        return label, float(t)
    n = settings.get("num_sentences")
    if settings.get("dataset") == "babilong" and isinstance(n, int):
        if n in GRID:
            return GRID[n]
        return f"ns{n}", float(n * TOKENS_PER_SENTENCE)
    name = str(settings.get("context_length") or settings.get("split") or "")
    m = re.search(r"(\d+)\s*([kKmM])", name)
    if m:
        return m.group(1) + m.group(2).upper(), float(m.group(1)) * UNITS[m.group(2).lower()]
    return name or "?", None


def row_of(path: Path) -> dict[str, Any]:
    s = json.loads(path.read_text(encoding="utf-8"))
    st = s.get("settings", {})
    label, tokens = length_of(st)
    variant = []
    if st.get("planner", "greedy") != "greedy":
        variant.append(f"beam{st.get('beam_width')}x{st.get('beam_expand')}")
    if st.get("stop_q_threshold") is not None:
        variant.append(f"qstop{st['stop_q_threshold']}")
    if st.get("checkpoint") == "model_last.pt":
        variant.append("last")
    if st.get("oracle_stop"):
        variant.append("oracle")
    return {
        "run": Path(s.get("run") or path.parent).name,
        "task": st.get("task", "?"),
        "dataset": st.get("dataset", "?"),
        "length": label,
        "x_tokens": tokens,
        "seed": st.get("seed"),
        "variant": "+".join(variant),
        "max_steps": s.get("max_steps"),
        "n": s.get("n"),
        "fact_em": s.get("fact_em"),
        "fact_f1": s.get("fact_f1"),
        "return": s.get("return"),
        "file": str(path),
        "settings": {k: v for k, v in st.items() if k not in SEED_KEYS},
    }


def _differing(rows: list[dict[str, Any]]) -> list[str]:
    keys = sorted({k for r in rows for k in r["settings"]})
    return [k for k in keys if len({json.dumps(r["settings"].get(k), sort_keys=True) for r in rows}) > 1]


def check_groups(rows: list[dict[str, Any]], by: str, split_mixed: bool) -> None:
    """Cells must average like with like. With ``split_mixed`` the settings that differ within a
    cell are appended to the row label (``[max_steps=2]``); otherwise a mixed cell is an error."""
    cells: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        cells[(r[by], r["variant"], r["length"])].append(r)
    for (name, variant, length), rs in cells.items():
        keys = _differing(rs)
        if not keys:
            continue
        if not split_mixed:
            lines = [f"{r['file']}: " + ", ".join(f"{k}={json.dumps(r['settings'].get(k))}" for k in keys) for r in rs]
            raise SystemExit(
                f"error: the cell {name} [{variant or 'default'}] at {length} would average evaluations with "
                f"different settings ({', '.join(keys)}):\n  " + "\n  ".join(lines) + "\nCollect them "
                "separately, or pass --split-mixed to give each setting its own row"
            )
        for r in rs:
            extra = ",".join(f"{k}={json.dumps(r['settings'].get(k))}" for k in keys)
            r["variant"] = "+".join(x for x in (r["variant"], extra) if x)


def _mean_std(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, sd


def pivot(rows: list[dict[str, Any]], by: str) -> tuple[list[str], list[str], dict[tuple[str, str], dict[str, Any]]]:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        key = r[by] + (f" [{r['variant']}]" if r["variant"] else "")
        groups[(key, r["length"])].append(r)
    xs = {r["length"]: r["x_tokens"] if r["x_tokens"] is not None else float("inf") for r in rows}
    cols = sorted(xs, key=lambda c: (xs[c], c))
    names = sorted({k for k, _ in groups})
    cells = {}
    for key, rs in groups.items():
        cell: dict[str, Any] = {"seeds": len(rs), "x_tokens": rs[0]["x_tokens"]}
        for metric in ("fact_f1", "fact_em"):
            vals = [r[metric] for r in rs if r[metric] is not None]
            cell[metric] = _mean_std(vals) if vals else None
        cells[key] = cell
    return names, cols, cells


def _fmt(ms: tuple[float, float] | None, seeds: int) -> str:
    if ms is None:
        return "–"
    return f"{ms[0]:.3f} ± {ms[1]:.3f}" if seeds > 1 else f"{ms[0]:.3f}"


def write_tables(rows: list[dict[str, Any]], by: str, out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    long_path = out / "results_long.csv"
    fields = [k for k in rows[0] if k != "settings"]
    with open(long_path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    names, cols, cells = pivot(rows, by)
    wide_path, md_path = out / "results.csv", out / "results.md"
    with open(wide_path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow([by, "metric", *cols])
        for name in names:
            for metric in ("fact_f1", "fact_em"):
                row = [name, metric]
                for c in cols:
                    cell = cells.get((name, c))
                    row.append("" if not cell or cell[metric] is None else f"{cell[metric][0]:.4f}")
                w.writerow(row)
    lines = ["# Retriever evaluation", ""]
    for metric, title in (("fact_f1", "Fact F1"), ("fact_em", "Fact EM")):
        lines += [
            f"## {title} (mean ± std over seeds)",
            "",
            "| " + " | ".join([by, *cols]) + " |",
            "|" + "---|" * (len(cols) + 1),
        ]
        for name in names:
            vals = []
            for c in cols:
                cell = cells.get((name, c))
                vals.append(_fmt(cell[metric], cell["seeds"]) if cell else "")
            lines.append("| " + " | ".join([name, *vals]) + " |")
        lines.append("")
    md_path.write_text("\n".join(lines), encoding="utf-8")
    return {"long": long_path, "csv": wide_path, "md": md_path}


def plot(rows: list[dict[str, Any]], by: str, out: Path, paper: bool) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, cols, cells = pivot(rows, by)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, metric, title in ((axes[0], "fact_f1", "Fact F1"), (axes[1], "fact_em", "Fact EM")):
        for name in names:
            pts = sorted(
                (cells[(name, c)]["x_tokens"], cells[(name, c)][metric])
                for c in cols
                if (name, c) in cells
                and cells[(name, c)][metric] is not None
                and cells[(name, c)]["x_tokens"] is not None
            )
            if pts:
                ax.errorbar(
                    [p[0] for p in pts],
                    [p[1][0] for p in pts],
                    yerr=[p[1][1] for p in pts],
                    marker="o",
                    capsize=3,
                    label=name,
                )
        if paper and metric == "fact_f1":
            px = [GRID[n][1] for n in GRID if GRID[n][0] in PAPER_QA3_F1]
            py = [PAPER_QA3_F1[GRID[n][0]] / 100 for n in GRID if GRID[n][0] in PAPER_QA3_F1]
            ax.scatter(px, py, marker="*", s=120, color="black", zorder=5, label="paper Q-RAG QA3 (Table 3)")
        ax.set_xscale("log")
        ax.set_xlabel("context length (≈ tokens)")
        ax.set_ylabel(title)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "results.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path, help="run folders or .summary.json files")
    ap.add_argument("--out", type=Path, required=True, help="output folder for the tables and the plot")
    ap.add_argument("--by", choices=("task", "run"), default="task", help="one table row / plot line per task or run")
    ap.add_argument("--paper", action="store_true", help="overlay the paper's Table 3 QA3 fact F1 points")
    ap.add_argument("--no-plot", action="store_true", help="tables only")
    ap.add_argument(
        "--split-mixed",
        action="store_true",
        help="a cell whose files differ in settings other than the seed: one row per setting instead of an error",
    )
    args = ap.parse_args(argv)
    summaries = find_summaries(args.paths)
    if not summaries:
        raise SystemExit("no eval_seed*.summary.json found in " + ", ".join(map(str, args.paths)))
    rows = [row_of(p) for p in summaries]
    check_groups(rows, args.by, args.split_mixed)
    files = write_tables(rows, args.by, args.out)
    if not args.no_plot:
        files["png"] = plot(rows, args.by, args.out, args.paper)
    print(Path(files["md"]).read_text(encoding="utf-8"))
    print("wrote " + ", ".join(str(p) for p in files.values()))
    return {
        "rows": [{k: v for k, v in r.items() if k != "settings"} for r in rows],
        **{k: str(v) for k, v in files.items()},
    }


if __name__ == "__main__":
    main(sys.argv[1:])
