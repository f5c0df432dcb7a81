"""One micro-step + optimiser step of the real learners against an independent computation.

The learners (rl/learners/pqn.py, rl/learners/sft.py, rl/learners/base.py) run unmodified on a 2-layer offline
MiniLM over tiny BabiLong haystacks. The test watches what they compute (the λ-returns' inputs
and output, the gradients AdamW receives, the weights afterwards) and recomputes every value from
the method's definition (paper §4, docs/TRAINING.md's "Departures from the reference implementation" for the
legacy switches, the docstrings of rl/; docs/TESTING.md):

  V(s)  = V1 + V2, V_h = α·logsumexp(q′_h/α) over the top-k AVAILABLE chunks of target head h
          (hard max with soft_target=false; top-k over all chunks, then masked, with the legacy
          target_topk_before_mask); V = 0 when nothing is available
  G_t   = r_t + γ(1 − d_t)[(1 − λ)V_{t+1} + λG_{t+1}],  G_{L−1} = r_{L−1} + γ(1 − d_{L−1})V_L
  loss  = [0.5·mean((2q1 − G)²) + 0.5·mean((2q2 − G)²)] / K
  clip  g ← g·min(1, c/‖g‖) over all trainable parameters, then one AdamW step
  α     = max(α0·lr_1/lr0, α_min) with lr_1 the rate after the scheduler step
  EMA   θ′ ← τθ + (1 − τ)θ′ for both target encoders (τ = 1 without target networks)
  SFT   (loss=softmax) mean softmax cross-entropy of Q(s_t, ·) over the available chunks, next
        gold chunk as target; the default beam loss: tests/rl/test_sft_step.py

Dropout is set to 0 in the encoders: a random mask cannot be recomputed independently. Whether
the targets run in train or eval mode (legacy dropout_in_targets) is checked by forward hooks.
Each configuration asserts its own preconditions (clipping active, some state with an
unavailable chunk among the top-k, ...) so that the listed wrong learners cannot pass.
"""

from __future__ import annotations

import copy
import math
import sys

import pytest
import torch
from torch import nn

from envs.data.registry import build_dataset
from envs.env import PositionSettings, VecRetrievalEnv
from envs.feedback import build_feedback
from envs.legacy import Legacy
from envs.positions import relative_codes_by_gap
from rl.learners.sft import SFTLearner
from rl.run.build import build_learner, qnet_from_cfg
from tests.conftest import compose_cfg

LR0, ALPHA0, TAU, GAMMA, LAM, TOPK, CLIP, STEPS = 1e-3, 0.05, 0.1, 0.9, 0.65, 2, 0.05, 4

BASE = [
    "experiment=demo",
    "algo.model.predictor.num_layers=2",
    "envs.task=qa2_two-supporting-facts",
    "envs.num_sentences=8",
    "envs.max_steps=3",  # episodes end at step 2 of L = 5: a done inside, the last two steps not done
    "batch_size=10",
    "envs_parallel=2",  # L = 5 steps of 2 envs
    "accumulate_grads=1",
    "learning_start=100",  # uniform acting: the policy is not under test, and it is cheaper
    f"steps_count={STEPS}",
    "max_action_length=16",
    "max_action_length_in_memory=16",
    "seed=1",  # on the real qa2 files the rollouts of every case hold dones and non-zero rewards (seed 3: none)
    "feedback.ground_truth.per_fact_reward=0.5",  # rewards on most rollouts, not only at completion
    f"algo.optimizer.lr={LR0}",
    "algo.scheduler.warmup=0",  # lr_0 = lr0, lr_1 = lr0·(1 − 1/STEPS): α must move
    f"algo.pqn.hyperparams.alpha={ALPHA0}",
    f"algo.pqn.hyperparams.tau={TAU}",
    f"algo.pqn.hyperparams.gamma={GAMMA}",
    f"algo.pqn.hyperparams.lam={LAM}",
    f"algo.pqn.hyperparams.top_k_actions={TOPK}",
    f"algo.max_grad_norm={CLIP}",
]

