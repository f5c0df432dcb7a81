"""Resume on a GPU (``cuda`` marker: skipped without one; run on the GPU machine).

The CPU kill/resume tests cannot see a tensor that a checkpoint load puts on the wrong device: on a
GPU, loading ``model_last.pt`` onto the card once moved the RNG states and DQN's replay rows there and
resume stopped with "RNG state must be a torch.ByteTensor". Each learner is interrupted after two
optimiser steps and resumed to the end."""

import json

import pytest
import torch

from rl.learners import LEARNERS
from rl.run.train import run
from tests.conftest import interrupt_after

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("learner", ["pqn", "dqn", "sarsa", "sac_d"])
def test_resume_on_gpu(tiny_cfg, tmp_path, monkeypatch, learner):
    extra = ("device=cuda", f"learner={learner}")
    if learner == "dqn":
        extra += ("algo.dqn.hyperparams.learning_starts=4",)
    cls = LEARNERS[learner]
    restore = interrupt_after(monkeypatch, cls)
    with pytest.raises(KeyboardInterrupt):
        run(tiny_cfg(*extra))
    restore()
    summary = run(tiny_cfg(*extra, "resume=true"))
    assert summary["optimizer_steps"] == 4
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 2, 4]
