"""Table 3 switches (DESIGN §4.5): hard target, no target networks, the SFT baseline, w/o FT (steps_count=0)."""

import math

import pytest
import torch

from rl.learners.pqn import PQNLearner
from rl.learners.sft import SFTLearner, teacher_trajectory
from rl.run.train import Trainer, run
from tests.conftest import chunk_embeddings

FAST = ["final_eval_episodes=0", "eval_episodes=2"]


def head_scores(state_emb: torch.Tensor, action_emb: torch.Tensor) -> torch.Tensor:
    """Both heads q_h = ⟨s_h, ã_h⟩ of every chunk: [d] × [N, d] -> [2, N]."""
    h = state_emb.shape[-1] // 2
    a, s = action_emb.float(), state_emb.float()
    return torch.stack((a[:, :h] @ s[:h], a[:, h:] @ s[h:]))


def hard_value(learner, ep, selected):
    """V = Σ_h max_{a ∈ A} q′_h(s, a), written out from the target encoders (DESIGN §4.5)."""
    qnet = learner.qnet
    s = qnet._embed(qnet.target_state, [qnet.inputs.state_ids(ep, selected=selected)], train=False)[0]
    avail = torch.ones(ep.n_chunks, dtype=torch.bool)
    avail[selected] = False
    u = chunk_embeddings(qnet, ep, "target", False)
    heads = head_scores(s, qnet.rope(u, ep.codes(learner.env.pos, avail)))
    return float(heads[:, avail].amax(-1).sum())


def test_no_soft_q_and_no_target_switches(tiny_cfg):
    trainer = Trainer(
        tiny_cfg("algo.pqn.hyperparams.soft_target=false", "algo.pqn.hyperparams.use_target_networks=false", *FAST)
    )
    learner, qnet = trainer.learner, trainer.qnet
    assert isinstance(learner, PQNLearner)
    assert not learner.hp.soft_target and not learner.hp.use_target_networks
    learner.start_slots()
    ep = learner.env.episodes[0]
    items = [(ep, []), (ep, [1]), (ep, [0, 3])]
    with torch.no_grad():
        hard = learner._target_values(items)
        expected = [hard_value(learner, e, sel) for e, sel in items]
        torch.testing.assert_close(hard.cpu(), torch.tensor(expected), rtol=1e-5, atol=1e-5)
        learner.hp.soft_target = True  # the soft top-k value is strictly above the hard max
        assert bool((learner._target_values(items) > hard).all())
    learner.hp.soft_target = False

    def max_gap():
        pairs = [(qnet.state_enc, qnet.target_state), (qnet.action_enc, qnet.target_action)]
        return max(
            float((p.detach() - t).abs().max()) for o, tg in pairs for p, t in zip(o.parameters(), tg.parameters())
        )

    while learner.counters.optimizer_steps < 2:  # step 1 runs at lr 0 (warm-up from 0), step 2 moves the weights
        learner.micro_step()
    assert max_gap() == 0.0  # "w/o Target": E′ ≡ E after every optimiser step
    before = [p.detach().clone() for p in qnet.state_enc.parameters()]
    learner.hp.use_target_networks = True
    while learner.counters.optimizer_steps < 3:
        learner.micro_step()
    assert any(not torch.equal(b, p) for b, p in zip(before, qnet.state_enc.parameters()))
    assert max_gap() > 0.0  # with target networks the EMA (τ = 0.1) lags behind


def test_sft_teacher_forcing_and_loss_decreases(tiny_cfg):
    trainer = Trainer(tiny_cfg("learner=sft", "algo.optimizer.lr=3e-4", *FAST))
    learner = trainer.learner
    assert isinstance(learner, SFTLearner)
    eps = learner.draw_episodes()
    n = sum(len(teacher_trajectory(ep.sample, learner.env.max_steps)) for ep in eps)
    assert n >= learner.batch_size
    ep = eps[0]
    gold = teacher_trajectory(ep.sample, learner.env.max_steps)
    assert gold == sorted(set(ep.sample["sf_idx"]))[: learner.env.max_steps]
    logits, target = learner.group_logits([ep])[0]
    logits = logits.detach()
    assert target.tolist() == gold and logits.shape == (len(gold), ep.n_chunks)
    for t in range(len(gold)):  # earlier gold chunks are unavailable at step t
        assert all(math.isinf(float(logits[t, g])) for g in gold[:t])
        assert math.isfinite(float(logits[t, gold[t]]))
    learner.optimizer.zero_grad(set_to_none=True)
    losses = []
    for _ in range(8):  # the first step has lr 0 (scheduler warm-up starts at 0)
        losses.append(learner.loss_on(eps)["ce_loss"])
        learner.optimizer_step()
    assert losses[-1] < losses[1] < losses[0] + 1e-6, losses


def test_sft_trains_end_to_end(tiny_cfg, tmp_path):
    summary = run(tiny_cfg("learner=sft", "steps_count=2", *FAST))
    assert summary["optimizer_steps"] == 2 and summary["env_steps"] >= 2 * 4
    state = torch.load(tmp_path / "run" / "model_last.pt", weights_only=False)
    assert state["learner"]["objective"] == "sft" and state["config"]["algo"]["objective"] == "sft"


def test_unknown_objective_is_refused(tiny_cfg):
    with pytest.raises(ValueError, match="algo.objective"):
        Trainer(tiny_cfg("algo.objective=ppo", *FAST))


def test_steps_count_zero_keeps_the_untrained_encoders(tiny_cfg, tmp_path):
    """ "w/o FT": a run with steps_count=0 evaluates once and saves the untrained encoders."""
    summary = run(tiny_cfg("steps_count=0", *FAST))
    assert summary["optimizer_steps"] == 0
    rd = tmp_path / "run"
    best = torch.load(rd / "model_best.pt", weights_only=False)["learner"]["agent"]
    for name, w in best.items():  # state and action encoders are still the same copy (no targets saved)
        if name.startswith("state_enc."):
            torch.testing.assert_close(best["action_enc." + name[len("state_enc.") :]], w, rtol=0, atol=0)
    assert [line for line in (rd / "metrics.jsonl").read_text().splitlines()]  # the step-0 evaluation