_CACHE: dict[str, object] = {}


def build(*extra: str):
    """(cfg, learner, reference) for BASE + extra, environments reset. The reference is the
    pristine agent the learner's agent was copied from: the independent computation reads it."""
    base = BASE if "learner=sft" not in extra else [o for o in BASE if not o.startswith("algo.pqn.")]
    cfg = compose_cfg(base + list(extra))
    device = torch.device("cpu")
    legacy = Legacy.from_cfg(cfg.legacy)
    if not _CACHE:  # weights and data are the slow part: once per module (every case has the same)
        qnet = qnet_from_cfg(cfg, device)
        for m in qnet.modules():
            if isinstance(m, nn.Dropout):
                m.p = 0.0
        _CACHE["agent"] = qnet
        _CACHE["data"] = build_dataset(cfg.envs, "train", int(cfg.seed), 0.0, legacy)
    pristine, ds = _CACHE["agent"], _CACHE["data"]
    # the previous case used it as its reference: drop its gradients, restore the modes
    pristine.zero_grad(set_to_none=True)
    for enc, train in (
        (pristine.state_enc, True),
        (pristine.action_enc, True),
        (pristine.target_state, False),
        (pristine.target_action, False),
    ):
        enc.train(train)
    qnet = copy.deepcopy(pristine)
    env = VecRetrievalEnv(
        ds,
        build_feedback(cfg.feedback, cfg.envs, "train", str(cfg.envs.task), legacy),
        int(cfg.envs_parallel),
        int(cfg.envs.max_steps),
        PositionSettings.from_cfg(cfg.envs),
        bool(cfg.envs.sort_by_index),
        device,
        int(cfg.seed),
        "train",
    )
    learner = build_learner(qnet, env, cfg, legacy)
    learner.start_slots()
    return cfg, learner, pristine


# -- watching the learner --------------------------------------------------------------
class Watch:
    """Records the rollout (transitions and the env's states after every step), the inputs and
    output of the λ-return, the train/eval mode of every target-encoder call and the gradients
    handed to AdamW."""

    def __init__(self, learner, monkeypatch):
        self.steps, self.after, self.returns_call, self.target_modes, self.grads = [], [], None, [], None
        original_act = getattr(learner, "_act", None)  # PQN's acting step (SFT does not act)

        def act():
            out = original_act()
            self.steps.append(out)
            self.after.append([(ep, list(ep.selected)) for ep in learner.env.episodes])
            return out

        if original_act is not None:
            monkeypatch.setattr(learner, "_act", act)
        module = sys.modules[type(learner).__module__]  # the learner's module calls lambda_returns
        original_returns = getattr(module, "lambda_returns", None)

        def returns(*args, **kwargs):
            out = original_returns(*args, **kwargs)
            self.returns_call = ([a.clone() if torch.is_tensor(a) else a for a in args], kwargs, out.clone())
            return out

        if original_returns is not None:
            monkeypatch.setattr(module, "lambda_returns", returns)
        qnet = learner.qnet
        for enc in (qnet.target_state, qnet.target_action):
            enc.register_forward_pre_hook(
                lambda mod, args, kw: self.target_modes.append(mod.training) and None, with_kwargs=True
            )

        def before_step(opt, args, kwargs):
            # zero_grad(set_to_none) drops these tensors after the step without touching them
            self.grads = [p.grad for p in qnet.trainable_parameters()]

        learner.optimizer.register_step_pre_hook(before_step)


# -- the independent computation ---------------------------------------------------------
def codes_of(ep, selected, pos: PositionSettings):
    if pos.processor == "none":
        return None
    assert pos.processor == "relative", "this test writes out the relative codes only"
    return torch.from_numpy(relative_codes_by_gap(ep.n_chunks, list(selected), pos.step_size, pos.formula)).long()


