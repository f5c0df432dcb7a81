"""SAC-D (rl/learners/sac_d.py): the soft target and the temperature against brute-force
computations, and one real micro-step + optimiser step against an independent computation:

  π′(a|s′) = softmax(Q′/α) over the top-min(k, |A|) available chunks, Q′ = q′1 + q′2 (target)
  V(s′)    = Σ_a π′(a|s′) [min(2q′1, 2q′2)(s′, a) − α log π′(a|s′)],  V = 0 with nothing available
  G        = PQN's λ-return over these V (λ = 0: r + γ(1 − d)V(s′))
  α        = exp(log α), log α ← Adam step on log α · mean(H(π′) − ratio·log|support|)
"""

from __future__ import annotations

import copy
import math
import random

import pytest
import torch

import tests.rl.test_learner_step as tls
from rl.learners.sac_d import SacDLearner, Temperature, sac_values, target_entropy
from tests.rl.test_learner_step import (
    ALPHA0,
    LAM,
    LR0,
    TAU,
    TOPK,
    Watch,
    build,
    check_optimiser_step,
    head_scores,
    lambda_returns_ref,
    lr_factor_after_first_step,
)

GAMMA = 0.9


def sac_ref(h1, h2, avail, k, alpha):
    """(V, H, support size) of one state from the definition, in plain floats."""
    if not avail:
        return 0.0, 0.0, 0
    q = {j: h1[j] + h2[j] for j in avail}
    support = sorted(avail, key=lambda j: -q[j])[: k or len(avail)]
    m = max(q[j] for j in support)
    w = {j: math.exp((q[j] - m) / alpha) for j in support}
    z = sum(w.values())
    p = {j: w[j] / z for j in support}
    v = sum(p[j] * (min(2 * h1[j], 2 * h2[j]) - alpha * math.log(p[j])) for j in support)
    return v, -sum(p[j] * math.log(p[j]) for j in support), len(support)


@pytest.mark.parametrize("k", [2, 3, None])
def test_sac_values_match_definition(k):
    rng = random.Random(0 if k is None else k)
    S, N, alpha = 6, 5, 0.3
    heads = torch.tensor([[[rng.uniform(-1, 1) for _ in range(N)] for _ in range(2)] for _ in range(S)])
    avail = torch.tensor([[rng.random() < 0.7 for _ in range(N)] for _ in range(S)])
    avail[0] = True
    avail[1] = False  # nothing available
    avail[2] = torch.tensor([False, False, True, False, False])  # one chunk: H = 0
    avail[3] = torch.tensor([True, False, False, False, True])  # fewer than k
    v, h, support = sac_values(heads, avail, k, alpha)
    for s in range(S):
        av = [j for j in range(N) if avail[s, j]]
        want = sac_ref(heads[s, 0].tolist(), heads[s, 1].tolist(), av, k, alpha)
        assert (v[s].item(), h[s].item(), int(support[s])) == pytest.approx(want, rel=1e-5, abs=1e-6), s
    assert torch.isfinite(v).all() and torch.isfinite(h).all()


def test_equal_heads_give_the_soft_maximum():
    """With q′1 = q′2 the clipped minimum is Q′ itself and V = α·logsumexp(Q′/α) over the top k."""
    q = torch.tensor([0.4, -0.2, 0.1, 0.35])
    heads = torch.stack((q / 2, q / 2)).unsqueeze(0)
    v, _, _ = sac_values(heads, torch.ones(1, 4, dtype=torch.bool), 3, 0.1)
    top = torch.tensor([0.4, 0.35, 0.1])
    assert v.item() == pytest.approx(0.1 * torch.logsumexp(top / 0.1, 0).item(), rel=1e-6)
    # unequal heads: the minimum is below the mean estimate, so V drops
    skew = torch.stack((q / 2 + 0.05, q / 2 - 0.05)).unsqueeze(0)
    assert sac_values(skew, torch.ones(1, 4, dtype=torch.bool), 3, 0.1)[0].item() == pytest.approx(v.item() - 0.1)


def test_learned_temperature_reaches_the_target_entropy():
    """Hand-made case: fixed target heads, the policy's entropy is increasing in α, so α must
    settle where H(softmax(Q′/α)) = ratio·log(support); that α is found here by bisection."""
    q = torch.tensor([[1.0, 0.6, 0.3, 0.0, -0.5]])
    heads = torch.stack((q / 2, q / 2), dim=1)
    avail = torch.ones(1, 5, dtype=torch.bool)
    ratio = 0.6

    def entropy(alpha):
        return sac_values(heads, avail, None, alpha)[1].item()

    target = ratio * math.log(5)
    lo, hi = 1e-3, 10.0
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if entropy(mid) < target else (lo, mid)
    alpha_star = lo
    for start in (0.01, 5.0):  # from below and from above
        temp = Temperature(start, lr=0.05, alpha_min=1e-6, learn=True)
        path = [temp.alpha]
        for _ in range(600):
            _, h, support = sac_values(heads, avail, None, temp.alpha)
            temp.step(h, target_entropy(support, ratio))
            path.append(temp.alpha)
        assert (path[1] > path[0]) == (start < alpha_star)  # the first step goes the right way
        assert path[-1] == pytest.approx(alpha_star, rel=0.05), (start, path[::100])
    fixed = Temperature(0.2, lr=0.05, alpha_min=1e-6, learn=False)
    _, h, support = sac_values(heads, avail, None, 0.2)
    fixed.step(h, target_entropy(support, ratio))
    assert fixed.alpha == pytest.approx(0.2)
    with pytest.raises(ValueError, match="alpha must be > 0"):
        Temperature(0.0, lr=0.05, alpha_min=1e-6, learn=True)


