"""SARSA (rl/learners/sarsa.py): the n-step target against a brute-force recursion, and one real
micro-step + optimiser step against an independent computation from the definition:

  G_t = Σ_{i<m} γ^i r_{t+i} + γ^m Q′(s_{t+m}, a_{t+m}),  m = min(n, L − t), cut at an episode end
  Q′  = q′1 + q′2 of the target encoders (eval mode) for the chunk actually taken
  at the rollout's end: E_{a∼π} Q′(s_L, a), π uniform over the available chunks while warming up,
        else softmax((Q − max Q)/α) over the top-k available chunks of the online network
  loss = 0.5·mean((2q1 − G)²) + 0.5·mean((2q2 − G)²), then PQN's optimiser step (α, EMA)
"""

from __future__ import annotations

import math
import random

import pytest
import torch

import rl.learners.sarsa as sarsa_mod
import tests.rl.test_learner_step as tls
from envs.env import PositionSettings
from rl.learners.sarsa import SarsaLearner, policy_probs, sarsa_returns
from rl.model.qfunc import sample_policy
from tests.rl.test_learner_step import (
    ALPHA0,
    LR0,
    TAU,
    TOPK,
    Watch,
    build,
    check_optimiser_step,
    head_scores,
    lr_factor_after_first_step,
    twin_heads_ref,
    twin_loss_ref,
)

GAMMA = 0.9


def sarsa_ref(r, d, q, boot, gamma, n):
    """Written from the sum, one (t, e) at a time: rewards until the window, the episode or the
    rollout ends, then Q′ of the action taken at t + n, or the rollout's bootstrap."""
    L, E = len(r), len(r[0])
    out = [[0.0] * E for _ in range(L)]
    for e in range(E):
        for t in range(L):
            g, ended = 0.0, False
            m = min(n, L - t)
            for i in range(m):
                g += gamma**i * r[t + i][e]
                if d[t + i][e]:
                    ended = True
                    break
            if not ended:
                g += gamma**m * (q[t + n][e] if t + n < L else boot[e])
            out[t][e] = g
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_sarsa_returns_match_the_sum(n):
    rng = random.Random(n)
    L, E = 6, 3
    r = [[rng.choice([0.0, 0.5, 1.0]) for _ in range(E)] for _ in range(L)]
    d = [[float(rng.random() < 0.3) for _ in range(E)] for _ in range(L)]
    d[2][0] = 1.0  # at least one end inside the window
    q = [[rng.uniform(-1, 1) for _ in range(E)] for _ in range(L)]
    boot = [rng.uniform(-1, 1) for _ in range(E)]
    got = sarsa_returns(torch.tensor(r), torch.tensor(d), torch.tensor(q), torch.tensor(boot), GAMMA, n)
    torch.testing.assert_close(got.double(), sarsa_ref(r, d, q, boot, GAMMA, n), rtol=1e-6, atol=1e-6)


def test_sarsa_returns_worked_case():
    # one env, L = 3, no ends: TD(0) G_0 = r0 + γ q1, G_2 = r2 + γ boot; 2-step G_0 = r0 + γ r1 + γ² q2
    r, d = torch.tensor([[1.0], [0.0], [2.0]]), torch.zeros(3, 1)
    q, boot = torch.tensor([[9.0], [3.0], [5.0]]), torch.tensor([7.0])
    one = sarsa_returns(r, d, q, boot, 0.5, 1).flatten().tolist()
    assert one == pytest.approx([1 + 0.5 * 3, 0 + 0.5 * 5, 2 + 0.5 * 7])
    two = sarsa_returns(r, d, q, boot, 0.5, 2).flatten().tolist()
    assert two == pytest.approx([1 + 0.5 * 0 + 0.25 * 5, 0 + 0.5 * 2 + 0.25 * 7, 2 + 0.5 * 7])
    d[0, 0] = 1.0  # the episode ends at step 0: G_0 = r_0, nothing bootstrapped across the end
    assert sarsa_returns(r, d, q, boot, 0.5, 2)[0, 0].item() == 1.0
    with pytest.raises(ValueError, match="n >= 1"):
        sarsa_returns(r, d, q, boot, 0.5, 0)


def test_policy_probs_is_the_distribution_sample_policy_draws_from():
    q = torch.tensor([0.30, 0.10, 0.32, -1.0, 0.31])
    avail = torch.tensor([True, True, False, True, True])
    p = policy_probs(q, avail, 2, 0.05)
    # top-2 available: chunks 4 (0.31) and 0 (0.30); chunk 2 is higher but unavailable
    z = math.exp(0.0) + math.exp(-0.01 / 0.05)
    assert p.tolist() == pytest.approx([math.exp(-0.2) / z, 0, 0, 0, 1 / z])
    gen = torch.Generator().manual_seed(0)
    draws = [sample_policy(q, avail, 2, 0.05, gen) for _ in range(4000)]
    assert set(draws) == {0, 4}
    assert draws.count(0) / len(draws) == pytest.approx(float(p[0]), abs=0.03)
    assert policy_probs(q, avail, None, 0.05)[[0, 1, 3, 4]].sum().item() == pytest.approx(1.0)


# -- one real micro-step ----------------------------------------------------------------
CASES = {
    # uniform acting (warm-up), 2-step targets: the bootstrap is the uniform mean of Q′
    "warmup_n2": ["algo.sarsa.hyperparams.n_steps=2"],
    # policy acting from the first step: the bootstrap is the soft top-k policy's expectation
    "policy_n1": ["learning_start=0", "algo.sarsa.hyperparams.n_steps=1"],
}