def rotated(ref, u, codes):
    return u.float() if codes is None else ref.rope(u.float(), codes)


def head_scores(ref, state_enc, action_enc, ep, selected, cfg, train: bool) -> torch.Tensor:
    """[2, N] float64: head h of Q(s, j) for every chunk j, s = question + ``selected``."""
    ref.prepare([ep])  # the sample enters the reference network too (a no-op once it has)
    s = ref._embed(state_enc, [ref.inputs.state_ids(ep, selected=list(selected))], train=train)[0]
    u = ref._embed(action_enc, [ref.inputs.action_ids(ep, j) for j in range(ep.n_chunks)], train=train)
    r = rotated(ref, u, codes_of(ep, selected, PositionSettings.from_cfg(cfg.envs))).double()
    s, h = s.double(), s.shape[0] // 2
    return torch.stack((r[:, :h] @ s[:h], r[:, h:] @ s[h:]))


def twin_heads_ref(ref, s_emb, chosen, pos: PositionSettings, grad: bool = False):
    """float64 heads (q1, q2) of Q(s, a) for state embeddings ``s_emb`` and ``chosen`` =
    [(episode, selection, action)], each action embedded alone and rotated by its code."""
    ref.prepare([ep for ep, _, _ in chosen])
    a_emb = torch.cat(
        [
            rotated(
                ref,
                ref._embed(ref.action_enc, [ref.inputs.action_ids(ep, a)], train=True, grad=grad),
                codes_of(ep, selected, pos)[a].view(1),
            )
            for ep, selected, a in chosen
        ]
    )
    h = s_emb.shape[1] // 2
    return (s_emb[:, :h].double() * a_emb[:, :h].double()).sum(1), (s_emb[:, h:].double() * a_emb[:, h:].double()).sum(
        1
    )


def twin_loss_ref(q1, q2, g):
    """½·mean((2q1 − g)²) + ½·mean((2q2 − g)²)."""
    return 0.5 * ((2 * q1 - g) ** 2).mean() + 0.5 * ((2 * q2 - g) ** 2).mean()


def soft_value(heads: torch.Tensor, available: list[int], k, alpha: float, soft=True, topk_first=False) -> float:
    if not available:
        return 0.0
    total = 0.0
    for x in heads:
        if not soft:
            total += max(float(x[j]) for j in available)
            continue
        if topk_first:  # the reference: top-k of all chunks, unavailable ones then dropped
            ranked = sorted(range(len(x)), key=lambda j: -float(x[j]))
            cand = [float(x[j]) for j in ranked[: k or len(x)] if j in available]
            if not cand:  # the reference's clamp of an empty sum: max of its top-k + α·log(1e-10)
                total += float(x[ranked[0]]) + alpha * math.log(1e-10)
                continue
        else:
            cand = sorted((float(x[j]) for j in available), reverse=True)[: k or len(available)]
        m = max(cand)
        total += m + alpha * math.log(sum(math.exp((c - m) / alpha) for c in cand))
    return total


def lambda_returns_ref(r, d, v_next, v_last, gamma, lam, off_by_one=False):
    """G from the recursion; v_next[t][e] = V(s_{t+1}) after step t (t < L − 1)."""
    L, E = len(r), len(r[0])
    G = [[0.0] * E for _ in range(L)]
    for e in range(E):
        g = r[L - 1][e] + gamma * (1 - d[L - 1][e]) * v_last[e]
        G[L - 1][e] = g
        for t in range(L - 2, -1, -1):
            vn = (1 - d[L - 1][e]) * v_last[e] if off_by_one and t == L - 2 else v_next[t][e]
            g = r[t][e] + gamma * (1 - d[t][e]) * ((1 - lam) * vn + lam * g)
            G[t][e] = g
    return torch.tensor(G, dtype=torch.float64)


