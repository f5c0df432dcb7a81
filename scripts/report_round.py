"""Tables and plots of a GPU round (docs/RESULTS.md) from its run folders.

    python scripts/report_round.py docs/results/round2/runs --out docs/results/round2

Reads each run's ``metrics.jsonl`` (in-training validation curve) and its evaluation records
``eval_seed*_ns<N>.jsonl`` (or ``.jsonl.gz``) and writes into ``--out``:

* ``sweep.md`` / ``sweep.png``: validation fact EM against optimiser steps for the runs named
  ``s_*`` (one knob changed each) and ``t_*`` (Table 3 seeds);
* ``lengths.md`` / ``lengths.png``: fact EM / fact F1 of the ``f_qa*`` runs (and the qa3 run given
  by ``--qa3``) against the measured encoder tokens of the haystacks, fixed budget and oracle
  stopping, the paper's Table 3 QA3 points beside ours;
* ``table3.md`` / ``table3.png``: Table 3 on qa3 (Q-RAG, w/o Soft-Q, w/o Target, SFT, w/o FT), fact
  F1 × 100 as mean ± population std over seeds with the per-seed values, fixed budget and oracle
  stopping, at every evaluated length;
* ``qa3_decoys.md``: qa3 fact EM split by whether the question has a *decoy pick-up* (a later pick-up
  of the asked object than the one in its supporting facts), with the decoy share of the test file
  (``--babi`` names it; default: the shipped qa3 test file).

Oracle stopping (the paper's protocol; the reference's test environments stop once every gold chunk
is held) is computed from the fixed-budget records: greedy evaluation is deterministic, so the
oracle-stopped episode is the prefix of the fixed-budget one that ends at the step where the last gold
chunk was taken. ``eval_*_oracle.jsonl`` files written with ``+legacy.oracle_stop=true`` are read as a
check of that rule (``oracle_check`` in the printed summary).
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from prompts_and_metrics.metrics import fact_metrics

ROOT = Path(__file__).resolve().parents[1]

# Paper Table 3 (QA3 fact F1 x100, oracle stopping) at the BabiLong grid's nominal lengths.
PAPER_T3 = {
    "Q-RAG": [97.8, 97.4, 97.1, 96.8, 96.5],
    "w/o Soft-Q": [95.9, 95.5, 94.5, 94.0, 93.3],
    "w/o Target": [79.2, 78.1, 77.6, 77.4, 75.9],
    "SFT": [20.33, 20.87, 20.10, 18.30, None],
    "w/o FT": [15.52, 16.38, 15.51, 15.34, None],
}
GRID = {50: "1K", 160: "4K", 1200: "32K", 4600: "128K", 40000: "1M", 400000: "10M"}
PAPER_TOKENS = {"1K": 1e3, "4K": 4e3, "32K": 32e3, "128K": 128e3, "1M": 1e6}
METHODS = {"t_qrag": "Q-RAG", "t_nosoftq": "w/o Soft-Q", "t_notarget": "w/o Target", "t_sft": "SFT", "t_noft": "w/o FT"}


def oracle_prefix(pred_idx: Sequence[int], sf_idx: Iterable[int]) -> list[int]:
    """The retrieved chunks up to and including the step that completes the gold set (all of them
    when the gold set is never completed): what an oracle-stopped greedy episode returns."""
    gold, held = set(sf_idx), set()
    for t, a in enumerate(pred_idx):
        held.add(a)
        if gold and gold <= held:
            return list(pred_idx[: t + 1])
    return list(pred_idx)


@functools.cache  # each file is read by several tables
def read_jsonl(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def eval_files(run: Path) -> dict[tuple[int, bool], Path]:
    """{(num_sentences, oracle file?): path} for one run folder."""
    out: dict[tuple[int, bool], Path] = {}
    for p in sorted(run.glob("eval_seed*_ns*.jsonl*")):
        if not p.name.endswith((".jsonl", ".jsonl.gz")):  # .meta.json sidecars
            continue
        stem = p.name.split(".jsonl")[0]
        ns = stem.split("_ns")[1]
        oracle = ns.endswith("_oracle")
        out[(int(ns.removesuffix("_oracle")), oracle)] = p
    return out


def score_file(path: Path, limit: int | None = None) -> dict[str, float]:
    """Metrics of one evaluation file; ``limit`` keeps the samples with index < limit (the same
    test samples in every file of one length and seed)."""
    recs = read_jsonl(path)
    if limit is not None:
        recs = [r for r in recs if int(r["index"]) < limit]
    em, f1, of1, tok = [], [], [], []
    for r in recs:
        fixed = fact_metrics(r["pred_idx"], r["sf_idx"])
        em.append(fixed["em"])
        f1.append(fixed["f1"])
        of1.append(fact_metrics(oracle_prefix(r["pred_idx"], r["sf_idx"]), r["sf_idx"])["f1"])
        tok.append(r["text_len"])
    return {
        "n": len(recs),
        "fact_em": statistics.fmean(em),
        "fact_f1": statistics.fmean(f1),
        "oracle_f1": statistics.fmean(of1),
        "tokens": statistics.fmean(tok),
    }


def curve(run: Path) -> list[tuple[int, float]]:
    rows = read_jsonl(run / "metrics.jsonl")
    return [(int(r["step"]), float(r["eval/fact_em"])) for r in rows]


def mean_std(xs: list[float]) -> str:
    if len(xs) == 1:
        return f"{xs[0]:.1f}"
    return f"{statistics.fmean(xs):.1f} ± {statistics.pstdev(xs):.1f}"


# -- sections ----------------------------------------------------------------------------------
def sweep_section(runs: dict[str, Path], out: Path) -> list[str]:
    names = [n for n in runs if n.startswith(("s_", "t_")) and (runs[n] / "metrics.jsonl").exists()]
    lines = [
        "| run | steps reached | validation fact EM, best | mean of the last 3 evaluations | curve (every 100 steps) |",
        "|---|---|---|---|---|",
    ]
    curves = {n: curve(runs[n]) for n in names}
    for n in names:
        c = curves[n]
        last3 = [em for _, em in c[-3:]]
        lines.append(
            f"| {n} | {c[-1][0]} | {max(em for _, em in c):.2f} | {statistics.fmean(last3):.2f} | "
            + " ".join(f"{em:.2f}" for _, em in c)
            + " |"
        )
    (out / "sweep.md").write_text("\n".join(lines) + "\n")
    _plot_sweep(curves, out / "sweep.png")
    return lines


def _plot_sweep(curves: dict[str, list[tuple[int, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
    knobs = [n for n in curves if n.startswith("s_")]
    cmap = plt.get_cmap("tab20")
    for i, n in enumerate(knobs):
        c = curves[n]
        axes[0].plot([s for s, _ in c], [em for _, em in c], marker=".", color=cmap(i % 20), label=n)
    # Table 3 panel: one colour per method, seeds as separate lines (s_D is Q-RAG seed 1)
    for n, c in curves.items():
        method = "t_qrag" if n == "s_D" else next((m for m in METHODS if n.startswith(m)), None)
        if method is None:
            continue
        k = list(METHODS).index(method)
        axes[1].plot(
            [s for s, _ in c],
            [em for _, em in c],
            marker=".",
            color=f"C{k}",
            label=METHODS[method] if n in ("s_D", f"{method}_s1", "t_noft") else None,
        )
    for ax, title in (
        (axes[0], "qa3: one knob changed from the reference settings (seed 1)"),
        (axes[1], "qa3: Table 3 methods, seeds 1-3 (one line per seed)"),
    ):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("optimiser step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    axes[0].set_ylabel("validation fact EM (100 samples, T of the run)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def lengths_section(runs: dict[str, Path], qa3: str, out: Path) -> tuple[list[str], list[tuple[str, Path, Path]]]:
    tasks = {n.removeprefix("f_"): runs[n] for n in sorted(runs) if n.startswith("f_qa")}
    if qa3 in runs:
        tasks["qa3"] = runs[qa3]
    tasks = dict(sorted(tasks.items()))
    table: dict[str, dict[int, dict[str, float]]] = {}
    checks = []
    for task, run in tasks.items():
        files = eval_files(run)
        table[task] = {ns: score_file(p) for (ns, oracle), p in files.items() if not oracle}
        checks += [
            (task, files[(ns, False)], p) for (ns, oracle), p in files.items() if oracle and (ns, False) in files
        ]
    cols = sorted({ns for t in table.values() for ns in t})
    head = "| task | metric | " + " | ".join(f"{GRID.get(ns, ns)} ({ns} sent.)" for ns in cols) + " |"
    lines = [head, "|---|---|" + "---|" * len(cols)]
    for task, row in table.items():
        for key, label in (
            ("tokens", "measured tokens"),
            ("n", "samples"),
            ("fact_em", "fact EM"),
            ("fact_f1", "fact F1 (T fixed)"),
            ("oracle_f1", "fact F1 (oracle stop)"),
        ):
            cells = []
            for ns in cols:
                v = row.get(ns, {}).get(key)
                cells.append(
                    "–"
                    if v is None
                    else (
                        f"{v / 1e3:.1f}K"
                        if key == "tokens" and v < 1e6
                        else f"{v / 1e6:.2f}M"
                        if key == "tokens"
                        else f"{int(v)}"
                        if key == "n"
                        else f"{v:.3f}"
                    )
                )
            lines.append(f"| {task} | {label} | " + " | ".join(cells) + " |")
    (out / "lengths.md").write_text("\n".join(lines) + "\n")
    _plot_lengths(table, out / "lengths.png")
    return lines, checks


def _plot_lengths(table: dict[str, dict[int, dict[str, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for task, row in table.items():
        ns = sorted(row)
        x = [row[n]["tokens"] for n in ns]
        axes[0].plot(x, [row[n]["fact_em"] for n in ns], marker="o", label=task)
        axes[1].plot(x, [row[n]["oracle_f1"] for n in ns], marker="o", label=task)
    px = list(PAPER_TOKENS.values())
    axes[1].plot(px, [v / 100 for v in PAPER_T3["Q-RAG"]], "k--", marker="x", label="paper qa3 (contriever)")
    for ax, title in ((axes[0], "fact EM, fixed budget T = 6"), (axes[1], "fact F1, oracle stopping")):
        ax.set_xscale("log")
        ax.set_xlabel("haystack length, measured MiniLM tokens")
        ax.set_ylim(0, 1.02)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table3_section(runs: dict[str, Path], qrag_seed1: str, out: Path) -> list[str]:
    groups: dict[str, list[Path]] = defaultdict(list)
    if qrag_seed1 in runs:
        groups["Q-RAG"].append(runs[qrag_seed1])
    for n, run in sorted(runs.items()):
        for prefix, method in METHODS.items():
            if (n == prefix or n.startswith(prefix + "_s")) and run not in groups[method]:
                groups[method].append(run)
    files: dict[str, dict[int, list[Path]]] = {}
    for method in METHODS.values():
        files[method] = defaultdict(list)
        for run in groups.get(method, []):
            for (ns, oracle), p in eval_files(run).items():
                if not oracle and ns in GRID:
                    files[method][ns].append(p)
    # lengths evaluated for every method that has runs (a partial round may lack some methods);
    # each cell on the samples that every run there holds
    present = [set(f) for f in files.values() if f]
    cols = sorted(set.intersection(*present)) if present else []
    scores: dict[str, dict[int, list[dict[str, float]]]] = {m: {} for m in files}
    for ns in cols:
        common = min(len(read_jsonl(p)) for f in files.values() for p in f[ns])
        for method, f in files.items():
            scores[method][ns] = [score_file(p, limit=common) for p in f[ns]]
    lines = []
    for key, title in (
        ("oracle_f1", "fact F1 × 100, oracle stopping (the paper's protocol)"),
        ("fact_f1", "fact F1 × 100, fixed budget T = 6"),
        ("fact_em", "fact EM × 100, fixed budget"),
    ):
        lines += [
            f"**{title}**",
            "",
            "| method | "
            + " | ".join(f"{GRID[ns]} (n per seed)" for ns in cols)
            + " | paper (1K / 32K / 1M, oracle F1) |",
            "|---|" + "---|" * (len(cols) + 1),
        ]
        for method, per_len in scores.items():
            cells = []
            for ns in cols:
                xs = [100 * s[key] for s in per_len.get(ns, [])]
                seeds = ", ".join(f"{x:.1f}" for x in xs)
                n = per_len[ns][0]["n"] if xs else 0
                cells.append(f"{mean_std(xs)} [{seeds}] ({n})" if xs else "–")
            paper = PAPER_T3[method]
            ptxt = " / ".join("–" if paper[i] is None else f"{paper[i]}" for i in (0, 2, 4))
            lines.append(f"| {method} | " + " | ".join(cells) + f" | {ptxt} |")
        lines.append("")
    (out / "table3.md").write_text("\n".join(lines) + "\n")
    _plot_table3(scores, cols, out / "table3.png")
    return lines


def _plot_table3(scores: dict[str, dict[int, list[dict[str, float]]]], cols: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(12, 4.5))
    width = 0.8 / max(1, len(scores))
    for i, (method, per_len) in enumerate(scores.items()):
        for j, ns in enumerate(cols):
            xs = [100 * s["oracle_f1"] for s in per_len.get(ns, [])]
            if not xs:
                continue
            x = j + i * width
            ax.bar(x, statistics.fmean(xs), width, color=f"C{i}", label=method if j == 0 else None, alpha=0.8)
            ax.scatter([x] * len(xs), xs, color="k", s=10, zorder=3)
            paper = PAPER_T3[method][list(GRID).index(ns)] if ns in list(GRID)[:5] else None
            if paper is not None:
                ax.scatter(
                    [x],
                    [paper],
                    marker="_",
                    s=200,
                    color=f"C{i}",
                    zorder=3,
                    label="paper (contriever), same colour" if (i, j) == (0, 0) else None,
                )
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cols))], [GRID[ns] for ns in cols])
    ax.set_ylabel("qa3 fact F1 × 100, oracle stopping")
    ax.set_title("Table 3 on qa3 (MiniLM, embedded data): bars = seed mean, dots = seeds, dashes = paper", fontsize=10)
    ax.set_ylim(0, 100)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


PICK_UP = re.compile(r"\b(got|grabbed|picked up|took) the (\w+)")


def has_decoy(smp: Any) -> bool:
    """A bAbI qa3 sample whose asked object is picked up again, later in the story than the pick-up
    among its supporting facts (the object's last move, which the question asks about, came before)."""
    obj = re.search(r"the (\w+) before", smp.question).group(1)
    picks = [i for i, f in enumerate(smp.facts) if (m := PICK_UP.search(f)) and m.group(2) == obj]
    gold = [i for i in smp.references_idx if PICK_UP.search(smp.facts[i])]
    return bool(gold) and max(picks) > gold[0]


def decoy_flags(samples: Sequence[Any]) -> dict[tuple[str, str, tuple[str, ...]], bool]:
    """{(question, answer, sorted supporting sentences): has a decoy pick-up}, the key an evaluation
    record can be matched by; keys that occur with both flags are left out (ambiguous)."""
    flags: dict[tuple[str, str, tuple[str, ...]], set[bool]] = defaultdict(set)
    for smp in samples:
        key = (smp.question.strip(), smp.answer, tuple(sorted(smp.facts[i] for i in smp.references_idx)))
        flags[key].add(has_decoy(smp))
    return {k: v.pop() for k, v in flags.items() if len(v) == 1}


def decoy_section(runs: dict[str, Path], babi: Path, out: Path) -> list[str]:
    from envs.data.babi import load_babi_file

    samples = load_babi_file(babi)
    flags = decoy_flags(samples)
    n_decoy = sum(has_decoy(smp) for smp in samples)
    lines = [
        f"qa3 test file `{babi.name}`: {n_decoy} of {len(samples)} questions ({100 * n_decoy / len(samples):.0f} %) "
        "have a decoy pick-up. Records are matched to questions by (question, answer, supporting "
        "sentences); `unmatched` = records whose key is ambiguous in the file.",
        "",
        "| run | length | fact EM, no decoy (n) | fact EM, decoy (n) | unmatched |",
        "|---|---|---|---|---|",
    ]
    qa3_runs = [n for n in runs if n == "s_D" or n.startswith(tuple(METHODS))]
    for name in qa3_runs:
        for (ns, oracle), path in sorted(eval_files(runs[name]).items()):
            if oracle or ns not in (50, 1200):
                continue
            split: dict[object, list[float]] = defaultdict(list)
            for r in read_jsonl(path):
                key = (r["question"].strip(), r["answer"], tuple(sorted(r["sf_texts"])))
                split[flags.get(key)].append(fact_metrics(r["pred_idx"], r["sf_idx"])["em"])
            cell = lambda xs: f"{statistics.fmean(xs):.2f} ({len(xs)})" if xs else "–"  # noqa: E731
            lines.append(f"| {name} | {GRID[ns]} | {cell(split[False])} | {cell(split[True])} | {len(split[None])} |")
    (out / "qa3_decoys.md").write_text("\n".join(lines) + "\n")
    return lines


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, help="folder holding the round's run folders")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--qa3", default="s_D", help="run used as the qa3 retriever and as Q-RAG seed 1")
    ap.add_argument(
        "--babi",
        type=Path,
        help="bAbI qa3 test file for the decoy analysis (default: the shipped one)",
        default=ROOT / "data" / "babilong" / "babi" / "en-10k" / "qa3_three-supporting-facts_test.txt.gz",
    )
    args = ap.parse_args(argv)
    runs = {p.name: p for p in sorted(args.runs.iterdir()) if p.is_dir()}
    if not runs:
        raise SystemExit(f"error: no run folders in {args.runs}")
    args.out.mkdir(parents=True, exist_ok=True)
    sweep = sweep_section(runs, args.out)
    lengths, checks = lengths_section(runs, args.qa3, args.out)
    t3 = table3_section(runs, args.qa3, args.out)
    decoys = decoy_section(runs, args.babi, args.out) if args.babi.exists() else []
    oracle_check = []
    for task, fixed, oracle in checks:
        mine, real = score_file(fixed)["oracle_f1"], score_file(oracle)["fact_f1"]
        oracle_check.append({"task": task, "file": oracle.name, "post_hoc": mine, "oracle_eval": real})
    print("\n".join(sweep + [""] + lengths + [""] + t3 + [""] + decoys))
    print("oracle_check:", json.dumps(oracle_check))
    return {"runs": len(runs), "oracle_check": oracle_check}


if __name__ == "__main__":
    main()
