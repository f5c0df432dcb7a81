"""late_haystacks (rl/run/keys.py ``LateHaystacks``): from optimiser step S on, new training episodes draw
late haystacks. On the tiny CPU config (8-sentence haystacks, late ones of 30): the run is the plain run
until step S and differs after; resets before S have the run's sizes and from S on the late ones; every
in-training evaluation uses the late haystacks; a resume across the switch continues exactly; bad
settings are refused in one line each; every preset composes with the switch off."""

import json

import pytest
import torch

from envs.data.registry import build_dataset
from envs.env import VecRetrievalEnv
from rl.learners.pqn import PQNLearner
from rl.run.build import late_config
from rl.run.train import run
from rl.run.train_eval import RunEvaluation
from rl.run.validate import ConfigError, check_training
from tests.conftest import ROOT, compose_cfg, interrupt_after

LATE = ["late_haystacks.num_sentences=30"]


def late(step: int) -> list[str]:
    return [f"late_haystacks.from_step={step}", *LATE]


@pytest.fixture
def trace(monkeypatch):
    """Records, per micro-step: the optimiser step it starts at, its scalars (losses) and the weights
    after it; per episode start: (step, index, late, chunks); per evaluation: each sample's chunks."""
    out = {"steps": [], "starts": [], "evals": []}
    step = [0]
    micro, start, evaluate = PQNLearner.micro_step, VecRetrievalEnv.start, RunEvaluation.evaluate

    def micro_step(self):
        step[0] = self.counters.optimizer_steps
        stats = micro(self)
        weights = torch.cat([p.detach().flatten() for p in self.qnet.trainable_parameters()]).clone()
        out["steps"].append((step[0], stats, weights))
        return stats

    def start_ep(self, slot, index, late=False):
        ep = start(self, slot, index, late)
        if self.name == "train":
            out["starts"].append((step[0], index, late, ep.n_chunks))
        return ep

    def evaluate_(self, qnet, dataset, indices, phase, what="evaluation"):
        samples = [dataset[i] for i in indices]
        out["evals"].append([(len(x["chunks"]), len(x["facts_idx"])) for x in samples])
        return evaluate(self, qnet, dataset, indices, phase, what)

    monkeypatch.setattr(PQNLearner, "micro_step", micro_step)
    monkeypatch.setattr(VecRetrievalEnv, "start", start_ep)
    monkeypatch.setattr(RunEvaluation, "evaluate", evaluate_)
    return out


def metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_the_run_is_the_plain_run_until_the_switch(tiny_cfg, tmp_path, trace):
    """Same losses and weights at every micro-step before step S = 2, other ones after (the evaluations
    differ from the start: they use the late haystacks, test_evaluations_use_the_late_haystacks)."""
    run(tiny_cfg(run_dir=tmp_path / "plain"))
    plain = list(trace["steps"])
    trace["steps"].clear()
    run(tiny_cfg(*late(2), run_dir=tmp_path / "late"))
    switched = trace["steps"]
    assert [s for s, _, _ in plain] == [s for s, _, _ in switched] == [0, 1, 2, 3]
    for (step, a, wa), (_, b, wb) in zip(plain, switched):
        if step < 2:
            assert a == b, step
            torch.testing.assert_close(wa, wb, atol=0, rtol=0)
    # micro-step 2 learns from the episodes drawn in micro-step 1 (T = L = 2) and draws late ones for step 3
    assert plain[3][1] != switched[3][1] and not torch.equal(plain[3][2], switched[3][2])


@pytest.mark.parametrize("sizes", ["30", "[8,30]"])
def test_resets_draw_late_haystacks_from_the_switch_on(tiny_cfg, trace, sizes):
    """Each episode started in micro-steps that begin before step S = 2 is the run's own sample of its
    index; from S on, the late dataset's (30 sentences, or a draw of 8 or 30 per question)."""
    cfg = tiny_cfg("late_haystacks.from_step=2", f"late_haystacks.num_sentences={sizes}")
    run(cfg)
    early = build_dataset(cfg.envs, "train", 42, float(cfg.validation_fraction))
    later = build_dataset(late_config(cfg).envs, "train", 42, float(cfg.validation_fraction))
    starts = trace["starts"]
    assert {s for s, *_ in starts} == {0, 1, 2, 3}
    for step, index, is_late, n in starts:
        assert is_late == (step >= 2), (step, index)
        assert n == len((later if is_late else early)[index]["chunks"]), (step, index)
    assert all(n >= 30 for s, _, _, n in starts if s >= 2) if sizes == "30" else True
    assert max(n for s, _, _, n in starts if s < 2) < 30 <= max(n for s, _, _, n in starts if s >= 2)