def assert_close_fast(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> None:
    """assert_close's rule in one fused call; its detailed report only on failure (the encoders
    have ~15M parameters each, compared many times)."""
    if not torch.allclose(actual, expected, rtol=rtol, atol=atol):
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)


def global_norm(tensors) -> float:
    return math.sqrt(sum(float(t.norm()) ** 2 for t in tensors if t is not None))


def check_optimiser_step(cfg, learner, ref, scalars, grads_ref, tau_expected, lr_before, lr_after, alpha_after):
    """lr, α and the EMA of both target encoders against the definition, from the pristine copy
    ``ref``; with independent gradients ``grads_ref`` also the clipping and the AdamW step."""
    qnet = learner.qnet
    if grads_ref is not None:
        check_gradients_and_adamw(cfg, learner, ref, scalars, grads_ref, lr_before)
    assert scalars["lr"] == pytest.approx(lr_after, rel=1e-12)
    if alpha_after is None:  # a learner without a temperature reports none
        assert "alpha" not in scalars and not hasattr(learner, "alpha")
    else:
        assert learner.alpha == pytest.approx(alpha_after, rel=1e-12)
        assert scalars["alpha"] == learner.alpha
    for online, target, target0 in (
        (qnet.state_enc, qnet.target_state, ref.target_state),
        (qnet.action_enc, qnet.target_action, ref.target_action),
    ):
        for p, pt, pt0 in zip(online.parameters(), target.parameters(), target0.parameters(), strict=True):
            want = tau_expected * p.detach() + (1 - tau_expected) * pt0.detach()
            assert_close_fast(pt.detach(), want, rtol=1e-6, atol=1e-8)


def check_gradients_and_adamw(cfg, learner, ref, scalars, grads_ref, lr_before):
    """The reported norm, the clipped gradients AdamW received and the weights after its step."""
    qnet, watch = learner.qnet, learner._watch
    norm = global_norm(grads_ref)
    assert norm > 2 * CLIP, "precondition: clipping must be active for this check to mean anything"
    assert scalars["grad_norm"] == pytest.approx(norm, rel=1e-4)
    assert global_norm(watch.grads) == pytest.approx(CLIP, rel=1e-4)  # AdamW got the clipped gradient
    coef = CLIP / norm
    gmax = max(float(g.abs().max()) for g in grads_ref if g is not None) * coef
    for g_seen, g_ref in zip(watch.grads, grads_ref, strict=True):
        assert (g_seen is None) == (g_ref is None)
        if g_ref is not None:
            assert_close_fast(g_seen, g_ref * coef, rtol=1e-3, atol=1e-4 * gmax)
    # one AdamW step (first step: bias-corrected moments are g and g²) with the gradients the
    # learner handed over, so that only the optimiser's settings are under test here
    opt = cfg.algo.optimizer
    eps, wd = float(opt.eps), float(opt.weight_decay)
    for p1, p0, g in zip(qnet.trainable_parameters(), ref.trainable_parameters(), watch.grads, strict=True):
        if g is None:  # no gradient: AdamW leaves the parameter alone (no decay either)
            want = p0.detach()
        else:
            want = p0.detach() * (1 - lr_before * wd) - lr_before * g / (g.abs() + eps)
        assert_close_fast(p1.detach(), want, rtol=1e-5, atol=1e-7)


def lr_factor_after_first_step() -> float:
    """WarmupLinear without warm-up, ratio 0: lr_n = lr0·(1 − n/S)."""
    return 1.0 - 1.0 / STEPS


