"""`train_q_rag.py -m` sweeps: several runs at once (hydra/launcher=parallel, joblib), each on a
GPU chosen from its job number; the SLURM preset; jobs through submitit's local executor."""

import json
import re
import subprocess
import sys

import pytest
import torch
import yaml

from rl.distributed import pick_device
from rl.run.config import PROJECT_ROOT, sweep_jobs
from tests.conftest import TINY, compose_cfg

ARGS = [a for a in TINY if not a.startswith(("steps_count", "eval_interval", "final_eval_episodes"))] + [
    "steps_count=1",
    "eval_interval=1",
    "final_eval_episodes=0",
]
RUN_FILES = (
    "config.yaml",
    "config_resolved.yaml",
    "model_last.pt",
    "model_best.pt",
    "metrics.jsonl",
    "summary.json",
    "train_q_rag.log",
    ".hydra/overrides.yaml",
)


def fake_gpus(monkeypatch, n):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n)


def test_sweep_jobs_are_spread_over_the_gpus_by_job_number(monkeypatch):
    fake_gpus(monkeypatch, 3)
    assert [str(pick_device("auto", job_num=k)) for k in range(7)] == [
        "cuda:0",
        "cuda:1",
        "cuda:2",
        "cuda:0",
        "cuda:1",
        "cuda:2",
        "cuda:0",
    ]
    assert str(pick_device("cuda", job_num=4)) == "cuda:1"  # a bare "cuda" is spread too
    assert str(pick_device("auto")) == "cuda:0"  # not in a sweep
    assert str(pick_device("cuda:2", job_num=0)) == "cuda:2" and str(pick_device("cpu", job_num=1)) == "cpu"
    assert sweep_jobs(2) == 6  # jobs_per_gpu x visible GPUs run at once
    fake_gpus(monkeypatch, 0)
    assert str(pick_device("auto", job_num=5)) == "cpu" and sweep_jobs(2) == 2
    with pytest.raises(ValueError, match="jobs_per_gpu"):
        sweep_jobs(0)


def test_slurm_preset_keys():
    cfg = compose_cfg(
        ["hydra/launcher=slurm", "hydra.launcher.partition=gpu", "hydra.launcher.timeout_min=90"],
        return_hydra_config=True,
    )
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert (launcher.partition, launcher.timeout_min, launcher.gpus_per_node) == ("gpu", 90, 1)


def sweep(tmp_path, *extra):
    out = subprocess.run(
        [sys.executable, "train_q_rag.py", "-m", *ARGS, "seed=1,2", f"hydra.sweep.dir={tmp_path}", *extra],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    runs = sorted(p for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert [p.name for p in runs] == ["0_qa2_two-supporting-facts_seed1", "1_qa2_two-supporting-facts_seed2"]
    for job, rd in enumerate(runs):
        missing = [f for f in RUN_FILES if not (rd / f).exists()]
        assert not missing, f"{rd.name} lacks {missing}"
        assert yaml.safe_load((rd / ".hydra/overrides.yaml").read_text()).count(f"seed={job + 1}") == 1
        assert yaml.safe_load((rd / "config_resolved.yaml").read_text())["seed"] == job + 1
        assert json.loads((rd / "summary.json").read_text())["optimizer_steps"] == 1
        assert re.search(rf"device cpu \(sweep job {job}\)", (rd / "train_q_rag.log").read_text())
    return [json.loads((rd / "summary.json").read_text())["train_loop"] for rd in runs]


def test_joblib_sweep_runs_jobs_at_once(tmp_path):
    loops = sweep(tmp_path, "hydra/launcher=parallel", "jobs_per_gpu=2")
    hydra_cfg = yaml.safe_load((tmp_path / "0_qa2_two-supporting-facts_seed1/.hydra/hydra.yaml").read_text())
    assert hydra_cfg["hydra"]["launcher"]["_target_"].endswith("JoblibLauncher")
    # two processes at once: the training loops overlap in time
    assert max(lp["start"] for lp in loops) < min(lp["end"] for lp in loops), loops


def test_submitit_local_sweep(tmp_path):
    sweep(tmp_path, "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=15")
    assert list((tmp_path / ".submitit").iterdir())  # submitit's job folders (pickled job, logs)
