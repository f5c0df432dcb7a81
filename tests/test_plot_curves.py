"""experiments/parity_speed/plot_curves.py on tiny metrics.jsonl files in the format rl/run/train.py writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import load_script


def write_run(d: Path, returns: dict[int, float], fact_em: dict[int, float]) -> Path:
    """Rows as Trainer.record_eval writes them: step 0 without lr/alpha, later rows with them."""
    d.mkdir(parents=True)
    with open(d / "metrics.jsonl", "w", encoding="utf-8") as f:
        for step, r in returns.items():
            row = {
                "step": step,
                "env_steps": step * 64,
                "eval/return": r,
                "eval/fact_em": fact_em[step],
                "eval/fact_f1": fact_em[step] / 2,
                "eval/split": "validation",
            }
            if step:
                row.update(lr=2.5e-5, alpha=0.005)
            f.write(json.dumps(row) + "\n")
    return d


def test_overlay_and_table(tmp_path, capsys):
    a = write_run(tmp_path / "a", {0: 0.5, 25: 0.7, 50: 0.9}, {0: 0.5, 25: 0.8, 50: 1.0})
    b1 = write_run(tmp_path / "b1", {0: 0.5, 25: 0.6, 50: 0.8}, {0: 0.5, 25: 0.6, 50: 0.9})
    # a second seed of "off", with one extra step no other run has: the table must skip it
    b2 = write_run(tmp_path / "b2", {0: 0.5, 25: 0.8, 50: 0.6, 75: 0.1}, {0: 0.5, 25: 0.8, 50: 0.9, 75: 0.0})
    out, table = tmp_path / "plots" / "p.png", tmp_path / "p.md"
    stats = load_script("plot_curves", "experiments/parity_speed").main(
        [
            "--run",
            f"on={a}",
            "--run",
            f"off={b1}",
            "--run",
            f"off={b2}",
            "--metrics",
            "return,fact_em,lr",
            "--out",
            str(out),
            "--table",
            str(table),
        ]
    )
    assert out.stat().st_size > 0
    # off mean: return {0: .5, 25: .7, 50: .7} -> |diff| 0, 0, .2 ; fact_em {0: .5, 25: .7, 50: .9} -> 0, .1, .1
    assert stats["return"] == pytest.approx((0.2, 0.2 / 3))
    assert stats["fact_em"] == pytest.approx((0.1, 0.2 / 3))
    assert stats["lr"] == pytest.approx((0.0, 0.0))  # a non-eval key is read as is (steps 25, 50 only)
    md = table.read_text()
    assert md.strip() == capsys.readouterr().out.strip()  # printed and written tables are the same
    assert "| 50 | 0.9000 | 0.7000 | 0.2000 |" in md
    assert "| 75 |" not in md
    assert "max abs diff: 0.2000, mean abs diff: 0.0667 over 3 steps" in md


def test_missing_metric_names_file_and_keys(tmp_path):
    a = write_run(tmp_path / "a", {0: 0.5}, {0: 0.5})
    with pytest.raises(SystemExit) as e:
        load_script("plot_curves", "experiments/parity_speed").main(
            ["--run", f"on={a}", "--metrics", "return,recall", "--out", str(tmp_path / "p.png")]
        )
    msg = str(e.value)
    assert str(a / "metrics.jsonl") in msg and "'recall'" in msg and "'eval/return'" in msg