def test_temperature_state_round_trip():
    a = Temperature(0.1, lr=0.01, alpha_min=1e-6, learn=True)
    a.step(torch.tensor([0.1]), torch.tensor([0.5]))
    b = Temperature(0.7, lr=0.01, alpha_min=1e-6, learn=True)
    b.load_state_dict(copy.deepcopy(a.state_dict()))  # as through torch.save: no shared moments
    for t in (a, b):
        t.step(torch.tensor([0.2]), torch.tensor([0.5]))
    assert a.alpha == b.alpha != 0.1


# -- one real micro-step ----------------------------------------------------------------
ALPHA_LR, RATIO = 0.01, 0.5


def test_sac_d_micro_step_matches_definition(monkeypatch):
    monkeypatch.setattr(tls, "BASE", [o for o in tls.BASE if not o.startswith("algo.pqn.")])  # PQN's keys
    cfg, learner, ref = build(
        "learner=sac_d",
        f"algo.sac_d.hyperparams.gamma={GAMMA}",
        f"algo.sac_d.hyperparams.lam={LAM}",
        f"algo.sac_d.hyperparams.alpha={ALPHA0}",
        f"algo.sac_d.hyperparams.tau={TAU}",
        f"algo.sac_d.hyperparams.top_k_actions={TOPK}",
        f"algo.sac_d.hyperparams.alpha_lr={ALPHA_LR}",
        f"algo.sac_d.hyperparams.target_entropy_ratio={RATIO}",
    )
    assert isinstance(learner, SacDLearner)
    watch = learner._watch = Watch(learner, monkeypatch)
    L, E = learner.rollout_len, learner.env.n_envs

    scalars = learner.micro_step()

    steps = watch.steps
    assert len(steps) == L
    r = [[tr.reward for tr in s] for s in steps]
    d = [[float(tr.done) for tr in s] for s in steps]
    assert 0 < sum(map(sum, d)) < L * E and any(x for row in r for x in row), "precondition: mixed dones, rewards"

    entropies, targets, gaps = [], [], []

    def V(ep, selected):
        heads = head_scores(ref, ref.target_state, ref.target_action, ep, selected, cfg, train=False)
        avail = [j for j in range(ep.n_chunks) if j not in selected]
        v, h, n = sac_ref(heads[0].tolist(), heads[1].tolist(), avail, TOPK, ALPHA0)
        entropies.append(h)
        targets.append(RATIO * math.log(max(n, 1)))
        mean = sac_ref((heads.sum(0) / 2).tolist(), (heads.sum(0) / 2).tolist(), avail, TOPK, ALPHA0)[0]
        gaps.append(mean - v)
        return v

    v_next = [[V(tr.ep, tr.selected + [tr.action]) if not tr.done else 0.0 for tr in s] for s in steps[:-1]]
    v_last = [V(ep, sel) if not steps[-1][e].done else 0.0 for e, (ep, sel) in enumerate(watch.after[L - 1])]
    assert max(gaps) > 1e-3, "precondition: the two heads disagree, so the clipped minimum matters"
    G = lambda_returns_ref(r, d, v_next, v_last, GAMMA, LAM)
    args, _, G_learner = watch.returns_call
    assert tuple(args[4:6]) == (GAMMA, LAM)  # lambda_returns(rewards, dones, values, bootstrap, γ, λ, ...)
    torch.testing.assert_close(G_learner.double(), G, rtol=1e-5, atol=1e-6)
    assert set(watch.target_modes) == {False}

    # the temperature: one Adam step on log α with the mean entropy gap of the states whose V was
    # computed (first Adam step: log α moves by −lr·g/(|g| + ε), ε = 1e-8)
    gap = sum(entropies) / len(entropies) - sum(targets) / len(targets)
    assert abs(gap) > 1e-3
    alpha_after = math.exp(math.log(ALPHA0) - ALPHA_LR * gap / (abs(gap) + 1e-8))
    assert scalars["entropy"] == pytest.approx(sum(entropies) / len(entropies), rel=1e-5)
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
        alpha_after=alpha_after,
    )
