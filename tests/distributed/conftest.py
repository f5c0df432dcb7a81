"""Helpers for the 2-process tests: torchrun on CPU (gloo, 127.0.0.1) and a tiny trained run."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import open_dict

from tests.conftest import ROOT, TINY, compose_cfg

WORKER = str(Path(__file__).with_name("worker.py"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(args: list[str], cwd: Path, nproc: int = 2) -> subprocess.CompletedProcess:
    """``torchrun --nproc_per_node nproc <args>`` from ``cwd`` (an empty folder, so that a stray
    file written by any rank shows up)."""
    cwd.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc_per_node",
        str(nproc),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        *args,
    ]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-step training run with the TINY overrides (1 process), for the evaluation tests."""
    from rl.run.train import run

    run_dir = tmp_path_factory.mktemp("trained") / "run"
    cfg = compose_cfg(TINY + ["steps_count=2", "eval_interval=2", "final_eval_episodes=0", "logger.tensorboard=false"])
    with open_dict(cfg):
        cfg.run_dir = str(run_dir)
    run(cfg)
    return run_dir