def test_evaluations_use_the_late_haystacks(tiny_cfg, trace):
    """Model selection at every step (0, 2, 4) and the test samples before and after training: all in
    30-sentence haystacks (a story's facts and noise up to 30 chunks), before the switch too; the plain
    run's in its own 8."""
    run(tiny_cfg(*late(3)))
    assert len(trace["evals"]) == 5  # untrained test, steps 0, 2, 4, trained test
    assert all(n == max(30, facts) for sizes in trace["evals"] for n, facts in sizes), trace["evals"]
    trace["evals"].clear()
    run(tiny_cfg(run_dir=tiny_cfg().run_dir + "_plain"))
    assert all(n == max(8, facts) for sizes in trace["evals"] for n, facts in sizes), trace["evals"]
    assert any(facts < 30 for sizes in trace["evals"] for _, facts in sizes)  # so the two differ


@pytest.mark.parametrize("start", [1, 2, 3])
def test_resume_across_the_switch_is_exact(tiny_cfg, tmp_path, monkeypatch, start):
    """Interrupted after step 2 and resumed: the same metric rows and final weights as the run left
    alone, whether the checkpoint holds late episodes (S = 1), sits at the switch (S = 2) or before it
    (S = 3)."""
    full_dir, cut_dir = tmp_path / "full", tmp_path / "cut"
    run(tiny_cfg(*late(start), run_dir=full_dir))
    restore = interrupt_after(monkeypatch, PQNLearner)
    with pytest.raises(KeyboardInterrupt):
        run(tiny_cfg(*late(start), run_dir=cut_dir))
    restore()
    saved = torch.load(cut_dir / "model_last.pt", weights_only=False)["learner"]["env"]["episodes"]
    assert {ep["late"] for ep in saved} == {start == 1}
    run(tiny_cfg(*late(start), "resume=true", run_dir=cut_dir))
    assert metrics(cut_dir) == metrics(full_dir)
    a = torch.load(full_dir / "model_last.pt", weights_only=False)["learner"]["agent"]
    b = torch.load(cut_dir / "model_last.pt", weights_only=False)["learner"]["agent"]
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=0, rtol=0)


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (LATE, "late_haystacks: set from_step and num_sentences together (both null: off)"),
        (["late_haystacks.from_step=2"], "late_haystacks: set from_step and num_sentences together"),
        (late(4), "late_haystacks.from_step=4: expected < steps_count (4)"),
        (late(0), "late_haystacks.from_step=0: expected an integer >= 1 or null"),
        (["late_haystacks.from_step=2", "late_haystacks.num_sentences=[]"], "late_haystacks.num_sentences=[]"),
        (["late_haystacks.from_step=2", "late_haystacks.num_sentences=[8,0]"], "expected an integer >= 1, a list"),
        ([*late(2), "envs.length_unit=tokens"], "late_haystacks: needs haystacks sized in sentences"),
        ([*late(2), "envs=niah"], "late_haystacks: needs haystacks sized in sentences"),
        ([*late(2), "learner=dqn"], "late_haystacks: not with algo.objective=dqn"),
    ],
)
def test_bad_settings_are_refused(tiny_cfg, extra, line):
    with pytest.raises(ConfigError) as err:
        check_training(tiny_cfg(*extra))
    assert any(line in e for e in err.value.lines), err.value.lines


def test_every_preset_composes_with_the_switch_off():
    """No preset sets late_haystacks: each composes it null, and late_config gives None (the run as before)."""
    for preset in sorted((ROOT / "configs" / "experiment").glob("*.yaml")):
        cfg = compose_cfg([f"experiment={preset.stem}"])
        assert dict(cfg.late_haystacks) == {"from_step": None, "num_sentences": None}, preset.stem
        assert late_config(cfg) is None


def test_episodes_saved_late_need_a_late_dataset(tiny_cfg):
    """A checkpoint's late episode cannot be rebuilt by environments without late haystacks."""
    from envs.feedback import build_feedback
    from rl.run.build import train_env

    cfg = tiny_cfg(*late(2))
    ds = build_dataset(cfg.envs, "train", 42)
    feedback = build_feedback(cfg.feedback, cfg.envs, "train", str(cfg.envs.task))
    with_late = train_env(cfg, ds, feedback, torch.device("cpu"), 1, build_dataset(late_config(cfg).envs, "train", 42))
    with_late.draw_late = True
    with_late.reset_all()
    state = with_late.state_dict()
    assert all(ep["late"] for ep in state["episodes"])
    with pytest.raises(ValueError, match="no late dataset"):
        train_env(cfg, ds, feedback, torch.device("cpu"), 1).load_state_dict(state)
