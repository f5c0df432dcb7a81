"""qa3_late's wave time, calibrated on what qa3_sparse's lease measured (README.md, "Time model").

    python experiments/qa3_late/time_model.py experiments/qa3_late/qa3_sparse_times.json
    python experiments/qa3_late/time_model.py /tmp/qs/runs/qa3_sparse --save experiments/qa3_late/qa3_sparse_times.json
    python experiments/qa3_late/time_model.py /tmp/ql/runs/qa3_late    # after qa3_late's lease: its measured times

Reads every run's train_q_rag.log in a lease's run folder (qa3_sparse's: 10 runs started together on a 2x H200 machine under MPS, 3 sp25
and 2 ctrl a card): when its step-0 evaluation ended, how long each 200 optimiser steps took (the two in-training
evaluations in them included), how long an evaluation took. A late run is a ctrl run in speed until its switch
(it draws the recipe's haystacks) and an sp25 run after it, but it evaluates on sp25's validation haystacks from
step 0. So it ends about at

    start + (from_step / 200) * (ctrl's 200 steps + 2 * (sp25's eval - ctrl's eval))
          + ((steps - from_step) / 200) * sp25's 200 steps * stretch

after the logs' first line. Before the switch the 5 late runs of a card are lighter than the card ctrl's pace was
measured on (3 sp25 and 2 ctrl), so no stretch. After it, ``stretch`` (1.0-1.25) covers 5 sp25-like runs a card
instead of qa3_sparse's 3 (7.5 recipe runs' worth by the memory rule, against 4.5-6.5). Its low end: sp25's pace did
not change when the ctrl runs ended (a card went from 6.5 runs' worth to 4.5), so the load below that cost nothing.
Its high end is round 10's: 10 recipe runs a card stepped at 0.27 s (540 s of stepping for 2 000 steps), against
0.216 s for qa3_sparse's ctrl beside 6.5 runs' worth ((51 s - 2 evaluations of 3.9 s) / 200), a factor of 1.25 for a
fuller card than this one. The low end takes the fastest run's pace (its mean 200 steps), the high end the slowest's.
At ``--from-step 0`` and stretch 1 the model gives sp25's measured ends, at 2000 ctrl's (plus the larger
evaluations).

The training logs are not in the committed archive (scripts/pack_round.py leaves them out); the measures taken from
the lease's download are committed as qa3_sparse_times.json (``--save``), which the model reads as well.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import statistics
from pathlib import Path

STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")
EVAL_AT = re.compile(r"eval @ step (\d+)")
STRETCH = (1.0, 1.25)  # after the switch, 5 sp25-like runs a card (the docstring: qa3_sparse and round 10)


def read_log(path: Path) -> dict:
    """A run's evaluation ends (s after its first line, by step) and its in-training evaluations' durations."""
    first = began = None
    at, evals = {}, []
    for line in path.read_text().splitlines():
        m = STAMP.match(line)
        if not m:
            continue
        t = dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
        first = first or t
        if "validation samples" in line:
            began = t
        elif (s := EVAL_AT.search(line)) and began is not None:
            at[int(s.group(1))] = (t - first).total_seconds()
            evals.append((t - began).total_seconds())
            began = None
    return {"at": at, "evals": evals}


def measures(root: Path) -> dict[str, dict[str, list[float]]]:
    """Per setting: step-0 ends, 200-step segments, each run's mean segment (``pace``), evaluation durations (the
    first, with the warm-up, left out) and last evaluations."""
    out: dict[str, dict[str, list[float]]] = {}
    for log in sorted(root.rglob("train_q_rag.log")):
        setting = log.parent.name.split("_")[1]
        r = read_log(log)
        m = out.setdefault(setting, {"start": [], "segment": [], "pace": [], "eval": [], "end": []})
        m["start"].append(r["at"][0])
        seg = [r["at"][s + 200] - r["at"][s] for s in range(0, max(r["at"]), 200) if s + 200 in r["at"]]
        m["segment"] += seg
        m["pace"].append(statistics.mean(seg))  # the run's mean 200 steps
        m["eval"] += r["evals"][1:]
        m["end"].append(r["at"][max(r["at"])])
    return out


def late_end(m: dict[str, dict[str, list[float]]], from_step: int = 800, steps: int = 2000) -> tuple[float, float]:
    """(low, high) seconds after the logs' first line at which a late run's last evaluation ends."""
    ctrl, sp = m["ctrl"], m["sp25"]
    extra_eval = 2 * (statistics.mean(sp["eval"]) - statistics.mean(ctrl["eval"]))  # per 200 steps
    ends = []
    for pick, stretch in ((min, STRETCH[0]), (max, STRETCH[1])):
        before = from_step / 200 * (pick(ctrl["pace"]) + extra_eval)
        after = (steps - from_step) / 200 * pick(sp["pace"]) * stretch
        ends.append(pick(sp["start"]) + before + after)
    return ends[0], ends[1]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "source", type=Path, help="a lease's run folder with train_q_rag.log files, or saved measures (.json)"
    )
    ap.add_argument("--from-step", type=int, default=800)
    ap.add_argument("--save", type=Path, help="write the measures read from the logs to this .json")
    args = ap.parse_args(argv)
    m = json.loads(args.source.read_text()) if args.source.suffix == ".json" else measures(args.source)
    if args.save:
        args.save.write_text(json.dumps(m, indent=1) + "\n")
    for setting, v in sorted(m.items()):
        print(
            f"{setting}: step 0 done {min(v['start']):.0f}-{max(v['start']):.0f} s; 200 steps "
            f"{min(v['segment']):.0f}-{max(v['segment']):.0f} s (median {statistics.median(v['segment']):.0f}); "
            f"an evaluation {statistics.mean(v['eval']):.1f} s; last evaluation {min(v['end']):.0f}-{max(v['end']):.0f} s"
        )
    if not {"ctrl", "sp25"} <= m.keys():  # qa3_late's own logs: their measured lines above are the result
        return {"measures": m, "late_end": None}
    low, high = late_end(m, args.from_step)
    print(f"late (from step {args.from_step}): last evaluation {low:.0f}-{high:.0f} s after the logs' first line")
    return {"measures": m, "late_end": (low, high)}


if __name__ == "__main__":
    main()