# -- PQN ---------------------------------------------------------------------------------
PQN_CASES = {
    "default": [],
    "lambda_return_off_by_one": ["legacy.lambda_return_off_by_one=true"],
    "drop_last_transition": ["legacy.drop_last_transition=true"],
    "dropout_in_targets": ["legacy.dropout_in_targets=true"],
    "target_topk_before_mask": ["legacy.target_topk_before_mask=true"],
    "no_soft_target": ["algo.pqn.hyperparams.soft_target=false"],
    "target_alpha_scale": ["algo.pqn.hyperparams.target_alpha_scale=4.0"],  # the target's α only
    # both act in the optimiser step only: τ = 1, and α held at its floor α_min > α0·lr_1/lr0
    "no_target_networks_alpha_floor": [
        "algo.pqn.hyperparams.use_target_networks=false",
        f"algo.pqn.hyperparams.alpha_min={0.9 * ALPHA0}",
    ],
    "legacy_ref": ["legacy=ref"],  # every switch at once
}
SLOW_CASES = {"legacy_ref"}  # each of its switches has its own fast case


# The gradient, clipping and AdamW checks (a backward pass through the reference copy) run in the
# default case; the switches change V, G or the EMA only, which every case checks.
@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_CASES else c for c in PQN_CASES])
def test_pqn_micro_step_matches_definition(case, monkeypatch):
    cfg, learner, ref = build(*PQN_CASES[case])
    legacy = cfg.legacy
    off_by_one, drop_last = bool(legacy.lambda_return_off_by_one), bool(legacy.drop_last_transition)
    topk_first, target_train = bool(legacy.target_topk_before_mask), bool(legacy.dropout_in_targets)
    hp = cfg.algo.pqn.hyperparams
    soft, use_targets, alpha_min = bool(hp.soft_target), bool(hp.use_target_networks), float(hp.alpha_min)
    alpha_target = ALPHA0 * float(hp.target_alpha_scale)
    watch = learner._watch = Watch(learner, monkeypatch)
    L, E = learner.rollout_len, learner.env.n_envs
    assert (L, E) == (5, 2)

    scalars = learner.micro_step()

    # the rollout: L trained steps (+1 untrained with drop_last_transition)
    assert len(watch.steps) == L + int(drop_last)
    assert learner.counters.env_steps == (L + int(drop_last)) * E
    steps = watch.steps[:L]
    r = [[tr.reward for tr in s] for s in steps]
    d = [[float(tr.done) for tr in s] for s in steps]
    assert 0 < sum(map(sum, d)) < L * E and any(x != 0 for row in r for x in row), "precondition: mixed dones, rewards"

    # target values V(s′) from the target encoders as they were before the step
    def V(ep, selected, heads_out=None):
        heads = head_scores(ref, ref.target_state, ref.target_action, ep, selected, cfg, train=target_train)
        if heads_out is not None:
            heads_out.append((heads, selected))
        avail = [j for j in range(ep.n_chunks) if j not in selected]
        return soft_value(heads, avail, TOPK, alpha_target, soft=soft, topk_first=topk_first)

    heads_seen: list = []
    v_next = [[0.0] * E for _ in range(L - 1)]
    for t in range(L - 1):
        for e, tr in enumerate(steps[t]):
            if not tr.done:  # V(s_{t+1}) after a done is multiplied by 0: the learner may skip it
                v_next[t][e] = V(tr.ep, tr.selected + [tr.action], heads_seen)
    v_last = [V(ep, sel, heads_seen) for ep, sel in watch.after[L - 1]]

    (rewards, dones, values, boot, gamma, lam, *flags), kwargs, G_learner = watch.returns_call
    assert (gamma, lam) == (GAMMA, LAM)
    torch.testing.assert_close(rewards.double(), torch.tensor(r, dtype=torch.float64))
    torch.testing.assert_close(dones.double(), torch.tensor(d, dtype=torch.float64))
    for e in range(E):  # V_L enters G only where the last step did not end the episode
        if not d[L - 1][e]:
            assert float(boot[e]) == pytest.approx(v_last[e], rel=1e-5, abs=1e-6), e
    assert not all(d[L - 1]), "precondition: the bootstrap matters in this rollout"
    for t in range(L - 1):
        for e in range(E):
            if not d[t][e]:
                assert float(values[t + 1, e]) == pytest.approx(v_next[t][e], rel=1e-5, abs=1e-6), (t, e)
    G = lambda_returns_ref(r, d, v_next, v_last, GAMMA, LAM, off_by_one)
    torch.testing.assert_close(G_learner.double(), G, rtol=1e-5, atol=1e-6)

    # sensitivity: the wrong variants of V and G would give other numbers on this rollout
    alt_topk = any(
        abs(
            soft_value(
                h, [j for j in range(h.shape[1]) if j not in sel], TOPK, ALPHA0, soft=soft, topk_first=not topk_first
            )
            - soft_value(
                h, [j for j in range(h.shape[1]) if j not in sel], TOPK, ALPHA0, soft=soft, topk_first=topk_first
            )
        )
        > 1e-3
        for h, sel in heads_seen
    )
    assert alt_topk or not soft, "precondition: some state has an unavailable chunk among the top-k"
    alt_G = lambda_returns_ref(r, d, v_next, v_last, GAMMA, LAM, not off_by_one)
    assert (alt_G - G).abs().max() > 1e-3, "precondition: the off-by-one variant changes G here"
    if soft:
        policy_alpha = [
            soft_value(h, [j for j in range(h.shape[1]) if j not in sel], TOPK, ALPHA0) for h, sel in heads_seen
        ]
        scaled = [
            soft_value(h, [j for j in range(h.shape[1]) if j not in sel], TOPK, 4 * ALPHA0) for h, sel in heads_seen
        ]
        assert max(abs(a - b) for a, b in zip(policy_alpha, scaled)) > 1e-3, "precondition: the target's α matters here"
        hard = [
            soft_value(h, [j for j in range(h.shape[1]) if j not in sel], TOPK, ALPHA0, soft=False)
            for h, sel in heads_seen
        ]
        mine = [soft_value(h, [j for j in range(h.shape[1]) if j not in sel], TOPK, ALPHA0) for h, sel in heads_seen]
        assert max(abs(a - b) for a, b in zip(hard, mine)) > 1e-3, "precondition: soft ≠ hard values here"

    # targets in the mode the switch asks for (eval unless dropout_in_targets)
    assert watch.target_modes and set(watch.target_modes) == {target_train}

    # the loss from the online encoders as they were before the step (train mode, with gradient)
    flat = [tr for s in steps for tr in s]
    pos = PositionSettings.from_cfg(cfg.envs)
    assert ref.inputs.sort_by_index == bool(cfg.envs.sort_by_index)  # the state's chunk order, bound when built
    full = case == "default"
    ref.prepare([tr.ep for tr in flat])  # the samples enter the reference network too
    s_emb = ref._embed(
        ref.state_enc, [ref.inputs.state_ids(tr.ep, selected=tr.selected) for tr in flat], train=True, grad=full
    )
    q1, q2 = twin_heads_ref(ref, s_emb, [(tr.ep, tr.selected, tr.action) for tr in flat], pos, grad=full)
    g = G.flatten()
    loss = twin_loss_ref(q1, q2, g) / int(cfg.accumulate_grads)
    if full:
        loss.backward()
    assert scalars["qf_loss"] == pytest.approx(loss.item(), rel=1e-5)
    assert scalars["q_mean"] == pytest.approx((q1 + q2).mean().item(), rel=1e-4, abs=1e-6)
    assert scalars["target_mean"] == pytest.approx(float(g.mean()), rel=1e-5, abs=1e-7)

    factor = lr_factor_after_first_step()
    check_optimiser_step(
        cfg,
        learner,
        ref,
        scalars,
        [p.grad for p in ref.trainable_parameters()] if full else None,
        tau_expected=TAU if use_targets else 1.0,
        lr_before=LR0,
        lr_after=LR0 * factor,
        alpha_after=max(ALPHA0 * factor, alpha_min),
    )
    assert learner.counters.optimizer_steps == 1


