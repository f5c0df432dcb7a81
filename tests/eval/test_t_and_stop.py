"""scripts/stopping_analysis.py's budget-T and stop-threshold analysis (--choose, --cells): the maths
against hand computation and brute force on tiny fixtures, and the offline stop against the online
one (eval.stop_q_threshold) on the real evaluation loop."""

from __future__ import annotations

import csv
import gzip
import itertools
import json
import random
import tarfile
from pathlib import Path

import pytest

from rl.run.evaluate import run
from tests.conftest import ROOT, load_script

from .conftest import eval_cfg

sa = load_script("stopping_analysis")

GOLD = [1, 2]
# four samples, budget 4; hand-computed below. index: even = validation half, odd = test half
T4 = [
    {"id": "a", "index": 0, "pred_idx": [1, 2, 7, 8], "q_values": [1.0, 0.9, 0.2, 0.1]},  # complete at 2
    {"id": "b", "index": 1, "pred_idx": [5, 1, 2, 9], "q_values": [1.0, 0.8, 0.25, 0.3]},  # complete at 3
    {"id": "c", "index": 2, "pred_idx": [5, 6, 7, 8], "q_values": [0.3, 0.2, 0.1, 0.05]},  # never complete
    {"id": "d", "index": 3, "pred_idx": [2, 5, 6, 1], "q_values": [0.9, 0.6, 0.7, 0.15]},  # complete at 4
]
# an evaluation at T = 2 whose sample a picked otherwise than T = 4's prefix: budgets 1 and 2 come from it
T2 = [dict(r, pred_idx=r["pred_idx"][:2], q_values=r["q_values"][:2]) for r in T4]
T2[0] = dict(T2[0], pred_idx=[1, 3], q_values=[1.0, 0.5])
META = {"planner": "greedy", "stop_q_threshold": None, "oracle_stop": False, "checkpoint_hash": "sha256:x"}


def write_log(folder: Path, name: str, recs: list[dict], meta: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(dict(r, sf_idx=r.get("sf_idx", GOLD), em=0.0)) + "\n" for r in recs)
    (folder / f"{name}.jsonl.meta.json").write_text(json.dumps(meta))
    return path


def fixture_run(root: Path, name: str = "r1") -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text("envs: {max_steps: 4}\n")
    write_log(d, "eval_seed42_ns20", T4, META | {"max_steps": 4})
    write_log(d, "eval_seed42_ns20_T2", T2, META | {"max_steps": 2})
    return d


def loaded(tmp_path: Path):
    d = fixture_run(tmp_path)
    return sa.group_runs(sorted(d.glob("*.jsonl.gz")), tmp_path)[0]


def test_online_rule_keeps_step_zero_and_stops_at_or_below_theta() -> None:
    assert sa.kept_online([0.9, 0.2, 0.8], 0.5) == 1
    assert sa.kept_online([0.9, 0.2, 0.8], 0.2) == 1  # <= stops (eval.stop_q_threshold)
    assert sa.kept_online([0.9, 0.2, 0.8], 0.19) == 3
    assert sa.kept_online([0.1, 0.9], 0.5) == 2  # step 0 is always taken
    assert sa.kept_online([0.1, 0.9], sa.NO_STOP) == 2


def test_budgets_from_the_shortest_evaluation_at_or_above(tmp_path: Path) -> None:
    r = loaded(tmp_path)
    assert r.name == "r1" and sorted(r.episodes) == [2, 4]
    f1 = {t: sa.budget_metrics(sa.episodes_at(r, t)) for t in (1, 2, 3, 4)}
    # T = 1, 2 from the T = 2 file (a picks [1, 3]); T = 3, 4 from the T = 4 file
    assert f1[1]["fact_f1"] == pytest.approx((2 / 3 + 0 + 0 + 2 / 3) / 4)  # a [1], b [5], c [5], d [2]
    assert f1[2]["fact_f1"] == pytest.approx((0.5 + 0.5 + 0 + 0.5) / 4) and f1[2]["fact_em"] == 0
    assert f1[3]["fact_f1"] == pytest.approx((0.8 + 0.8 + 0 + 0.4) / 4) and f1[3]["fact_em"] == 0.5
    assert f1[4]["fact_f1"] == pytest.approx(0.5) and f1[4]["fact_em"] == 0.75
    with pytest.raises(ValueError, match="T >= 5"):
        sa.episodes_at(r, 5)
    assert sa.prefix_check(r) == {"compared": 4, "picks_differ": 1, "metrics_differ": 1}


