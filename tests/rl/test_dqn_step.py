"""One DQN micro-step + optimiser step (rl/learners/dqn.py) against an independent computation.

The learner runs unmodified on a 2-layer offline MiniLM over tiny BabiLong haystacks (dropout 0,
so every value can be recomputed). The test records the 1-step transitions the learner acted
(its ``_act``), the rows it drew from the replay buffer and the targets it computed, and rebuilds
them from the definitions (docs/DQN.md):

  n-step  R = Σ_{i<k} γ^i r_{t+i}, k = min(n, steps to the episode's end), from the raw stream
  V′(s)   = max_{a∈A(s)} Q′(s, a)                        (double=false)
          = Q′(s, argmax_{a∈A(s)} Q(s, a))               (double=true; Q online, eval mode)
  y       = R + γ^k (1 − done) V′(s_{t+k})
  loss    = ½·mean((2q1 − y)²) + ½·mean((2q2 − y)²),  clipped gradient, EMA θ′ ← τθ + (1−τ)θ′
            or, with target_update=hard, θ′ ← θ every target_update_interval optimiser steps

The observed micro-step is the second one: after the first optimiser step the online and target
encoders differ, so Double DQN and plain DQN give different targets (asserted).
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

import rl.learners.acting
import rl.learners.dqn
from envs.data.registry import build_dataset
from envs.env import Episode, PositionSettings
from envs.feedback import build_feedback
from envs.legacy import Legacy
from rl.learners.dqn import DQNLearner
from rl.run.build import build_learner, qnet_from_cfg, train_env
from tests.conftest import compose_cfg
from tests.rl.test_learner_step import (
    assert_close_fast,
    head_scores,
    twin_heads_ref,
    twin_loss_ref,
)

GAMMA, TAU, CLIP, LR0 = 0.9, 0.3, 0.05, 1e-3

BASE = [
    "experiment=demo",
    "learner=dqn",
    "algo.model.predictor.num_layers=2",
    "envs.task=qa2_two-supporting-facts",
    "envs.num_sentences=8",
    "envs.max_steps=3",
    "batch_size=12",
    "envs_parallel=2",
    "accumulate_grads=1",
    "steps_count=4",
    "max_action_length=16",
    "max_action_length_in_memory=16",
    "seed=3",
    "feedback.ground_truth.per_fact_reward=0.5",  # rewards on most steps, not only at completion
    f"algo.optimizer.lr={LR0}",
    "algo.scheduler.warmup=0",
    f"algo.max_grad_norm={CLIP}",
    f"algo.dqn.hyperparams.gamma={GAMMA}",
    f"algo.dqn.hyperparams.tau={TAU}",
    "algo.dqn.hyperparams.learning_starts=16",  # 8 vectorised uniform steps: several whole episodes
    "algo.dqn.hyperparams.epsilon_start=0.5",
    "algo.dqn.hyperparams.epsilon_end=0.5",  # a mix of greedy and random actions afterwards
]

_CACHE: dict[str, object] = {}


def build(*extra: str):
    cfg = compose_cfg(BASE + list(extra))
    device = torch.device("cpu")
    legacy = Legacy.from_cfg(cfg.legacy)
    if not _CACHE:
        qnet = qnet_from_cfg(cfg, device)
        for m in qnet.modules():
            if isinstance(m, nn.Dropout):
                m.p = 0.0
        _CACHE["agent"] = qnet
        _CACHE["data"] = build_dataset(cfg.envs, "train", int(cfg.seed), 0.0, legacy)
    qnet = copy.deepcopy(_CACHE["agent"])
    # the cached network was built for the first config: bind this one's positions and order, as
    # qnet_from_cfg would (DQN reads the processor from the network)
    qnet.positions, qnet.inputs.sort_by_index = PositionSettings.from_cfg(cfg.envs), bool(cfg.envs.sort_by_index)
    feedback = build_feedback(cfg.feedback, cfg.envs, "train", str(cfg.envs.task), legacy)
    env = train_env(cfg, _CACHE["data"], feedback, device, int(cfg.seed))
    learner = build_learner(qnet, env, cfg, legacy)
    learner.start_slots()
    assert isinstance(learner, DQNLearner)
    return cfg, learner


def nstep_reference(stream, n, gamma):
    """All n-step transitions of per-slot 1-step streams, from the definition: a dict
    (sample index, selection before acting) -> (path, k, ret, done, code) for every step whose n
    successors (or its episode's end) have been seen."""
    out = {}
    for steps in stream:
        episodes, cur = [], []
        for st in steps:
            cur.append(st)
            if st.done:
                episodes.append(cur)
                cur = []
        for ep in episodes + [cur]:
            for t, st in enumerate(ep):
                k = min(n, len(ep) - t)
                ended = ep[-1].done and t + k == len(ep)
                if k < n and not ended:
                    continue  # still waiting for its successors
                last = ep[t + k - 1]
                ret = sum(gamma**i * ep[t + i].reward for i in range(k))
                out[(st.index, tuple(st.selected))] = (last.selected + [last.action], k, ret, ended, st.code)
    return out


CASES = {
    "dqn": ["algo.dqn.hyperparams.n_step=1", "algo.dqn.hyperparams.double=false"],
    "double": ["algo.dqn.hyperparams.n_step=1", "algo.dqn.hyperparams.double=true"],
    "dqn_nstep": ["algo.dqn.hyperparams.n_step=2", "algo.dqn.hyperparams.double=false"],
    "double_nstep": ["algo.dqn.hyperparams.n_step=2", "algo.dqn.hyperparams.double=true"],
}


@pytest.mark.parametrize("case", list(CASES))
def test_dqn_micro_step_matches_definition(case, monkeypatch):
    cfg, learner = build(*CASES[case])
    hp = cfg.algo.dqn.hyperparams
    n, double = int(hp.n_step), bool(hp.double)
    E = learner.env.n_envs
    stream: list[list] = [[] for _ in range(E)]
    original_act = learner._act

    def act():
        steps = original_act()
        for slot, st in enumerate(steps):
            stream[slot].append(copy.deepcopy(st))
        return steps

    monkeypatch.setattr(learner, "_act", act)
    learner.micro_step()  # the first optimiser step: online and target encoders differ afterwards
    ref = copy.deepcopy(learner.qnet)

    rows: list[int] = []
    original_sample = learner.buffer.sample
    monkeypatch.setattr(learner.buffer, "sample", lambda b, g: rows.extend(original_sample(b, g)) or list(rows))
    seen = {}
    original_targets = rl.learners.dqn.nstep_targets

    def targets(*args):
        seen["y"] = original_targets(*args).clone()
        return seen["y"]

    monkeypatch.setattr(rl.learners.dqn, "nstep_targets", targets)
    grads = {}

    def before_step(opt, args, kwargs):  # the (clipped) gradients AdamW receives
        grads["seen"] = [p.grad.clone() for p in learner.qnet.trainable_parameters()]

    learner.optimizer.register_step_pre_hook(before_step)

    scalars = learner.micro_step()

    # the buffer holds exactly the n-step transitions of the acted stream
    want = nstep_reference(stream, n, GAMMA)
    buf = learner.buffer
    held = {(tr.index, tuple(tr.selected)): tr for tr in (buf.get(r) for r in range(len(buf)))}
    assert set(held) == set(want)
    for key, tr in held.items():
        path, k, ret, done, code = want[key]
        assert (tr.path, tr.k, tr.done, tr.code) == (path, k, done, code), key
        assert tr.ret == pytest.approx(ret, rel=1e-6), key
    assert len(rows) == int(cfg.batch_size)

    # targets y from the encoders as they were before this micro-step
    ds, pos = learner.env.dataset, PositionSettings.from_cfg(cfg.envs)
    assert ref.inputs.sort_by_index == bool(cfg.envs.sort_by_index)
    batch = [buf.get(r) for r in rows]
    eps = {
        tr.index: Episode(tr.index, ds[tr.index], torch.ones(len(ds[tr.index]["chunks"]), dtype=torch.bool))
        for tr in batch
    }
    ref.prepare(list(eps.values()))
    y_ref, plain, crossed = [], [], []
    for tr in batch:
        path, k, ret, done, _ = want[(tr.index, tuple(tr.selected))]
        if done:
            y_ref.append(ret)
            continue
        ep = eps[tr.index]
        qt = head_scores(ref, ref.target_state, ref.target_action, ep, path, cfg, train=False).sum(0)
        qo = head_scores(ref, ref.state_enc, ref.action_enc, ep, path, cfg, train=False).sum(0)
        avail = [j for j in range(ep.n_chunks) if j not in path]
        v_max = max(float(qt[j]) for j in avail)
        v_dbl = float(qt[max(avail, key=lambda j: float(qo[j]))])
        plain.append(v_max)
        crossed.append(v_dbl)
        y_ref.append(ret + GAMMA**k * (v_dbl if double else v_max))
    y_ref = torch.tensor(y_ref, dtype=torch.float64)
    torch.testing.assert_close(seen["y"].double(), y_ref, rtol=1e-5, atol=1e-6)
    # preconditions: bootstraps and dones both drawn; n-step rows bootstrap from k = n
    assert plain and len(plain) < len(batch), "precondition: a mix of done and bootstrapped rows"
    if n > 1:
        assert any(tr.k == n and not tr.done for tr in batch), "precondition: a full n-step row is drawn"
    if double:
        assert max(abs(a - b) for a, b in zip(plain, crossed)) > 1e-6, "precondition: double ≠ plain max here"

    # loss and gradients from the same encoders (train mode, with gradient)
    s_emb = ref._embed(
        ref.state_enc,
        [ref.inputs.state_ids(eps[tr.index], selected=tr.selected) for tr in batch],
        train=True,
        grad=True,
    )
    q1, q2 = twin_heads_ref(ref, s_emb, [(eps[tr.index], tr.selected, tr.action) for tr in batch], pos, grad=True)
    loss = twin_loss_ref(q1, q2, y_ref)
    loss.backward()
    assert scalars["qf_loss"] == pytest.approx(loss.item(), rel=1e-5)
    assert scalars["q_mean"] == pytest.approx((q1 + q2).mean().item(), rel=1e-4, abs=1e-6)
    g_ref = [p.grad for p in ref.trainable_parameters()]
    norm = math.sqrt(sum(float(g.norm()) ** 2 for g in g_ref if g is not None))
    assert norm > 2 * CLIP, "precondition: clipping active"
    assert scalars["grad_norm"] == pytest.approx(norm, rel=1e-4)
    gmax = max(float(g.abs().max()) for g in g_ref if g is not None) * CLIP / norm
    for g_seen, g in zip(grads["seen"], g_ref, strict=True):
        assert_close_fast(g_seen, g * CLIP / norm, rtol=1e-3, atol=1e-4 * gmax)

    # EMA of both target encoders
    qnet = learner.qnet
    for online, target, target0 in (
        (qnet.state_enc, qnet.target_state, ref.target_state),
        (qnet.action_enc, qnet.target_action, ref.target_action),
    ):
        for p, pt, pt0 in zip(online.parameters(), target.parameters(), target0.parameters(), strict=True):
            assert_close_fast(pt.detach(), TAU * p.detach() + (1 - TAU) * pt0.detach(), rtol=1e-6, atol=1e-8)
    assert learner.counters.optimizer_steps == 2


@pytest.mark.parametrize("interval", [2, 3])
def test_hard_target_copy_every_interval(interval):
    """target_update=hard: the target encoders equal the online ones right after optimiser step
    N·interval and keep their weights at every other step."""
    _, learner = build(
        "algo.dqn.hyperparams.target_update=hard", f"algo.dqn.hyperparams.target_update_interval={interval}"
    )
    qnet = learner.qnet
    initial = copy.deepcopy(qnet.target_state.state_dict())
    for step in (1, 2):
        learner.micro_step()
        assert learner.counters.optimizer_steps == step
    same = [torch.equal(a, b) for a, b in zip(qnet.target_state.parameters(), qnet.state_enc.parameters())]
    kept = [torch.equal(v, initial[k]) for k, v in qnet.target_state.state_dict().items()]
    if interval == 2:
        assert all(same) and not all(kept)
    else:
        assert all(kept) and not all(same)


def test_exploration_schedules():
    """ε: linear from epsilon_start to epsilon_end over epsilon_decay_steps env steps counted
    from the end of the warm-up, then constant."""
    _, learner = build(
        "algo.dqn.hyperparams.learning_starts=10",
        "algo.dqn.hyperparams.epsilon_start=1.0",
        "algo.dqn.hyperparams.epsilon_end=0.1",
        "algo.dqn.hyperparams.epsilon_decay_steps=100",
    )
    assert learner.epsilon_at(10) == pytest.approx(1.0)
    assert learner.epsilon_at(60) == pytest.approx(0.55)
    assert learner.epsilon_at(110) == pytest.approx(0.1)
    assert learner.epsilon_at(10_000) == pytest.approx(0.1)


def test_refuses_random_positions():
    with pytest.raises(ValueError, match="positions_processor=random"):
        build("envs.positions_processor=random")


@pytest.mark.parametrize("exploration", ["epsilon", "softmax"])
def test_acting_after_the_warm_up(exploration, monkeypatch):
    """ε = 0: the action is the argmax of Q = q1 + q2 over the available chunks; softmax: the
    policy receives that Q, the temperature and top-k (its sampling is tested in test_qfunc)."""
    cfg, learner = build(
        f"algo.dqn.hyperparams.exploration={exploration}",
        "algo.dqn.hyperparams.learning_starts=0",
        "algo.dqn.hyperparams.epsilon_start=0.0",
        "algo.dqn.hyperparams.epsilon_end=0.0",
        "algo.dqn.hyperparams.temperature=0.2",
        "algo.dqn.hyperparams.top_k_actions=3",
    )
    ref = copy.deepcopy(learner.qnet)
    learner.env.episodes[0].selected.append(5)  # one slot mid-episode: chunk 5 is not available
    learner.env.episodes[0].available[5] = False
    before = [(ep, list(ep.selected)) for ep in learner.env.episodes]
    calls = []
    original = rl.learners.acting.sample_policy
    monkeypatch.setattr(
        rl.learners.acting,
        "sample_policy",
        lambda q, a, k, t, g: calls.append((q, a.clone(), k, t)) or original(q, a, k, t, g),
    )
    steps = learner._act()
    for slot, (ep, sel) in enumerate(before):
        q = head_scores(ref, ref.state_enc, ref.action_enc, ep, sel, cfg, train=False).sum(0)
        avail = [j for j in range(ep.n_chunks) if j not in sel]
        if exploration == "epsilon":
            assert steps[slot].action == max(avail, key=lambda j: float(q[j]))
        else:
            q_seen, a_seen, k, t = calls[slot]
            torch.testing.assert_close(q_seen.double(), q, rtol=1e-5, atol=1e-6)
            assert a_seen.nonzero().flatten().tolist() == avail and (k, t) == (3, 0.2)
    assert not calls if exploration == "epsilon" else len(calls) == len(before)