# -- SFT ---------------------------------------------------------------------------------
def test_sft_micro_step_matches_definition(monkeypatch):
    # 2 samples of 2 gold facts
    cfg, learner, ref = build("learner=sft", "batch_size=4")
    assert isinstance(learner, SFTLearner)
    watch = learner._watch = Watch(learner, monkeypatch)
    drawn: list = []
    original_draw = learner.draw_episodes
    monkeypatch.setattr(learner, "draw_episodes", lambda: drawn.extend(original_draw()) or list(drawn))

    scalars = learner.micro_step()

    T = int(cfg.envs.max_steps)
    assert ref.inputs.sort_by_index == bool(cfg.envs.sort_by_index)
    pos = PositionSettings.from_cfg(cfg.envs)
    losses, n_correct = [], 0
    ref.prepare(drawn)
    for ep in drawn:
        gold = sorted(set(int(i) for i in ep.sample["sf_idx"]))[:T]  # teacher trajectory, document order
        u = ref._embed(
            ref.action_enc, [ref.inputs.action_ids(ep, j) for j in range(ep.n_chunks)], train=True, grad=True
        )
        for t, target in enumerate(gold):
            held = gold[:t]
            s = ref._embed(ref.state_enc, [ref.inputs.state_ids(ep, selected=held)], train=True, grad=True)[0]
            q = rotated(ref, u, codes_of(ep, held, pos)).double() @ s.double()
            avail = [j for j in range(ep.n_chunks) if j not in held]
            logits = q[avail]
            losses.append(torch.logsumexp(logits, 0) - q[target])
            n_correct += int(avail[int(logits.argmax())] == target)
    assert len(losses) >= int(cfg.batch_size)
    loss = torch.stack(losses).mean()
    loss.backward()
    assert scalars["ce_loss"] == pytest.approx(loss.item(), rel=1e-5)
    assert scalars["sft_acc"] == n_correct / len(losses)
    assert scalars["transitions"] == len(losses)
    # no α, no EMA: the target encoders keep their weights (τ = 0)
    check_optimiser_step(
        cfg,
        learner,
        ref,
        scalars,
        [p.grad for p in ref.trainable_parameters()],
        tau_expected=0.0,
        lr_before=LR0,
        lr_after=LR0 * lr_factor_after_first_step(),
        alpha_after=None,
    )
    assert not watch.target_modes  # the SFT objective never runs the target encoders


