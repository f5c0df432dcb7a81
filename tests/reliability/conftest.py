"""Fixtures of the fault-injection tests (helpers in harness.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.harness import run_cfg, step_return


@pytest.fixture
def growing_eval(monkeypatch):
    from rl.trainer import Trainer

    monkeypatch.setattr(Trainer, "in_training_eval", step_return)


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory) -> Path:
    """The uninterrupted run every interrupted one must end up equal to."""
    from rl.trainer import Trainer, run

    run_dir = tmp_path_factory.mktemp("reference") / "run"
    mp = pytest.MonkeyPatch()
    mp.setattr(Trainer, "in_training_eval", step_return)
    try:
        run(run_cfg(run_dir))
    finally:
        mp.undo()
    return run_dir
