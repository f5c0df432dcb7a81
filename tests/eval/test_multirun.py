"""`eval_retriever.py -m` sweeps over context lengths (one process, Hydra multirun)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rl.run.config import PROJECT_ROOT


def sweep(tiny_run: Path, tmp_path: Path, out: Path, *overrides: str) -> subprocess.CompletedProcess:
    """`eval_retriever.py -m` of the tiny run over ``overrides``, 2 samples each, into ``out``."""
    cmd = [
        sys.executable,
        str(PROJECT_ROOT / "eval_retriever.py"),
        "-m",
        f"pretrained_path={tiny_run}",
        *overrides,
        "num_samples=2",
        "device=cpu",
        "progress_bar=false",
        f"output_dir={out}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]
    env = {**os.environ, "HYDRA_FULL_ERROR": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)


def test_multirun_sweep(tiny_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "evals"
    res = sweep(tiny_run, tmp_path, out, "envs.num_sentences=10,14")
    assert res.returncode == 0, res.stderr[-3000:]
    for n in (10, 14):
        summary = json.loads((out / f"eval_seed42_ns{n}.summary.json").read_text())
        assert summary["n"] == 2 and summary["settings"]["num_sentences"] == n
    assert "envs.num_sentences = 10" in res.stdout and "n=2" in res.stdout
    assert not (tmp_path / "outputs").exists() and not (tiny_run / ".eval_hydra").exists()


def test_multirun_sweep_over_t(tiny_run: Path, tmp_path: Path) -> None:
    """A sweep over T stopped at its second value: both wrote eval_seed42_ns10.jsonl, and the second
    was refused as made with other settings (docs/REPRODUCE.md's Table 4 sweep failed the same way)."""
    out = tmp_path / "evals"
    res = sweep(tiny_run, tmp_path, out, "envs.num_sentences=10", "envs.max_steps=1,2")
    assert res.returncode == 0, res.stderr[-3000:]
    # the run's own T (2) keeps today's name; another T is named
    for stem, t in (("eval_seed42_ns10_T1", 1), ("eval_seed42_ns10", 2)):
        summary = json.loads((out / f"{stem}.summary.json").read_text())
        assert summary["n"] == 2 and summary["max_steps"] == t


def test_missing_pretrained_path_cli(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "eval_retriever.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert res.returncode == 2 and "pretrained_path is required" in res.stderr