@pytest.mark.parametrize("case", list(CASES))
def test_sarsa_micro_step_matches_definition(case, monkeypatch):
    monkeypatch.setattr(tls, "BASE", [o for o in tls.BASE if not o.startswith("algo.pqn.")])  # PQN's keys
    cfg, learner, ref = build(
        "learner=sarsa",
        f"algo.sarsa.hyperparams.gamma={GAMMA}",
        f"algo.sarsa.hyperparams.alpha={ALPHA0}",
        f"algo.sarsa.hyperparams.tau={TAU}",
        f"algo.sarsa.hyperparams.top_k_actions={TOPK}",
        *CASES[case],
    )
    assert isinstance(learner, SarsaLearner)
    n = int(cfg.algo.sarsa.hyperparams.n_steps)
    warm = learner.warming_up
    assert warm == (case == "warmup_n2")
    watch = learner._watch = Watch(learner, monkeypatch)
    seen = {}
    original = sarsa_mod.sarsa_returns

    def spy(*args):
        seen["args"], seen["out"] = args, original(*args)
        return seen["out"]

    monkeypatch.setattr(sarsa_mod, "sarsa_returns", spy)
    L, E = learner.rollout_len, learner.env.n_envs

    scalars = learner.micro_step()

    assert len(watch.steps) == L and learner.counters.env_steps == L * E
    steps = watch.steps
    r = [[tr.reward for tr in s] for s in steps]
    d = [[float(tr.done) for tr in s] for s in steps]
    assert 0 < sum(map(sum, d)) < L * E and any(x for row in r for x in row), "precondition: mixed dones, rewards"

    def q_target(ep, selected):  # [N] float64, both target heads
        return head_scores(ref, ref.target_state, ref.target_action, ep, selected, cfg, train=False).sum(0)

    q = [[q_target(tr.ep, tr.selected)[tr.action].item() for tr in s] for s in steps]
    boot = []
    for ep, sel in watch.after[L - 1]:
        avail = [j for j in range(ep.n_chunks) if j not in sel]
        qt = q_target(ep, sel)
        if warm:
            boot.append(sum(qt[j].item() for j in avail) / len(avail))
        else:  # the online network (dropout is 0 here, so acting mode gives the same numbers)
            qo = head_scores(ref, ref.state_enc, ref.action_enc, ep, sel, cfg, train=True).sum(0)
            top = sorted(avail, key=lambda j: -qo[j].item())[:TOPK]
            m = max(qo[j].item() for j in top)
            w = {j: math.exp((qo[j].item() - m) / ALPHA0) for j in top}
            boot.append(sum(w[j] * qt[j].item() for j in top) / sum(w.values()))
    G = sarsa_ref(r, d, q, boot, GAMMA, n)
    *_, boot_seen, gamma, n_seen = seen["args"]
    assert (gamma, n_seen) == (GAMMA, n)
    for e in range(E):
        if not d[L - 1][e]:
            assert boot_seen[e].item() == pytest.approx(boot[e], rel=1e-5, abs=1e-6)
    torch.testing.assert_close(seen["out"].double(), G, rtol=1e-5, atol=1e-6)
    # the bootstrap and Q′ of the taken actions matter in this rollout (a zero one would differ)
    assert (sarsa_ref(r, d, q, [0.0] * E, GAMMA, n) - G).abs().max() > 1e-3
    assert (sarsa_ref(r, d, [[0.0] * E] * L, boot, GAMMA, n) - G).abs().max() > 1e-3
    if not warm:  # the policy's expectation differs from the uniform mean here
        unif = []
        for ep, sel in watch.after[L - 1]:
            avail = [j for j in range(ep.n_chunks) if j not in sel]
            unif.append(sum(q_target(ep, sel)[j].item() for j in avail) / len(avail))
        assert (sarsa_ref(r, d, q, unif, GAMMA, n) - G).abs().max() > 1e-4
    # targets in eval mode (the learner ignores PQN's legacy dropout_in_targets)
    assert watch.target_modes and set(watch.target_modes) == {False}

    # the loss, PQN's twin-head regression towards G
    flat = [tr for s in steps for tr in s]
    assert ref.inputs.sort_by_index == bool(cfg.envs.sort_by_index)
    ref.prepare([tr.ep for tr in flat])  # the samples enter the reference network too
    s_emb = ref._embed(ref.state_enc, [ref.inputs.state_ids(tr.ep, selected=tr.selected) for tr in flat], train=True)
    pos = PositionSettings.from_cfg(cfg.envs)
    q1, q2 = twin_heads_ref(ref, s_emb, [(tr.ep, tr.selected, tr.action) for tr in flat], pos)
    g = G.flatten()
    loss = twin_loss_ref(q1, q2, g)
    assert scalars["qf_loss"] == pytest.approx(loss.item(), rel=1e-5)
    assert scalars["target_mean"] == pytest.approx(float(g.mean()), rel=1e-5, abs=1e-7)
    factor = lr_factor_after_first_step()
    check_optimiser_step(
        cfg,
        learner,
        ref,
        scalars,
        None,
        tau_expected=TAU,
        lr_before=LR0,
        lr_after=LR0 * factor,
        alpha_after=ALPHA0 * factor,
    )
