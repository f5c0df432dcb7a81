"""qa3's first picks, per run: how often the retriever's first chunk is an object-"take" fact, and how often
it is gold (experiments/qa3_late/README.md, "Motivation").

    python scripts/first_picks.py experiments/qa3_sparse/runs.tar.xz
    python scripts/first_picks.py experiments/round9/runs.tar.xz --settings isoA --lengths 1K --out /tmp/fp

qa3_sparse's sp25 seed 4 learned to pick "<name> grabbed/took/got/picked up the <object>" first on every
test question (its first pick gold on 9 %), where the runs that learned pick gold first on about 90 %. A
take fact is a bAbI qa3 pick-up statement (`TAKE`; the four names and verbs of the qa3 files); it is gold
in the questions whose chain starts at a pick-up rather than a drop. Per run and length (the evaluation
files of the best checkpoint, ``eval_seed<N>_<length>.jsonl`` as scripts/seed_report.py names them): the
questions scored (records with gold facts), ``take_first`` (% of them whose first pick is a take fact),
``gold_first`` (% whose first pick is gold) and ``take_first_gold`` (% whose first pick is a take fact that
is gold). A run whose ``take_first`` at 1K is at least ``--flag`` (50) % is marked ``take-first``.

Inputs, run names and ``--settings`` as scripts/seed_report.py reads them (archives or folders of runs,
``[w<k>_]<setting>_s<seed>``). ``--out <P>`` writes ``<P>.md`` and ``<P>.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_round import ReportError, read_jsonl  # noqa: E402
from seed_report import LENGTHS, RUN_NAME, eval_path, eval_stem, input_roots, names  # noqa: E402

# a qa3 pick-up statement: the files' four actors and four pick-up verbs (drops: dropped, discarded, left,
# put down; moves: went, travelled, journeyed, moved)
TAKE = re.compile(r"^(?:Daniel|John|Mary|Sandra) (?:took|grabbed|got|picked up) the \w+")
FLAG = 50.0


def first_picks(path: Path) -> dict[str, Any]:
    """The shares (x100) of one evaluation file's questions whose first pick is a take fact, is gold, is both."""
    n = take = gold = both = 0
    for r in read_jsonl(path):
        if not r.get("sf_idx") or not r.get("pred_idx"):
            continue
        if "pred_texts" not in r:
            raise ReportError(f"{path}: a record without pred_texts (the chunks' texts are needed)")
        n += 1
        is_take = TAKE.match(r["pred_texts"][0].strip()) is not None
        is_gold = r["pred_idx"][0] in r["sf_idx"]
        take, gold, both = take + is_take, gold + is_gold, both + (is_take and is_gold)
    pct = (lambda k: round(100.0 * k / n, 1)) if n else (lambda k: None)
    return {"questions": n, "take_first": pct(take), "gold_first": pct(gold), "take_first_gold": pct(both)}


def collect(
    roots: Sequence[Path], lengths: Sequence[str], keep: set[str] | None, eval_seed: int
) -> list[dict[str, Any]]:
    """One row per run and length evaluated, in setting, seed, length order."""
    rows = []
    for root in roots:
        for run in sorted(p for p in root.iterdir() if p.is_dir() and (p / "config.yaml").is_file()):
            m = RUN_NAME.match(run.name)
            if not m or (keep is not None and m["setting"] not in keep):
                continue
            for length in lengths:
                if path := eval_path(run, eval_stem(length, eval_seed)):
                    row = {"run": run.name, "setting": m["setting"], "seed": m["seed"] + m["repeat"], "length": length}
                    rows.append(row | first_picks(path))
    rows.sort(key=lambda r: (r["setting"], int(re.sub(r"\D", "", r["seed"])), r["seed"], lengths.index(r["length"])))
    return rows


def flagged(rows: list[dict[str, Any]], flag: float) -> list[str]:
    """The runs in the take-first mode: take_first >= flag at 1K."""
    return [r["run"] for r in rows if r["length"] == "1K" and (r["take_first"] or 0) >= flag]


def markdown(rows: list[dict[str, Any]], flag: float, eval_seed: int) -> str:
    out = [
        f"First picks of the best checkpoint (eval seed {eval_seed}; % of the questions scored): take = a qa3 "
        f"pick-up fact (X grabbed/took/got/picked up the <object>). Marked: take first >= {flag:g} % at 1K.",
        "",
        "| run | length | questions | take first | gold first | take first, gold | |",
        "|---|---|---|---|---|---|---|",
    ]
    marked = set(flagged(rows, flag))
    for r in rows:
        mark = "take-first" if r["run"] in marked and r["length"] == "1K" else ""
        cells = [r["run"], r["length"], r["questions"], r["take_first"], r["gold_first"], r["take_first_gold"], mark]
        out.append("| " + " | ".join("-" if c is None else str(c) for c in cells) + " |")
    out += [
        "",
        f"take-first runs: {len(marked)} of {len({r['run'] for r in rows})}"
        + (f" ({', '.join(sorted(marked))})" if marked else ""),
    ]
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+", type=Path, help="archives or folders of run folders")
    ap.add_argument("--settings", help="comma-separated settings to read (default: all)")
    ap.add_argument("--lengths", default="1K,32K", help=f"comma-separated, of {', '.join(LENGTHS)} (default 1K,32K)")
    ap.add_argument("--eval-seed", type=int, default=42, help="the haystack draw (default 42)")
    ap.add_argument("--flag", type=float, default=FLAG, help="take first at 1K, %%, that marks a run (default 50)")
    ap.add_argument("--out", type=Path, help="write <out>.md and <out>.json")
    args = ap.parse_args(argv)
    lengths = names(args.lengths)
    if bad := [b for b in lengths if b not in LENGTHS]:
        ap.error(f"--lengths: unknown {', '.join(bad)}; known: {', '.join(LENGTHS)}")
    keep = set(names(args.settings)) if args.settings else None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            rows = collect(input_roots(args.inputs, Path(tmp)), lengths, keep, args.eval_seed)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    text = markdown(rows, args.flag, args.eval_seed)
    print(text, end="")
    if args.out:
        args.out.with_suffix(".md").write_text(text, encoding="utf-8")
        rep = {
            "eval_seed": args.eval_seed,
            "flag": args.flag,
            "take_first_runs": flagged(rows, args.flag),
            "rows": rows,
        }
        args.out.with_suffix(".json").write_text(json.dumps(rep, indent=1) + "\n", encoding="utf-8")
    return rows


if __name__ == "__main__":
    main()
