"""scripts/collect_results.py and scripts/stopping_analysis.py on fixture files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.conftest import load_script


def write_summary(
    folder: Path,
    seed: int,
    n_sent: int,
    f1: float,
    em: float,
    task: str = "qa3_three-supporting-facts",
    planner: str = "greedy",
    max_steps: int = 6,
) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"eval_seed{seed}_ns{n_sent}" + ("_beam4x3" if planner == "beam" else "") + f"_T{max_steps}"
    settings = {
        "dataset": "babilong",
        "task": task,
        "num_sentences": n_sent,
        "split": "test",
        "seed": seed,
        "planner": planner,
        "beam_width": 4 if planner == "beam" else None,
        "beam_expand": 3 if planner == "beam" else None,
        "stop_q_threshold": None,
        "checkpoint": "model_best.pt",
        "oracle_stop": False,
        "max_steps": max_steps,
        "checkpoint_hash": f"{folder.name}-{seed}",
    }
    (folder / f"{stem}.summary.json").write_text(
        json.dumps(
            {
                "n": 10,
                "fact_em": em,
                "fact_f1": f1,
                "return": 0.9,
                "max_steps": 6,
                "settings": settings,
                "run": str(folder),
            }
        )
    )


def test_collect_results_table(tmp_path: Path) -> None:
    run_a, run_b = tmp_path / "runA", tmp_path / "runB"
    write_summary(run_a, 1, 50, 0.90, 0.80)
    write_summary(run_a, 1, 1200, 0.80, 0.70)
    write_summary(run_b, 2, 50, 0.70, 0.60)  # second seed of the same task
    write_summary(run_b, 2, 50, 0.95, 0.95, planner="beam")
    write_summary(run_b, 2, 160, 0.50, 0.40, task="qa1_single-supporting-fact")
    out = tmp_path / "results"
    res = load_script("collect_results").main([str(run_a), str(run_b), "--out", str(out), "--paper"])
    assert len(res["rows"]) == 5 and (out / "results.png").stat().st_size > 1000
    rows = list(csv.reader(open(out / "results.csv")))
    assert rows[0] == ["task", "metric", "1K", "4K", "32K"]
    qa3_f1 = next(r for r in rows if r[0] == "qa3_three-supporting-facts" and r[1] == "fact_f1")
    assert qa3_f1[2:] == ["0.8000", "", "0.8000"]  # mean over the two seeds at 1K
    assert any(r[0] == "qa3_three-supporting-facts [beam4x3]" for r in rows)
    md = (out / "results.md").read_text()
    assert "0.800 ± 0.141" in md and "| qa1_single-supporting-fact | – |" not in md
    long_rows = list(csv.DictReader(open(out / "results_long.csv")))
    assert {r["length"] for r in long_rows} == {"1K", "4K", "32K"}
    by_run = load_script("collect_results").main(
        [str(run_a), "--out", str(tmp_path / "r2"), "--by", "run", "--no-plot"]
    )
    assert {r["run"] for r in by_run["rows"]} == {"runA"}


def test_collect_results_needs_summaries(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no eval_seed"):
        load_script("collect_results").main([str(tmp_path), "--out", str(tmp_path / "r")])


def test_collect_results_refuses_to_average_other_settings(tmp_path: Path, capsys) -> None:
    """A seed-42 T=1 file and a seed-7 T=2 file of one run are not two seeds of one result."""
    run = tmp_path / "run"
    write_summary(run, 42, 50, 0.95, 0.95, max_steps=1)
    write_summary(run, 7, 50, 0.65, 0.65, max_steps=2)
    collect = load_script("collect_results")
    with pytest.raises(SystemExit, match=r"different settings \(max_steps\)") as e:
        collect.main([str(run), "--out", str(tmp_path / "r"), "--no-plot"])
    assert "eval_seed42_ns50_T1.summary.json: max_steps=1" in str(e.value)
    assert not (tmp_path / "r").exists()
    res = collect.main([str(run), "--out", str(tmp_path / "r"), "--no-plot", "--split-mixed"])
    md = (tmp_path / "r" / "results.md").read_text()
    assert "| qa3_three-supporting-facts [max_steps=1] | 0.950 |" in md
    assert "| qa3_three-supporting-facts [max_steps=2] | 0.650 |" in md and "0.800" not in md
    assert len(res["rows"]) == 2


def test_collect_results_writes_only_where_told(tmp_path: Path, monkeypatch) -> None:
    write_summary(tmp_path / "run", 1, 50, 0.9, 0.8)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):  # argparse: --out is required
        load_script("collect_results").main([str(tmp_path / "run"), "--no-plot"])
    assert not (tmp_path / "results").exists()


def test_stopping_analysis(tmp_path: Path) -> None:
    # gold {5, 7}; Q high while gold is missing, low once all gold is held
    recs = [
        {"pred_idx": [5, 7, 1, 2], "sf_idx": [5, 7], "q_values": [0.9, 0.8, 0.1, 0.05]},  # complete at 2
        {"pred_idx": [3, 5, 7, 1], "sf_idx": [5, 7], "q_values": [0.95, 0.7, 0.6, 0.15]},  # complete at 3
        {"pred_idx": [3, 4, 1, 2], "sf_idx": [5, 7], "q_values": [0.5, 0.4, 0.3, 0.2]},  # never complete
    ]
    log = tmp_path / "eval_seed0_ns50.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in recs))
    sa = load_script("stopping_analysis")
    res = sa.main([str(log)])
    rows = {round(r["threshold"], 1): r for r in res["rows"]}
    assert len(rows) == 13 and min(rows) == -0.1 and max(rows) == 1.1
    assert rows[-0.1]["mean_kept_len"] == 4 and rows[-0.1]["late"] == 1.0
    r = rows[0.5]  # strict <: stop before the first q < 0.5
    assert r["mean_kept_len"] == pytest.approx((2 + 3 + 1) / 3)
    assert (r["early"], r["perfect"], r["late"]) == (0.0, 1.0, 0.0)
    assert r["fact_em"] == pytest.approx(2 / 3) and r["n_completable"] == 2
    assert r["tpr_continue"] == 1.0 and r["fpr_continue"] == 0.0
    assert rows[1.1]["mean_kept_len"] == 0 and rows[1.1]["fact_f1"] == 0.0
    assert res["auc"] == 1.0  # the Q values separate "continue" from "stop" perfectly here
    assert sa.roc_auc([0.1, 0.1], [True, False]) == 0.5
    md = (tmp_path / "eval_seed0_ns50.stopping.md").read_text()
    assert "ROC AUC of q_values for 'continue': 1.000" in md
    assert (tmp_path / "eval_seed0_ns50.stopping.csv").read_text().startswith("threshold,")


def test_collect_results_labels_babilong_token_sizing() -> None:
    length_of = load_script("collect_results").length_of
    tokens = {"dataset": "babilong", "num_sentences": None, "length": {"unit": "tokens", "num_tokens": 32000}}
    assert length_of(tokens) == ("32K", 32000.0)
    assert length_of(dict(tokens, length={"unit": "tokens", "num_tokens": 1000000})) == ("1M", 1e6)
    assert length_of({"dataset": "babilong", "num_sentences": 1200}) == ("32K", 32e3)  # the sentence grid
