"""Fixtures of the fault-injection tests (helpers in harness.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from rl.run.config import without_hydra
from tests.eval.conftest import write_run_config
from tests.reliability.harness import THREADS, run_cfg, step_return


@pytest.fixture(autouse=True)
def pinned_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def growing_eval(monkeypatch):
    from rl.run.train import Trainer

    monkeypatch.setattr(Trainer, "in_training_eval", step_return)


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory) -> Path:
    """The uninterrupted run every interrupted one must end up equal to."""
    from rl.run.train import Trainer, run

    run_dir = tmp_path_factory.mktemp("reference") / "run"
    mp = pytest.MonkeyPatch()
    mp.setattr(Trainer, "in_training_eval", step_return)
    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        run(run_cfg(run_dir))
    finally:
        torch.set_num_threads(before)
        mp.undo()
    return run_dir


@pytest.fixture(scope="session")
def eval_run_dir(tmp_path_factory) -> Path:
    """A run folder with config.yaml and an untrained model_best.pt, as in tests/eval."""
    from rl.run.build import qnet_from_cfg

    run_dir = tmp_path_factory.mktemp("eval_run")
    cfg = write_run_config(run_dir)
    qnet = qnet_from_cfg(cfg, torch.device("cpu"))
    torch.save(
        {"learner": {"agent": qnet.state_dict()}, "config": OmegaConf.to_container(without_hydra(cfg), resolve=True)},
        run_dir / "model_best.pt",
    )
    return run_dir
