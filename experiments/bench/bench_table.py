"""The side-by-side speed table (docs/BENCH.md) from one benchmark call's JSON lines.

    python experiments/bench/bench_table.py peer <peer_out_dir> --card NAME --torch VERSION >> call.jsonl
    python experiments/bench/bench_table.py table call.jsonl [--baseline reference]
    <command printing JSON lines> | python experiments/bench/bench_table.py tag TREE [--workload W --card NAME]
    python experiments/bench/bench_table.py program --tree T --card NAME --torch V --steps N -- <training command>

``peer`` turns the files of the reference harness (experiments/bench/peer_harness: ``peer_train.json``,
``peer_eval_<N>.json``) into JSON lines shaped like scripts/bench.py's, marked ``"tree": "reference"``,
so that one file holds every tree of a call. ``table`` prints a Markdown table: one row per workload,
one column per tree (seconds per iteration or episode, peak GiB), and each tree's speed-up over the
baseline tree (baseline seconds / tree seconds, with the host-device syncs per iteration where a
line counted them), with the card(s) the lines name; then, when the call measured training
throughput (``train-concurrent`` lines of scripts/bench_concurrency.sh), one row per tree and runs per
card. Only lines of one card are compared: a file naming two cards is refused.

``tag`` and ``program`` make a lease's lines (experiments/bench/lease.env): ``tag`` adds the tree (and the
workload and card, for commands whose lines lack them) to every JSON line of its input, passing other
lines through; ``program`` runs a whole training program, its output sent to stderr, and prints one
``train-program`` line: wall seconds per step over its ``--steps``, start-up and evaluations included.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

# the reference's evaluation sizes (sentences) and the project's workload names for them
EVAL_WORKLOADS = {1200: "W2 eval-1200", 40000: "W3 eval-40000", 400000: "W4 eval-400000"}
TRAIN_WORKLOAD = "W1 train-babilong-100"
PROGRAM_WORKLOAD = "train-program"


def peer_lines(folder: Path, card: str, torch_version: str) -> list[dict]:
    """JSON lines for the reference harness's output files in ``folder``."""
    common = {"tree": "reference", "card": card, "torch": torch_version}
    out = []
    train = folder / "peer_train.json"
    if train.exists():
        t = json.loads(train.read_text())
        out.append(
            {
                "workload": TRAIN_WORKLOAD,
                "s_per_iter_mean": t["steady_mean_s"],
                "s_per_iter_median": t["steady_median_s"],
                "iters": t["iterations"] - t["warm"],
                **common,
            }
        )
        # the whole program: start-up, the evaluation at iteration 0 and every iteration
        out.append(
            {
                "workload": PROGRAM_WORKLOAD,
                "s_per_step_wall": t["total_s"] / t["iterations"],
                "steps": t["iterations"],
                "total_s": t["total_s"],
                **common,
            }
        )
    for path in sorted(folder.glob("peer_eval_*.json")):
        e = json.loads(path.read_text())
        n = int(e["num_sentences"])
        out.append(
            {
                "workload": EVAL_WORKLOADS.get(n, f"eval-{n}"),
                "num_sentences": n,
                "s_per_episode_mean": e["mean_s"],
                "episodes": e["episodes"],
                "peak_gib": e["max_mem_gib"],
                **common,
            }
        )
    if not out:
        sys.exit(f"{folder}: no peer_train.json or peer_eval_*.json (run experiments/bench/lease.env's call ref first)")
    return out


def tag(line: str, tree: str, workload: str | None = None, card: str | None = None) -> str:
    """``line`` with ``tree`` set, and ``workload`` and ``card`` put first when given (the line's own keys
    win over those two); a line that is not a JSON object passes unchanged."""
    if not line.startswith("{"):
        return line
    x = {**json.loads(line), "tree": tree}
    if workload is not None:
        x = {"workload": workload, "card": card, **x}
    return json.dumps(x) + "\n"


def program_line(cmd: list[str], steps: int, tree: str, card: str, torch_version: str) -> dict:
    """Run ``cmd`` (its stdout to this process's stderr, so only the result line is printed) and time it."""
    t0 = time.perf_counter()
    rc = subprocess.run(cmd, stdout=sys.stderr).returncode
    total = time.perf_counter() - t0
    return {
        "workload": PROGRAM_WORKLOAD,
        "tree": tree,
        "card": card,
        "torch": torch_version,
        "s_per_step_wall": total / steps,
        "steps": steps,
        "total_s": total,
        "rc": rc,
    }


def seconds(line: dict) -> float | None:
    for key in ("s_per_iter_mean", "s_per_episode_mean", "s_per_step_wall", "s_per_extra_question"):
        if line.get(key) is not None:
            return float(line[key])
    return None


def read_lines(paths: list[Path]) -> list[dict]:
    lines = []
    for path in paths:
        for k, text in enumerate(path.read_text().splitlines(), 1):
            if not text.strip() or not text.lstrip().startswith("{"):
                continue  # logs interleaved with the JSON lines
            try:
                lines.append(json.loads(text))
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{k}: not a JSON line ({e.msg})")
    return lines


