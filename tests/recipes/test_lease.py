"""scripts/lease.sh end to end on the CPU: setup copies the tree out with .code_version, start trains a
plan side by side, eval evaluates it, pack brings back one archive without checkpoints, and
scripts/seed_report.py reads that archive; the runs record the commit given at setup."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, TINY


@pytest.mark.slow
def test_a_lease_on_the_cpu(tmp_path: Path) -> None:
    common = [o for o in TINY if not o.startswith("logger.")]
    plan = tmp_path / "plan_train.txt"
    plan.write_text(
        f"#@common {' '.join(common)}\nw1_a_s1 0 seed=1\nw1_b_s1 0 seed=1 algo.pqn.hyperparams.alpha=0.02\n"
    )
    evals = tmp_path / "plan_eval.txt"
    evals.write_text("#@length_unit sentences\nw1_a_s1 0 3 8\nw1_b_s1 0 3 8\n")
    settings = tmp_path / "lease.env"
    settings.write_text(f"RUNS=runs/t\nTRAIN_PLANS={plan}\nEVAL_PLANS={evals}\nTIME_LIMIT=300\nMPS=0\n")
    code, out = tmp_path / "code", tmp_path / "out"
    out.mkdir()
    env = {
        **os.environ,
        "CODE": str(code),
        "OUT": str(out),
        "PYTHON": sys.executable,
        "SITE": str(tmp_path / "site"),
        "FIRST_LOOK": "1",
        "POLL": "2",
        "COMMIT": "abc1234",
    }

    def lease(*verb: str) -> str:
        done = subprocess.run(
            ["bash", str(ROOT / "scripts" / "lease.sh"), str(settings), *verb],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    lease("setup")
    assert (code / ".code_version").read_text().strip() == "abc1234" and (code / "train_q_rag.py").is_file()
    assert not (code / ".venv").exists() and not (code / ".git").exists()
    lease("start", "240")  # returns once nothing trains any more
    for name in ("w1_a_s1", "w1_b_s1"):
        assert (code / "runs" / "t" / name / "summary.json").is_file(), name
    lease("eval", "300")
    lease("pack")
    with tarfile.open(out / "round.tgz") as tar:
        names = tar.getnames()
        summary = json.loads(tar.extractfile("runs/t/w1_a_s1/eval_seed42_ns8.summary.json").read())
    assert not [n for n in names if n.endswith(".pt")] and "runs/t/w1_b_s1/metrics.jsonl" in names
    assert summary["n"] == 3 and summary["checkpoint"]["code_version"] == "abc1234"
    assert summary["checkpoint"]["step"] is not None
    report = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "seed_report.py"), str(out / "round.tgz")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0 and "| a | 1 |" in report.stdout and "| b | 1 |" in report.stdout


def test_setup_needs_the_commit(tmp_path: Path) -> None:
    settings = tmp_path / "lease.env"
    settings.write_text("RUNS=runs/t\nTRAIN_PLANS=x\nEVAL_PLANS=y\nMPS=0\n")
    env = {k: v for k, v in os.environ.items() if k != "COMMIT"} | {"CODE": str(tmp_path / "code")}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "lease.sh"), str(settings), "setup"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "COMMIT=" in done.stderr and not (tmp_path / "code").exists()
