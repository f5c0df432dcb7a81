"""Plan files for settings × seeds, side by side on a lent machine (scripts/lease.sh runs them, and
scripts/seed_report.py reads what they make).

    python scripts/seed_plan.py experiments/round8/plan --gpus 4 --seeds 1-8 \\
        --common "experiment=offline_babilong_qa3 steps_count=2000 envs_parallel=16 eval_interval=100 eval_episodes=100" \\
        --setting a02 "algo.pqn.hyperparams.alpha=0.02" --setting a03 "algo.pqn.hyperparams.alpha=0.03" --wave 1

writes ``<out>_train.txt`` (scripts/launch_plan.sh: ``w<wave>_<setting>_s<seed> <gpu> seed=<seed> <overrides>``,
the ``#@common`` line first) and ``<out>_eval.txt`` (scripts/launch_evals.sh: ``--samples`` questions at
``--lengths`` BabiLong token budgets, best validation checkpoint; ``--last`` adds a chain on
``model_last.pt`` for each run; ``--eval SETTING OVERRIDES`` instead gives every run of a setting one
chain per ``--eval`` on a test set that has no length, HotpotQA or MuSiQue: ``#@length_unit none``,
experiments/table2b/). Runs are dealt to the cards seed by seed, each seed's settings on
different cards, each pass one card further on, so every card holds about the same mix of settings
(a card that runs slower shifts no setting).
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

NAME = re.compile(r"^[A-Za-z0-9]+$")


def seeds_of(text: str) -> list[int]:
    """``1-8`` or ``1,2,5`` or ``3``."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"--seeds {text!r}: use 1-8, 1,2,5 or 3")
        out += list(range(int(lo), int(hi or lo) + 1))
    if not out or len(set(out)) != len(out):
        raise ValueError(f"--seeds {text!r}: no seed, or one twice")
    return out


def plan_lines(settings: list[tuple[str, str]], seeds: list[int], gpus: int, wave: int) -> list[tuple[str, int, str]]:
    """(run name, gpu, own overrides) for every setting × seed, dealt round-robin in seed-major order.

    Each pass over the cards starts one card further on: with a plain round-robin, a number of settings
    that divides the number of cards puts each setting on the same cards every seed (2 settings on 4
    cards: one on cards 0 and 2 only), and a card that runs slower would then shift one setting.
    """
    runs = [(f"w{wave}_{name}_s{seed}", f"seed={seed} {ov}".strip()) for seed in seeds for name, ov in settings]
    return [(name, (i + i // gpus) % gpus, ov) for i, (name, ov) in enumerate(runs)]


def main(argv: Sequence[str] | None = None) -> list[tuple[str, int, str]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="writes <out>_train.txt and <out>_eval.txt")
    ap.add_argument(
        "--setting",
        nargs=2,
        action="append",
        metavar=("NAME", "OVERRIDES"),
        required=True,
        help="a setting: its name (letters and digits) and its overrides (one quoted string; '' for none)",
    )
    ap.add_argument("--seeds", default="1-8")
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--wave", type=int, default=1)
    ap.add_argument("--common", default="", help="the #@common overrides of every run")
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--lengths", help="BabiLong token budgets of each evaluation chain (default 1000,32000)")
    ap.add_argument(
        "--eval",
        nargs=2,
        action="append",
        default=[],
        metavar=("SETTING", "OVERRIDES"),
        help="one evaluation chain for every run of SETTING on a test set without lengths (HotpotQA, MuSiQue), "
        "with these overrides; repeat for more; once given, every setting needs one",
    )
    ap.add_argument("--last", action="store_true", help="also evaluate model_last.pt (use_last=true)")
    ap.add_argument("--note", default="", help="a comment line for both files (what the wave asks)")
    args = ap.parse_args(argv)
    names = [n for n, _ in args.setting]
    bad = [n for n in names if not NAME.match(n)]
    if bad or len(set(names)) != len(names):
        raise ValueError(f"setting names must be letters and digits, each once (got {names})")
    if args.gpus < 1:
        raise ValueError("--gpus must be at least 1")
    evals_of: dict[str, list[str]] = {}
    for name, ov in args.eval:
        evals_of.setdefault(name, []).append(ov)
    if args.eval and (args.lengths or sorted(evals_of) != sorted(names)):
        raise ValueError(
            f"--eval: one or more for every setting ({', '.join(names)}), none for another "
            f"(got {', '.join(sorted(evals_of))}), and no --lengths (these test sets have none)"
        )
    lines = plan_lines([tuple(s) for s in args.setting], seeds_of(args.seeds), args.gpus, args.wave)
    head = [f"# {args.note}"] if args.note else []
    head.append(f"# made by: python scripts/seed_plan.py {shlex.join(sys.argv[1:] if argv is None else argv)}")
    width = max(len(n) for n, _, _ in lines)
    train = [*head, f"#@common {args.common}".rstrip(), *(f"{n.ljust(width)} {g} {ov}" for n, g, ov in lines)]
    if args.eval:  # one chain per evaluation of a run, dealt over the cards in turn
        evals = [*head, "#@length_unit none"]
        chains = [
            (n, own)
            for n, _, _ in lines
            for ov in evals_of[n.split("_")[1]]  # w<wave>_<setting>_s<seed>
            for own in ([ov, f"{ov} use_last=true".strip()] if args.last else [ov])
        ]
        for i, (n, ov) in enumerate(chains):
            evals.append(f"{n.ljust(width)} {i % args.gpus} {args.samples} - {ov}".rstrip())
    else:
        lengths = args.lengths or "1000,32000"
        evals = [*head, "#@length_unit tokens"]
        for i, (n, _, _) in enumerate(lines):  # evaluations dealt afresh: the chains are short and even
            evals.append(f"{n.ljust(width)} {i % args.gpus} {args.samples} {lengths}")
            if args.last:
                evals.append(f"{n.ljust(width)} {(i + 1) % args.gpus} {args.samples} {lengths} use_last=true")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{args.out}_train.txt").write_text("\n".join(train) + "\n", encoding="utf-8")
    Path(f"{args.out}_eval.txt").write_text("\n".join(evals) + "\n", encoding="utf-8")
    per_gpu = [sum(1 for _, g, _ in lines if g == k) for k in range(args.gpus)]
    print(
        f"{len(lines)} runs ({len(names)} settings x {len(lines) // len(names)} seeds), per card {per_gpu} "
        f"-> {args.out}_train.txt, {args.out}_eval.txt"
    )
    return lines


if __name__ == "__main__":
    try:
        main()
    except ValueError as e:
        sys.exit(f"error: {e}")
