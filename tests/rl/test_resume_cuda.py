"""Resume on a GPU (``cuda`` marker: skipped without one; run on the GPU machine).

The CPU kill/resume tests cannot see a tensor that a checkpoint load puts on the wrong device: on a
GPU, loading ``model_last.pt`` onto the card once moved the RNG states and DQN's replay rows there and
resume stopped with "RNG state must be a torch.ByteTensor". Each learner is interrupted after two
optimiser steps and resumed to the end."""

import json

import pytest
import torch

from rl.agents import LEARNERS
from rl.trainer import run

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("learner", ["pqn", "dqn", "sarsa", "sac_d"])
def test_resume_on_gpu(tiny_cfg, tmp_path, monkeypatch, learner):
    extra = ("device=cuda", f"learner={learner}")
    if learner == "dqn":
        extra += ("algo.dqn.hyperparams.learning_starts=4",)
    cls = LEARNERS[learner]
    original = cls.micro_step

    def interrupt_after_two(self):
        if self.counters.optimizer_steps >= 2:
            raise KeyboardInterrupt
        return original(self)

    monkeypatch.setattr(cls, "micro_step", interrupt_after_two)
    with pytest.raises(KeyboardInterrupt):
        run(tiny_cfg(*extra))
    monkeypatch.setattr(cls, "micro_step", original)
    summary = run(tiny_cfg(*extra, "resume=true"))
    assert summary["optimizer_steps"] == 4
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 2, 4]
