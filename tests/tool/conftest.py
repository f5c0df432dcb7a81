"""The tool tests reuse the evaluation tests' tiny run folder (untrained one-layer MiniLM, qa1,
T = 2): the tool must drive the evaluation's code paths, so the same run serves both.
``trained_run`` is a real training run of one optimiser step, whose state and chunk encoders
differ as every trained run's do (the export's sentence-transformers folder is tested on it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import open_dict

from tests.conftest import compose_cfg
from tests.eval.conftest import eval_cfg, tiny_run  # noqa: F401  (fixture and helper re-exported)
from tests.reliability.harness import TINY_RUN

# e5-style prefixes, so that the export's prompts are exercised too
PREFIXES = ["algo.model.query_prefix='query: '", "algo.model.passage_prefix='passage: '"]


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One optimiser step of the 1-layer MiniLM on qa2 (no warm-up, so the step moves the weights);
    its ``model_last.pt`` holds the stepped encoders."""
    from rl.run.train import run

    run_dir = tmp_path_factory.mktemp("trained") / "run"
    cfg = compose_cfg(TINY_RUN + PREFIXES)
    with open_dict(cfg):
        cfg.run_dir = str(run_dir)
    run(cfg)
    return run_dir
