"""kill -9 of a DQN, SARSA or SAC-D run, then ``resume=true``: the finished run's model_last.pt
equals an uninterrupted run's entry for entry (weights, optimiser and scheduler, counters, acting
generator, environments, global RNGs, and each learner's own state: DQN's replay buffer, waiting
n-step transitions and ε, SAC-D's learned temperature and its optimiser). The resume reads the
checkpoint with ``weights_only=True`` (runstore/__init__.py), so every entry must be tensors and plain
values. PQN's kills are in test_kills.py (SFT has no state of its own beyond what PQN's tests cover)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from rl.run.run_folder import RunFolderError
from rl.run.train import run
from runstore import load_checkpoint
from tests.reliability.harness import metrics, run_cfg
from tests.reliability.test_kills import kill_at

# Three optimiser steps, evaluated at steps 0, 2 and 3. The kill comes when the step-3 checkpoint
# starts, so the resume continues from step 2's. The settings make that checkpoint hold
# each learner's own state mid-flight (checked below): TINY's episodes last 2 steps, so DQN's 3
# warm-up + 2 vectorised steps leave 2-step transitions half assembled, and SAC-D's α has moved.
LEARNERS = {
    "dqn": [
        "learner=dqn",
        "algo.dqn.hyperparams.n_step=2",
        "algo.dqn.hyperparams.learning_starts=6",
        "algo.dqn.hyperparams.epsilon_decay_steps=8",
    ],
    "sarsa": ["learner=sarsa", "algo.sarsa.hyperparams.n_steps=2", "learning_start=1"],
    "sac_d": ["learner=sac_d", "algo.sac_d.hyperparams.alpha_lr=0.1", "learning_start=1"],
}
STEPS = ["steps_count=3", "eval_interval=2"]
KILL = "save-start model_last.pt #3"


def assert_same(a: Any, b: Any, where: str) -> None:
    """Bit-equal nested checkpoint entries (tensors, dicts, lists, tuples, numbers, strings)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{where}: keys {sorted(a)} vs {sorted(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), where
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


def learner_midway(name: str, state: dict[str, Any]) -> None:
    """The checkpoint the resume starts from holds what the learner carries between steps."""
    assert state["counters"]["optimizer_steps"] == 2
    if name == "dqn":
        assert state["replay"]["size"] > 0 and any(state["nstep"]["queues"]), "buffer and n-step queue filled"
        assert state["epsilon"] < 1.0
    if name == "sac_d":
        assert float(state["temperature"]["log_alpha"]) != pytest.approx(math.log(0.01))
        assert state["temperature"]["optimizer"]["state"], "log α's Adam moments"


@pytest.mark.parametrize("name", list(LEARNERS))
def test_kill_and_resume_is_bit_exact(name, tmp_path, growing_eval):
    extra = [*LEARNERS[name], *STEPS]
    ref, rd = tmp_path / "reference", tmp_path / "run"
    run(run_cfg(ref, *extra))
    kill_at(rd, KILL, extra=tuple(extra))
    assert [r["step"] for r in metrics(rd)] == [0, 2]
    learner_midway(name, load_checkpoint(rd / "model_last.pt")["learner"])  # weights_only=True
    run(run_cfg(rd, *extra, "resume=true"))
    assert metrics(rd) == metrics(ref)
    for f in ("model_last.pt", "model_best.pt"):
        got, want = load_checkpoint(rd / f), load_checkpoint(ref / f)
        assert got.keys() == want.keys()
        # the config differs in run_dir only; weights_version is a cache key that a resume moves on
        # on purpose (every cached embedding is recomputed), not learner state; the checksum covers
        # both, so it differs too (each file's own is verified by load_checkpoint)
        got.pop("config"), want.pop("config")
        got.pop("checksum"), want.pop("checksum")
        for state in (got, want):
            state["learner"].pop("weights_version", None)
        assert_same(got, want, f)
    assert not [p.name for p in rd.iterdir() if ".tmp" in p.name]
    if name == "dqn":
        resume_with_other_settings(rd, extra)


def resume_with_other_settings(rd, extra: list[str]) -> None:
    """Resuming under another learner or another buffer size: one message naming the change, and
    the run folder is left as it was (a resume takes the run's own config: test_resume_config.py)."""
    before = {p.name: p.stat().st_mtime_ns for p in rd.iterdir()}
    own = f"resume=true continues {rd} with its own config (config.yaml); this command changes "
    with pytest.raises(RunFolderError) as e:
        run(run_cfg(rd, *STEPS, "learner=pqn", "resume=true"))
    assert str(e.value).startswith(own + "algo.objective: 'dqn' (run) -> 'pqn'")
    with pytest.raises(RunFolderError) as e:
        run(run_cfg(rd, *extra, "algo.dqn.hyperparams.buffer_size=50", "resume=true"))
    assert str(e.value).startswith(own + "algo.dqn.hyperparams.buffer_size: 100000 (run) -> 50. ")
    assert {p.name: p.stat().st_mtime_ns for p in rd.iterdir()} == before
