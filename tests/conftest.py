"""Shared test helpers: compose the real Hydra configs with tiny budgets."""

from __future__ import annotations

import importlib.util
import tarfile
from pathlib import Path
from types import ModuleType

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import open_dict

from rl.run.config import rename_overrides  # (importing it registers ${qrag_root:})

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"


def load_script(name: str, where: str = "scripts") -> ModuleType:
    """Import ``<where>/<name>.py`` (``scripts/``, ``examples/``, or a round's own script under
    ``experiments/<round>/``; none is a package) so its functions can be tested."""
    spec = importlib.util.spec_from_file_location(name, ROOT / where / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


CONFIGS = str(ROOT / "configs")

# A 2-layer MiniLM, 8-sentence haystacks, 2 envs: a full training run takes seconds on 2 cores.
TINY = [
    "experiment=demo",
    "algo.model.predictor.num_layers=2",
    "envs.task=qa2_two-supporting-facts",
    "envs.num_sentences=8",
    "envs.max_steps=2",
    "batch_size=4",
    "envs_parallel=2",
    "accumulate_grads=1",
    "learning_start=2",
    "steps_count=4",
    "eval_interval=2",
    "eval_episodes=4",
    "final_eval_episodes=4",
    "max_action_length=16",
    "max_action_length_in_memory=16",
    "logger.progress_bar=false",
    "algo.scheduler.warmup=1",
]

# The demo task (experiment=demo) cut for the "learns the demo" tests: 10-sentence haystacks
# instead of 20 (half the chunks to embed at every acting step and evaluation episode), 30
# validation episodes for model selection and 60 held-out test samples; each test sets its
# optimiser steps. The untrained retriever scores held-out fact F1 0.48 here and the trained ones
# 0.77 (DQN, 50 steps) to 1.0 (SARSA, SAC-D, 40 steps); one whose loss does not reach the
# encoders stays at 0.48, so the tests' gain ≥ 0.2 needs a learner that learns (docs/TESTING.md).
DEMO_CUT = [
    "experiment=demo",
    "envs.num_sentences=10",
    "eval_episodes=30",
    "final_eval_episodes=60",
    "logger.progress_bar=false",
]


def chunk_embeddings(qnet, ep, which: str, train: bool):
    """The Q-network's cached un-rotated chunk embeddings u_j of ``ep``'s sample ('online' E_a or
    'target' E_a′), embedded first when missing or stale: the cache tests compare them by identity."""
    qnet._embed_chunks([ep], which, train)
    return qnet.caches.chunks[which].get(qnet._chunk_owner(ep)).emb


def compose_cfg(overrides: list[str], config_name: str = "training", return_hydra_config: bool = False):
    with initialize_config_dir(config_dir=CONFIGS, version_base="1.3"):
        return compose(config_name, overrides=overrides, return_hydra_config=return_hydra_config)


def read_plan(path: Path) -> tuple[list[str], dict[str, list[str]]]:
    """A launch plan (scripts/launch_plan.sh): the `#@common` overrides and each run's own ones.
    Lines are `<name> <gpu> <override> ...`; other `#` lines (e.g. `#deferred ...`) are comments."""
    common, runs = [], {}
    for line in path.read_text().splitlines():
        if line.startswith("#@common "):
            common += line.split()[1:]
        elif line.strip() and not line.startswith("#"):
            name, _gpu, *ov = line.split()
            runs[name] = rename_overrides(ov)  # as train_q_rag.py reads them (old key names)
    return common, runs


@pytest.fixture(scope="session")
def committed_runs(tmp_path_factory) -> dict[str, Path]:
    """{round: folder} of every round's committed raw records (``experiments/<round>/runs.tar.xz``),
    unpacked once per session."""
    out = {}
    for archive in sorted(EXPERIMENTS.glob("*/runs.tar.xz")):
        out[archive.parent.name] = tmp_path_factory.mktemp(archive.parent.name)
        with tarfile.open(archive) as tar:
            tar.extractall(out[archive.parent.name], filter="data")
    return out


@pytest.fixture
def tiny_cfg(tmp_path):
    def make(*extra: str, run_dir: Path | None = None):
        cfg = compose_cfg(TINY + list(extra))
        with open_dict(cfg):
            cfg.run_dir = str(run_dir or tmp_path / "run")
        return cfg

    return make


def interrupt_after(monkeypatch: pytest.MonkeyPatch, cls: type, steps: int = 2):
    """Make ``cls.micro_step`` raise KeyboardInterrupt once ``steps`` optimiser steps are done (an
    interruption between checkpoints, in process). Returns the function that undoes it."""
    original = cls.micro_step

    def interrupted(self):
        if self.counters.optimizer_steps >= steps:
            raise KeyboardInterrupt
        return original(self)

    monkeypatch.setattr(cls, "micro_step", interrupted)
    return lambda: monkeypatch.setattr(cls, "micro_step", original)
