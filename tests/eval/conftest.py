"""Fixtures for the evaluation tests: a tiny run folder made without training.

The run holds what eval_retriever.py reads from a training run: ``config.yaml`` (the unresolved
training config, without the hydra node) and ``model_best.pt`` (``state["learner"]["agent"]`` =
the agent's state dict, ``state["config"]`` = the resolved config). The agent is the offline
MiniLM cut to one layer, untrained: the tests check the evaluation machinery, not the model.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from rl.run.config import PROJECT_ROOT, without_hydra

TRAIN_OVERRIDES = [
    "experiment=demo",
    "algo.model.predictor.num_layers=1",
    "envs.num_sentences=10",
    "envs.max_steps=2",
    "seed=7",
    "logger.tensorboard=false",
]


def compose_cfg(name: str, overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "configs"), version_base="1.3"):
        return compose(config_name=name, overrides=overrides)


def write_run_config(run_dir: Path, overrides: list[str] = TRAIN_OVERRIDES) -> DictConfig:
    cfg = compose_cfg("training", overrides)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(without_hydra(cfg)))
    return cfg


def eval_cfg(run_dir: Path, *overrides: str) -> DictConfig:
    """The eval config as eval_retriever.py composes it (Hydra node included)."""
    base = [f"pretrained_path={run_dir}", "progress_bar=false", "device=cpu"]
    return compose_cfg("testing", base + list(overrides))


@pytest.fixture(scope="session")
def config_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder with only config.yaml (enough for the merge tests)."""
    run_dir = tmp_path_factory.mktemp("config_run")
    write_run_config(run_dir)
    return run_dir


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder with config.yaml and an (untrained) model_best.pt."""
    from rl.run.build import qnet_from_cfg

    run_dir = tmp_path_factory.mktemp("tiny_run")
    cfg = write_run_config(run_dir)
    qnet = qnet_from_cfg(cfg, torch.device("cpu"))
    state = {
        "learner": {"agent": qnet.state_dict()},
        "config": OmegaConf.to_container(without_hydra(cfg), resolve=True),
    }
    torch.save(state, run_dir / "model_best.pt")
    return run_dir