def test_theta_metrics_by_hand(tmp_path: Path) -> None:
    eps = sa.episodes_at(loaded(tmp_path), 4)
    m = sa.theta_metrics(eps, 0.5)
    # kept a 2 ([1,2]: F1 1, EM 1), b 2 ([5,1]: 0.5, gold 2 dropped), c 1 ([5]: 0), d 3 ([2,5,6]: 0.4, gold 1 dropped)
    assert m == pytest.approx({"kept": 2.0, "fact_f1": (1 + 0.5 + 0 + 0.4) / 4, "fact_em": 0.25, "lost": 0.5})
    assert sa.theta_metrics(eps, sa.NO_STOP) == pytest.approx({"kept": 4, "fact_f1": 0.5, "fact_em": 0.75, "lost": 0})
    assert sa.oracle_f1(eps) == pytest.approx((1 + 0.8 + 0 + 2 / 3) / 4)  # c never completes: all four kept


def test_aucs_by_pair_counting(tmp_path: Path) -> None:
    eps = sa.episodes_at(loaded(tmp_path), 4)
    # steps t > 0 of a, b, d; continue: a.9 b.8 b.25 d.6 d.7 d.15, stop: a.2 a.1 b.3 -> 15 of 18 pairs
    assert sa.stop_auc(eps) == pytest.approx(15 / 18)
    # same step only: t = 2 (b.25, d.7 vs a.2: 2 of 2), t = 3 (d.15 vs a.1, b.3: 1 of 2); t = 1 has no stop
    assert sa.stop_auc_same_step(eps) == pytest.approx(3 / 4)


def pair_auc(steps: list[tuple[int, float, bool]], same_step: bool) -> float | None:
    """Every (continue, stop) pair, counted: 1 when continue's Q is higher, 1/2 when equal."""
    pairs = [(a, b) for a in steps for b in steps if a[2] and not b[2] and (a[0] == b[0] or not same_step)]
    wins = sum(1.0 if a[1] > b[1] else 0.5 if a[1] == b[1] else 0.0 for a, b in pairs)
    return wins / len(pairs) if pairs else None


def test_aucs_against_all_pairs() -> None:
    rng = random.Random(5)
    for _ in range(30):
        eps = []
        for k in range(rng.randint(1, 8)):
            pred = rng.sample(range(6), rng.randint(2, 6))
            q = [round(rng.random(), 1) for _ in pred]  # coarse: ties happen
            eps.append(
                sa.Episode(("f", str(k)), k, tuple(rng.sample(range(6), rng.randint(1, 2))), tuple(pred), tuple(q))
            )
        steps = []  # (t, q, continue) over t > 0 of the episodes that complete, from the definition
        for e in eps:
            done = [t for t in range(1, len(e.pred) + 1) if set(e.sf) <= set(e.pred[:t])]
            if done:
                steps += [(t, e.q[t], t < done[0]) for t in range(1, len(e.q))]

        for got, want in (
            (sa.stop_auc(eps), pair_auc(steps, False)),
            (sa.stop_auc_same_step(eps), pair_auc(steps, True)),
        ):
            assert got == pytest.approx(want) if want is not None else got is None


def test_group_budgets_samples_and_transferred_theta(tmp_path: Path) -> None:
    r1 = loaded(tmp_path)
    d = tmp_path / "r2"
    write_log(d, "e_T2", T2, META | {"max_steps": 2})
    write_log(d, "e", T4, META | {"max_steps": 4})
    write_log(d, "e_T6", T4[:3], META | {"max_steps": 6})  # d not evaluated at T = 6: left out everywhere
    r2 = sa.load_run("r2", d, sorted(d.glob("*.gz")))
    assert sorted(r2.episodes) == [2, 4, 6] and all(len(v) == 3 for v in r2.episodes.values())
    g = sa.analyse_group([r1, r2], [sa.NO_STOP, 0.5], ref={("r1", 4): 0.1})
    assert g["t_max"] == 4 and g["evaluated"] == [2, 4] and g["n"] == {"r1": 4, "r2": 3}
    row = next(r for r in g["chosen"] if r["run"] == "r1" and r["T"] == 4)
    test = sa.halves(sa.episodes_at(r1, 4))[1]
    assert (
        row["ref_theta"] == 0.1 and row["ref_fact_f1"] == sa.theta_metrics(test, 0.1)["fact_f1"] != row["test_fact_f1"]
    )
    assert not any("ref_theta" in r for r in g["chosen"] if r["run"] == "r2")