def test_the_slots_enter_the_network_where_they_start_resume_or_reset(monkeypatch):
    """A slot's sample enters the Q-network once: where the slots start (``start_slots``), resume
    (``load_state_dict``) or reset (``env_step``), never again at a step; slots filled behind the
    learner's back are refused at their first state, naming the fix."""
    _, learner, _ = build()
    qnet, env = learner.qnet, learner.env
    assert all(qnet.inputs.tokens.get(ep) is not None for ep in env.episodes)
    calls = []
    real_prepare = qnet.prepare
    monkeypatch.setattr(qnet, "prepare", lambda eps, *a, **k: calls.append(list(eps)) or real_prepare(eps, *a, **k))

    def step():  # every slot takes its first available chunk
        obs = learner.observe(dropout=False)
        learner.env_step(obs, [int(torch.nonzero(a)[0]) for a in obs.available])

    reset = 0
    for _ in range(4):  # past max_steps: some episodes end and their slots reset
        before = {id(ep) for ep in env.episodes}
        calls.clear()
        step()
        fresh = [id(ep) for ep in env.episodes if id(ep) not in before]
        assert [[id(ep) for ep in c] for c in calls] == [fresh]  # the resets' episodes only, once
        reset += len(fresh)
    assert reset > 0
    state = learner.state_dict()
    _, resumed, _ = build()
    resumed.load_state_dict(state)  # new Episode objects for the saved slots
    assert all(resumed.qnet.inputs.tokens.get(ep) is not None for ep in resumed.env.episodes)
    env.reset_all()
    with pytest.raises(RuntimeError, match="start_slots"):
        step()