def table(lines: list[dict], baseline: str) -> str:
    cards = sorted({str(x.get("card")) for x in lines if x.get("card")})
    if len(cards) > 1:
        sys.exit(f"lines from {len(cards)} cards ({', '.join(cards)}): compare one card's lines only")
    trees: list[str] = []
    cell: dict[tuple[str, str], dict] = {}
    for x in lines:
        tree, wl = str(x.get("tree", "project")), x.get("workload")
        if wl is None or seconds(x) is None:
            continue
        extra = str(x.get("run", "")).partition("as configured + ")[2]
        if extra:  # a run with overrides (an ablation, another env count) is a row of its own
            wl = f"{wl} [{extra}]"
        if tree not in trees:
            trees.append(tree)
        cell[(wl, tree)] = x  # a later line of the same tree and workload replaces an earlier one
    if baseline in trees:
        trees.remove(baseline)
        trees.insert(0, baseline)
    workloads = list(dict.fromkeys(wl for wl, _ in cell))
    head = ["workload", *trees, *[f"{t} vs {baseline}" for t in trees if t != baseline]]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for wl in workloads:
        vals = []
        for t in trees:
            x = cell.get((wl, t))
            if x is None:
                vals.append("–")
                continue
            mem = f", {x['peak_gib']:.1f} GiB" if x.get("peak_gib") is not None else ""
            syncs = f", {x['syncs_per_iter']:.0f} syncs" if x.get("syncs_per_iter") is not None else ""
            vals.append(f"{seconds(x):.3f} s{mem}{syncs}")
        base = cell.get((wl, baseline))
        for t in trees:
            if t == baseline:
                continue
            x = cell.get((wl, t))
            vals.append(f"{seconds(base) / seconds(x):.2f}×" if base is not None and x is not None else "–")
        rows.append("| " + " | ".join([wl, *vals]) + " |")
    out = f"Card: {cards[0] if cards else 'unknown'}"
    extra = [t for t in ("\n".join(rows) if workloads else None, throughput(lines), floors(lines)) if t is not None]
    return "\n\n".join([out, *extra])


def throughput(lines: list[dict]) -> str | None:
    """The training-throughput lines (scripts/bench_concurrency.sh: several runs sharing a card) as
    one row per tree and runs per card, in file order; None when the call has none."""
    rows = [x for x in lines if x.get("workload") == "train-concurrent"]
    if not rows:
        return None
    out = [
        "| tree | runs per card | per run (steps/s) | aggregate steps/s per card | over the whole window |",
        "|---|---|---|---|---|",
    ]
    for x in rows:
        per = x["per_run_steps_per_s"]
        out.append(
            f"| {x.get('tree', 'project')} | {x['runs_per_gpu']} | {min(per):.2f}-{max(per):.2f} | "
            f"{x['aggregate_steps_per_s']:.2f} | {x['window_steps_per_s_per_gpu']:.2f} |"
        )
    return "\n".join(out)


def floors(lines: list[dict]) -> str | None:
    """experiments/bench/encoder_floor.py's lines (``"workload": "floor"``) as one row per measured part; None
    when the call has none. The acting lines are seconds per rollout of their ``steps``, the others per 1 M tokens."""
    rows = [x for x in lines if x.get("workload") == "floor"]
    if not rows:
        return None
    out = ["| part | seconds | per 1 M tokens | |", "|---|---|---|---|"]
    for x in rows:
        note = ", ".join(
            f"{k} {x[k]:.0f}" if isinstance(x[k], float) else f"{k} {x[k]}"
            for k in ("tflops", "gb_per_s", "backend", "path", "steps")
            if k in x
        )
        if "elementwise_s_per_1m_tokens" in x:
            note = f"elementwise (tail minus its matmuls) {x['elementwise_s_per_1m_tokens']:.3f} s per 1 M tokens"
        out.append(f"| {x['part']} | {x['s']:.4f} | {x['s_per_1m_tokens']:.3f} s | {note} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("peer", help="the reference harness's files as JSON lines")
    p.add_argument("folder", type=Path)
    p.add_argument("--card", required=True)
    p.add_argument("--torch", required=True)
    t = sub.add_parser("table", help="a Markdown table of one call's JSON lines")
    t.add_argument("files", type=Path, nargs="+")
    t.add_argument("--baseline", default="reference", help="the tree the speed-ups divide (default: reference)")
    g = sub.add_parser("tag", help="add the tree (and workload, card) to the JSON lines of stdin")
    g.add_argument("tree")
    g.add_argument("--workload")
    g.add_argument("--card")
    r = sub.add_parser("program", help="time a whole training program: one train-program line")
    for key in ("--tree", "--card", "--torch"):
        r.add_argument(key, required=True)
    r.add_argument("--steps", type=int, required=True, help="the optimiser steps the command runs")
    r.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = ap.parse_args()
    if args.cmd == "peer":
        for line in peer_lines(args.folder, args.card, args.torch):
            print(json.dumps(line))
    elif args.cmd == "tag":
        for line in sys.stdin:
            print(tag(line, args.tree, args.workload, args.card), end="", flush=True)
    elif args.cmd == "program":
        cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not cmd:
            ap.error("program: the command to time follows --")
        print(json.dumps(program_line(cmd, args.steps, args.tree, args.card, args.torch)))
    else:
        print(table(read_lines(args.files), args.baseline))


if __name__ == "__main__":
    main()