def brute_choice(eps, grid):
    """Simulates the online episode step by step (rl/eval/greedy.py's loop), then the plateau middle."""
    f1 = []
    for th in grid:
        total = 0.0
        for e in eps:
            kept = [a for t, a in enumerate(e.pred) if not any(0 < s <= t and e.q[s] <= th for s in range(len(e.q)))]
            total += sa.fact_scores(kept, e.sf)[1]
        f1.append(total / len(eps))
    best = [i for i, v in enumerate(f1) if v >= max(f1) - 1e-9]  # equal up to float rounding
    block = [i for i in itertools.takewhile(lambda i: i in best, range(best[0], len(grid)))]
    return grid[block[(len(block) - 1) // 2]]


def test_choose_theta_against_brute_force(tmp_path: Path) -> None:
    val, test = sa.halves(sa.episodes_at(loaded(tmp_path), 4))
    assert [e.key[1] for e in val] == ["a", "c"] and [e.key[1] for e in test] == ["b", "d"]
    grid = [sa.NO_STOP, *sa.thresholds_from("0:1:0.1")]
    # a's F1 is 1 for θ in [0.2, 0.9) (0.2 .. 0.8 on the grid), c's always 0: the middle is 0.5
    assert sa.choose_theta(val, grid) == 0.5 == brute_choice(val, grid)
    rng = random.Random(3)
    for _ in range(30):
        eps = []
        for k in range(rng.randint(1, 6)):
            pred = rng.sample(range(8), 5)
            q = sorted((round(rng.random(), 2) for _ in pred), reverse=rng.random() < 0.5)
            eps.append(
                sa.Episode(("f", str(k)), k, tuple(rng.sample(range(8), rng.randint(1, 3))), tuple(pred), tuple(q))
            )
        assert sa.choose_theta(eps, grid) == brute_choice(eps, grid)
    with pytest.raises(ValueError, match="ascending"):
        sa.choose_theta(val, [0.5, 0.1])


def test_refuses_logs_it_cannot_cut(tmp_path: Path) -> None:
    d = tmp_path / "r"
    beam = write_log(d, "b", T4, META | {"max_steps": 4, "planner": "beam"})
    with pytest.raises(SystemExit, match="beam"):
        sa.load_run("r", d, [beam])
    stopped = write_log(d, "s", T4, META | {"max_steps": 4, "stop_q_threshold": 0.5})
    with pytest.raises(SystemExit, match="early-stopped"):
        sa.load_run("r", d, [stopped])
    a = write_log(d, "e", T4, META | {"max_steps": 4})
    b = write_log(d, "e_T2", T2, META | {"max_steps": 2, "checkpoint_hash": "sha256:y"})
    with pytest.raises(SystemExit, match=r"settings differ beyond T \(checkpoint_hash\)"):
        sa.load_run("r", d, [a, b])
    one = sa.load_run("r", d, [write_log(d, "one", T4[:1], META | {"max_steps": 4})])
    with pytest.raises(SystemExit, match="1 sample.*two at least"):
        sa.analyse_group([one], [sa.NO_STOP])
    (d / "n.jsonl.gz").write_bytes((d / "e.jsonl.gz").read_bytes())
    with pytest.raises(SystemExit, match="no n.jsonl.meta.json"):
        sa.load_run("r", d, [d / "n.jsonl.gz"])


def test_cells_tables_and_theta_transfer(tmp_path: Path) -> None:
    src = tmp_path / "src"
    fixture_run(src, "r1")
    d2 = src / "r2"
    d2.mkdir()
    (d2 / "config.yaml").write_text("envs: {max_steps: 4}\n")
    write_log(d2, "eval_seed42_ns20", T4[::-1], META | {"max_steps": 4})  # same samples, other order
    write_log(d2, "eval_seed42_ns40", T4, META | {"max_steps": 4})
    write_log(src / "r1", "eval_seed42_ns40", T4, META | {"max_steps": 4})
    (tmp_path / "exp").mkdir()
    with tarfile.open(tmp_path / "exp" / "runs.tgz", "w:gz") as tar:
        tar.add(src, arcname=".")
    cells = tmp_path / "exp" / "cells.txt"
    tgz = tmp_path / "exp" / "runs.tgz"
    cells.write_text(
        "# a comment\n"
        f"short toy 20 trained {tgz} r1/eval_seed42_ns20*.jsonl.gz r2/eval_seed42_ns20*.jsonl.gz\n"
        f"long toy 40 trained {tgz} r*/eval_seed42_ns40.jsonl.gz theta_from=short  # the same runs\n"
    )
    # r2 has no T = 2 file: the group's budgets end at T = 4 for both runs, evaluated budgets = {4}
    res = sa.main(["--cells", str(cells), "--out", str(tmp_path / "out"), "--theta-grid", "0:1:0.1"])
    g = {x["cell"].name: x for x in res["groups"]}
    assert g["short"]["evaluated"] == [4] and g["short"]["t_max"] == 4 and g["short"]["n"] == {"r1": 4, "r2": 4}
    chosen = g["long"]["chosen"]
    assert [r["theta"] for r in chosen] == [0.5, 0.5] and all(r["ref_theta"] == 0.5 for r in chosen)
    # test half b, d at θ 0.5: F1 (0.5 + 0.4) / 2, EM 0, lost 1; fixed F1 2/3
    assert chosen[0]["test_fact_f1"] == pytest.approx(0.45) and chosen[0]["test_lost"] == 1.0
    assert chosen[0]["fixed_f1"] == pytest.approx(2 / 3) and chosen[0]["completable"] == 3
    md = (tmp_path / "out" / "t_and_stop.md").read_text()
    assert "| short | toy | 20 | trained | r1, r2 | 4 | 4 | 1 / 1 of 4 |" in md
    assert "| long | 4 | 0.50, 0.50 | 2.50 | 0.450 ± 0.000 | 0.667 |" in md
    assert "| long | 4 | 4.000 | 3.750 | 3.250 | 2.500 | 2.000 | 2.000 |" in md  # kept, θ none .. 0.5
    assert "short: 0.450 / 0.000 / 1.000 |" in md
    rows = list(csv.DictReader(open(tmp_path / "out" / "t_and_stop.csv")))
    budget = [r for r in rows if r["section"] == "budget" and r["group"] == "short" and r["run"] == "r1"]
    assert [(r["T"], r["fact_f1"]) for r in budget] == [("1", "0.333333"), ("2", "0.375"), ("3", "0.5"), ("4", "0.5")]
    bad = tmp_path / "exp" / "bad.txt"
    bad.write_text(f"x toy 20 trained {tgz} nothing/*.gz\n")
    with pytest.raises(SystemExit, match="x: no file in .*runs.tgz matches nothing"):
        sa.main(["--cells", str(bad)])
    bad.write_text(f"x toy 20 trained {tgz} r1/*.gz theta_from=y\n")
    with pytest.raises(SystemExit, match="names no earlier line"):
        sa.main(["--cells", str(bad)])


@pytest.mark.slow  # three evaluations of the tiny run: ~20 s on 2 cores
def test_offline_stop_is_the_online_stop(tiny_run: Path, tmp_path: Path) -> None:
    """The real evaluation loop (tiny untrained run, CPU): T = 2's picks are T = 4's first two, and an
    online eval.stop_q_threshold evaluation returns kept_online's prefix of the fixed-budget record."""

    def evaluate(*overrides: str) -> list[dict]:
        out = run(eval_cfg(tiny_run, f"output_dir={tmp_path}", "envs.num_sentences=12", "num_samples=6", *overrides))
        return [json.loads(x) for x in (tmp_path / (out["file"])).read_text().splitlines()]

    fixed = evaluate("envs.max_steps=4")
    short = evaluate("envs.max_steps=3")
    assert [r["pred_idx"][:3] for r in fixed] == [r["pred_idx"] for r in short]
    qs = sorted(q for r in fixed for q in r["q_values"][1:])
    theta = qs[len(qs) // 2]
    stopped = evaluate("envs.max_steps=4", f"eval.stop_q_threshold={theta}")
    kept = [r["pred_idx"][: sa.kept_online(r["q_values"], theta)] for r in fixed]
    assert [r["pred_idx"] for r in stopped] == kept and len({len(k) for k in kept}) > 1
    res = sa.main(
        ["--choose", str(tmp_path / "eval_seed42_ns12_T4.jsonl"), str(tmp_path / "eval_seed42_ns12_T3.jsonl")]
    )
    g = res["groups"][0]
    assert g["evaluated"] == [3, 4] and g["prefix"][next(iter(g["prefix"]))]["picks_differ"] == 0
    assert (tmp_path / "t_and_stop.md").is_file()


@pytest.mark.slow  # four archives unpacked and 22 groups: ~15-25 s on 2 cores
def test_committed_tables_are_what_the_command_makes(tmp_path: Path) -> None:
    """experiments/t_and_stop/ rebuilt from the committed archives (all but the line naming --out)."""
    here = ROOT / "experiments" / "t_and_stop"
    sa.main(["--cells", str(here / "cells.txt"), "--out", str(tmp_path)])
    for name in ("t_and_stop.md", "t_and_stop.csv"):
        got = (tmp_path / name).read_text().splitlines()
        want = (here / name).read_text().splitlines()
        assert [x for x in got if not x.startswith("Made by")] == [x for x in want if not x.startswith("Made by")]
