"""What a qa3 retriever misses on the real test, and the qa3 statistics of real and generated stories.

    PYTHONPATH=. python experiments/round5/qa3_error_analysis.py   # the tables of experiments/round5/generator_analysis.md

Part 1 reads the committed evaluation records of round 4 (``--rounds-dir``, runs ``--runs``, files
``eval_seed42_nt{1000,32000}.jsonl``, or ``.jsonl.gz`` as the older ``runs.tgz`` held them),
rebuilds each sample's haystack on CPU (the real qa3 test file, token mode, seed 42: the same
function of (seed, split, size, index) the evaluation used; each record's gold indices are checked
against it) and names every pick by its role: the gold pick-up or
drop ("event"), the gold move into the asked room ("m2"), the gold move before it ("m1", the answer),
or a decoy (an earlier/later pick-up or drop of the asked object, a move of the gold carrier before
m1 or after m2, another person's move, an event of another object, a noise sentence). Part 2 puts
the real training and test files next to the generated training file before round 5 (read from git,
``--old-rev``) and now, on the statistics that bear on those misses.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
from collections import Counter
from pathlib import Path

from envs.data.babi import load_babi_file, parse_babi_lines
from envs.data.babi_stats import read_stories
from envs.data.babilong import build_babilong

REPO = Path(__file__).resolve().parents[2]
TASK = "qa3_three-supporting-facts"
REAL = REPO / "data/babilong/babi/en-10k"
GENERATED = f"data/babilong/babi-generated/en-10k/{TASK}_train.txt.gz"
_MOVE = re.compile(r"^(\w+) (?:moved|went|journeyed|travelled|went back) to the (\w+)\.$")
_EVENT = re.compile(r"^(\w+) (got|grabbed|picked up|took|dropped|discarded|put down|left) the (\w+)(?: there)?\.$")
_GETS = {"got", "grabbed", "picked up", "took"}


def _parse(fact: str) -> tuple[str, str, str]:
    """(kind, person, room or object) of a qa3 statement."""
    if m := _MOVE.match(fact):
        return "move", m[1], m[2]
    m = _EVENT.match(fact)
    return ("get" if m[2] in _GETS else "drop"), m[1], m[3]


def roles(sample) -> tuple[int, int, int]:
    """Positions in ``sample.facts`` of the gold event, the move into the asked room (m2) and the
    move before it (m1)."""
    ev = next(j for j in sample.references_idx if _parse(sample.facts[j])[0] != "move")
    m1, m2 = sorted(j for j in sample.references_idx if j != ev)
    return ev, m2, m1


def decoy(sample, j: int | None) -> str:
    """The role of a non-gold pick (a position in ``sample.facts``, None for noise)."""
    if j is None:
        return "noise sentence"
    ev, m2, m1 = roles(sample)
    kind, who, what = _parse(sample.facts[j])
    carrier, room, obj = _parse(sample.facts[m2])[1], _parse(sample.facts[m2])[2], _parse(sample.facts[ev])[2]
    if kind == "move":
        if who != carrier:
            return "another person's move"
        return (
            "carrier's move "
            + ("after m2" if j > m2 else "before m1")
            + (" into the asked room" if what == room else "")
        )
    if what == obj:
        return f"{'earlier' if j < ev else 'later'} {'pick-up' if kind == 'get' else 'drop'} of the object"
    return "event of another object"


def hard(sample) -> int | None:
    """For a gold pick-up: how many statements after the object's previous drop it comes (None
    for a gold drop, or a pick-up with no drop before it)."""
    ev = roles(sample)[0]
    kind, _, obj = _parse(sample.facts[ev])
    drops = [j for j in range(ev) if _parse(sample.facts[j])[0] == "drop" and _parse(sample.facts[j])[2] == obj]
    return ev - drops[-1] if kind == "get" and drops else None


def run_rows(rounds: Path, run: str, nt: int, babi, dataset) -> list[dict]:
    pos = {q: k for k, q in enumerate(dataset.ids)}
    rows = []
    plain = rounds / run / f"eval_seed42_nt{nt}.jsonl"
    opened = open(plain, encoding="utf-8") if plain.is_file() else gzip.open(f"{plain}.gz", "rt", encoding="utf-8")
    for line in opened:
        r = json.loads(line)
        b, s = babi[r["id"]], dataset[pos[r["id"]]]
        if s["sf_idx"] != r["sf_idx"]:
            raise SystemExit(f"{run} nt{nt} sample {r['id']}: the rebuilt haystack differs from the evaluated one")
        where = {h: j for j, h in enumerate(s["facts_idx"])}
        gold = dict(zip((s["facts_idx"][j] for j in roles(b)), ("event", "m2", "m1")))
        first_bad = next((t for t, h in enumerate(r["pred_idx"][:3]) if h not in gold), None)
        rows.append(
            {
                "id": r["id"],
                "em": r["em"],
                "missed": tuple(g for h, g in gold.items() if h not in r["pred_idx"]),
                "hop": first_bad,
                "decoy": None if first_bad is None else decoy(b, where.get(r["pred_idx"][first_bad])),
                "gold_kind": _parse(b.facts[roles(b)[0]])[0],
                "after_drop": hard(b),
            }
        )
    return rows


def _table(head: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return out + ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]


def part1(rounds: Path, runs: list[str], lengths: list[int]) -> list[str]:
    babi = load_babi_file(REAL / f"{TASK}_test.txt.gz")
    out = ["## 1. Misses on the real test (round 4 records)", ""]
    for nt in lengths:
        envs = {
            "facts_test_path": str(REAL / f"{TASK}_test.txt.gz"),
            "noise_test_path": str(REPO / "data/babilong/pg19-with-sentences/test"),
            "length_unit": "tokens",
            "length_tokenizer": "gpt2",
            "num_tokens": nt,
            "prompt_reserve_tokens": 300,
            "min_noise_sentence_tokens": 10,
            "tokens_per_fact": 8,
            "num_sentences": 100,
            "subsample_size": 100,
            "length": -1,
        }
        ds = build_babilong(envs, "test", 42)
        data = {run: run_rows(rounds, run, nt, babi, ds) for run in runs}
        ref = data[runs[0]]
        n_get = sum(x["gold_kind"] == "get" for x in ref)
        n_hard = sum(x["after_drop"] is not None and x["after_drop"] <= 2 for x in ref)
        out += [
            f"### {nt} tokens ({len(ref)} samples: {n_get} with a gold pick-up, {n_hard} of them 1-2 after a drop)",
            "",
        ]
        rows = []
        for run, rs in data.items():
            miss = [x for x in rs if x["em"] < 1]
            rows.append(
                [
                    run,
                    len(miss),
                    sum(x["gold_kind"] == "get" for x in miss),
                    sum(x["after_drop"] is not None and x["after_drop"] <= 2 for x in miss),
                    sum(x["hop"] == 0 for x in miss),
                    ", ".join(f"{k} {v}" for k, v in Counter(x["decoy"] for x in miss).most_common()),
                    ", ".join(f"{'+'.join(k)} {v}" for k, v in Counter(x["missed"] for x in miss).most_common()),
                    ", ".join(
                        f"{k}: {v}"
                        for k, v in sorted(Counter(x["after_drop"] for x in miss if x["after_drop"]).items())
                    ),
                ]
            )
        out += _table(
            [
                "run",
                "misses",
                "gold pick-up",
                "pick-up 1-2 after a drop",
                "first wrong pick at hop 1",
                "first wrong pick among hops 1-3",
                "gold facts missed",
                "statements from the decoy drop to the gold pick-up: misses",
            ],
            rows,
        )
        missed = {run: {x["id"] for x in rs if x["em"] < 1} for run, rs in data.items()}
        first = runs[0]
        out += [
            "",
            f"Misses of {first} that each other run also misses: "
            + ", ".join(f"{r} {len(missed[first] & missed[r])} of {len(missed[first])}" for r in runs[1:]),
            "",
        ]
    return out


def _questions(lines: list[str]):
    """(story, question, {line: statement}) of every question of a file."""
    for s in read_stories(lines):
        by = {x.line: x for x in s.stmts}
        for q in s.questions:
            yield s, q, by


def data_stats(lines: list[str]) -> dict[str, float]:
    """The numbers of part 2 for one qa3 file."""
    v: Counter = Counter()
    n_q = n_get = 0
    for s, q, by in _questions(lines):
        n_q += 1
        ev = next(by[i] for i in q.support if by[i].kind != "move")
        obj = ev.args[1]
        if ev.kind != "get":
            continue
        n_get += 1
        drops = [x for x in s.stmts[: ev.pos - 1] if x.kind == "drop" and x.args[1] == obj]
        if not drops:
            v["gold pick-up, no drop of the object before it"] += 1
            continue
        gap = ev.pos - drops[-1].pos
        v["gold pick-up 1-2 statements after a drop of the object"] += gap <= 2
        v["gold pick-up 3+ statements after a drop of the object"] += gap > 2
        v["gold pick-up after a drop by another person"] += drops[-1].args[0] != ev.args[0]
    out = {"gold event is a pick-up": n_get / n_q}
    out.update({k: c / n_q for k, c in v.items()})
    # how likely a statement is a move / pick-up / drop, by the number of objects held before it
    by_held: dict[int, Counter] = {}
    for s in read_stories(lines):
        held: set[str] = set()
        for x in s.stmts:
            by_held.setdefault(len(held), Counter())[x.kind] += 1
            if x.kind == "get":
                held.add(x.args[1])
            elif x.kind == "drop":
                held.discard(x.args[1])
    total = sum(sum(c.values()) for c in by_held.values())
    for h, c in sorted(by_held.items()):
        n = sum(c.values())
        out[f"statements while {h} held (share)"] = n / total
        out[f"  of them moves, while {h} held"] = c["move"] / n
        if h:
            out[f"  of them drops, while {h} held"] = c["drop"] / n
    return out


def part2(old_rev: str) -> list[str]:
    old = subprocess.run(["git", "show", f"{old_rev}:{GENERATED}"], cwd=REPO, capture_output=True, check=True).stdout
    files = {
        "real train": gzip.open(REAL / f"{TASK}_train.txt.gz", "rt").read().splitlines(),
        "real test": gzip.open(REAL / f"{TASK}_test.txt.gz", "rt").read().splitlines(),
        f"generated before ({old_rev})": gzip.decompress(old).decode().splitlines(),
        "generated now": gzip.open(REPO / GENERATED, "rt").read().splitlines(),
    }
    for name, lines in files.items():  # every file parses as bAbI
        parse_babi_lines([ln + "\n" for ln in lines], name)
    stats = {name: data_stats(lines) for name, lines in files.items()}
    keys = list(stats["real train"])
    rows = [[k] + [f"{stats[n].get(k, 0.0):.3f}" for n in files] for k in keys]
    return ["## 2. The stories: real and generated qa3 (shares of questions, then of statements)", ""] + _table(
        ["statistic", *files], rows
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--rounds-dir", type=Path, required=True, help="round 4's run folders: experiments/round4/runs.tar.xz unpacked"
    )
    ap.add_argument("--runs", nargs="+", default=["g_qa3", "t_qrag_s1", "t_qrag_s2", "t_qrag_s3"])
    ap.add_argument("--lengths", nargs="+", type=int, default=[1000, 32000])
    ap.add_argument("--old-rev", default="a2c69e9", help="a commit holding the generated qa3 file before round 5")
    args = ap.parse_args()
    print("\n".join(part1(args.rounds_dir, args.runs, args.lengths) + part2(args.old_rev)))


if __name__ == "__main__":
    main()
