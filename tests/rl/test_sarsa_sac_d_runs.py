"""SARSA and SAC-D end to end: bit-exact resume on CPU, and both learn the offline demo task."""

import math

import pytest
import torch
from omegaconf import open_dict

from rl.learners.sac_d import SacDLearner
from rl.learners.sarsa import SarsaLearner
from rl.run.train import run
from rl.run.validate import ConfigError, check_training
from tests.conftest import DEMO_CUT, TINY, compose_cfg, interrupt_after
from tests.rl.test_train_run import read_metrics

LEARNERS = {"sarsa": SarsaLearner, "sac_d": SacDLearner}
# n-step targets that reach past one step, and a temperature that learns (TINY's episodes have
# two steps, so SAC-D computes next-state values and moves α)
EXTRA = {
    "sarsa": ["learner=sarsa", "algo.sarsa.hyperparams.n_steps=2", "learning_start=1"],
    "sac_d": ["learner=sac_d", "algo.sac_d.hyperparams.alpha_lr=0.1", "learning_start=1"],
}


@pytest.mark.parametrize("name", list(LEARNERS))
def test_resume_equals_uninterrupted(name, tiny_cfg, tmp_path, monkeypatch):
    cls = LEARNERS[name]
    full_dir, cut_dir = tmp_path / "full", tmp_path / "cut"
    run(tiny_cfg(*EXTRA[name], run_dir=full_dir))
    restore = interrupt_after(monkeypatch, cls)
    with pytest.raises(KeyboardInterrupt):
        run(tiny_cfg(*EXTRA[name], run_dir=cut_dir))
    restore()
    assert [r["step"] for r in read_metrics(cut_dir)] == [0, 2]
    run(tiny_cfg(*EXTRA[name], "resume=true", run_dir=cut_dir))
    assert read_metrics(cut_dir) == read_metrics(full_dir)  # rows hold lr and α
    a = torch.load(full_dir / "model_last.pt", weights_only=False)["learner"]
    b = torch.load(cut_dir / "model_last.pt", weights_only=False)["learner"]
    for k in a["agent"]:
        torch.testing.assert_close(a["agent"][k], b["agent"][k], atol=0, rtol=0)
    if name == "sac_d":  # the learned temperature moved, and was restored exactly
        assert float(a["temperature"]["log_alpha"]) != pytest.approx(math.log(0.01))
        assert float(a["temperature"]["log_alpha"]) == float(b["temperature"]["log_alpha"])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(LEARNERS))
def test_learns_the_demo_task(name, tmp_path):
    """``experiment=demo learner=<name>`` cut down (tests/conftest.py ``DEMO_CUT``, 40 optimiser
    steps, model selection at steps 0 and 40): held-out fact F1 rises by at least 0.2 over the
    untrained retriever. A learner whose loss does not reach the encoders gains 0 here."""
    cfg = compose_cfg(DEMO_CUT + [f"learner={name}", "steps_count=40", "eval_interval=40"])
    with open_dict(cfg):
        cfg.run_dir = str(tmp_path / "run")
    summary = run(cfg)
    gain = summary["trained/fact_f1"] - summary["untrained/fact_f1"]
    assert gain >= 0.2, summary


@pytest.mark.parametrize(
    "override,line",
    [
        (
            ["learner=sarsa", "algo.sarsa.hyperparams.n_steps=0"],
            "algo.sarsa.hyperparams.n_steps=0: expected an integer >= 1",
        ),
        (["learner=sarsa", "algo.sarsa.hyperparams.alpha=0"], "algo.sarsa.hyperparams.alpha=0: expected a number > 0"),
        (
            ["learner=sac_d", "algo.sac_d.hyperparams.target_entropy_ratio=1.5"],
            "algo.sac_d.hyperparams.target_entropy_ratio=1.5: expected a number >= 0 and <= 1",
        ),
        (
            ["learner=sac_d", "algo.sac_d.hyperparams.learn_alpha=maybe"],
            "algo.sac_d.hyperparams.learn_alpha='maybe': expected true or false",
        ),
    ],
)
def test_bad_hyperparameters_have_their_line(override, line):
    with pytest.raises(ConfigError) as e:
        check_training(compose_cfg(TINY + override))
    assert e.value.lines == [line]
