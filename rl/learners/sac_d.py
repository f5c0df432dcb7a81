"""Soft actor-critic for discrete actions on Q-RAG's Q-network (``learner=sac_d``; docs/TRAINING.md, "SAC-D").

Critics: the twin heads, 2·q_h being head h's estimate of Q (the twin loss trains them so). Actor:
implicit, π(a|s) = softmax(Q(s, a)/α) over the top-min(k, |A|) available chunks, i.e. the soft
top-k policy (rl/learners/acting.py); no policy head, no actor loss. Target, with π′ the same policy
on the target heads:

  V(s′) = Σ_a π′(a|s′) [min(2q′1, 2q′2)(s′, a) − α log π′(a|s′)],   G = λ-returns of V (λ = 0: r + γ(1 − d)V(s′))

Temperature: fixed (``learn_alpha: false``) or log α learned by Adam on
J(log α) = log α · mean_s[H(π′(·|s)) − H̄(s)], H̄(s) = ``target_entropy_ratio`` · log(support size),
over the next states whose V was computed since the last optimiser step (none: α unchanged).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from envs.env import Episode, VecRetrievalEnv
from rl.learners.acting import SoftHyper, Transition, rollout_values, value_states
from rl.learners.base import RunSettings, TwinHeadLearner, ema_weight
from rl.learners.returns import lambda_returns
from rl.model.qnetwork import QNetwork
from rl.schema import param

NEG_INF = float("-inf")


def sac_values(
    heads: torch.Tensor, available: torch.Tensor, k: int | None, alpha: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(V [S], entropy of π′ [S], support size [S]) for head scores [S, 2, N] of the target network
    and availability [S, N]. π′ = softmax((q′1 + q′2)/α) over the top-min(k, |A|) available chunks,
    V = Σ π′ (min(2q′1, 2q′2) − α log π′). A state with nothing available has V = H = 0."""
    heads = heads.float()
    q = heads.sum(1)
    n = q.shape[-1]
    kk = n if k is None else min(int(k), n)
    vals, idx = torch.topk(q.masked_fill(~available, NEG_INF), kk, dim=-1)
    support = torch.clamp(available.sum(-1), max=kk)  # [S]
    in_support = torch.arange(kk, device=q.device) < support.view(-1, 1)
    top = vals[:, :1]
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    logits = ((vals - top) / alpha).masked_fill(~in_support, NEG_INF)
    logits = torch.where(in_support.any(-1, keepdim=True), logits, torch.zeros_like(logits))
    logp = torch.log_softmax(logits, -1)
    p = logp.exp()
    logp = logp.masked_fill(~in_support, 0.0)  # 0·(−inf) would be nan
    q_min = 2 * torch.minimum(heads[:, 0], heads[:, 1]).gather(1, idx)
    v = (p * (q_min.masked_fill(~in_support, 0.0) - alpha * logp)).sum(-1)
    h = -(p * logp).sum(-1)
    some = support > 0
    return torch.where(some, v, torch.zeros_like(v)), torch.where(some, h, torch.zeros_like(h)), support


def target_entropy(support: torch.Tensor, ratio: float) -> torch.Tensor:
    """H̄(s) = ratio · log(support size): a fraction of the largest entropy over the support."""
    return ratio * torch.log(torch.clamp(support.double(), min=1.0))


def alpha_loss(log_alpha: torch.Tensor, entropy: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """J(log α) = log α · mean(H − H̄): its gradient step raises α while H < H̄, lowers it while H > H̄."""
    return log_alpha * (entropy.double() - target.double()).mean().detach()


class Temperature:
    """α = max(exp(log α), α_min), log α fixed or learned by Adam on :func:`alpha_loss`."""

    def __init__(self, alpha: float, lr: float, alpha_min: float, learn: bool):
        if alpha <= 0:
            raise ValueError(f"the temperature alpha must be > 0, got {alpha}")
        self.learn, self.alpha_min = learn, alpha_min
        self.log_alpha = torch.tensor(math.log(alpha), dtype=torch.float64, requires_grad=True)
        self.optimizer = torch.optim.Adam([self.log_alpha], lr=lr)

    @property
    def alpha(self) -> float:
        return max(math.exp(self.log_alpha.item()), self.alpha_min)

    def step(self, entropy: torch.Tensor, target: torch.Tensor) -> float:
        """One Adam step of log α (when learned); returns J(log α) before it."""
        loss = alpha_loss(self.log_alpha, entropy, target)
        if self.learn:
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
        return float(loss.detach())

    def state_dict(self) -> dict[str, Any]:
        return {"log_alpha": self.log_alpha.detach().clone(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.optimizer.load_state_dict(state["optimizer"])


@dataclass
class SacHyper(SoftHyper):
    """``algo.sac_d.hyperparams`` (``learner=sac_d``): the soft learners' keys (rl/learners/acting.py;
    here α is learned, not tied to the learning rate) and SAC-D's own."""

    alpha: float = param(0.01, "initial temperature α (the fixed one with learn_alpha: false)", low=0.0, low_open=True)
    lam: float = param(0.0, "λ of PQN's λ-returns over the soft values (0 = SAC's one-step target)", low=0.0, high=1.0)
    learn_alpha: bool = param(True, "learn log α towards the target entropy (false: α stays at alpha)")
    alpha_lr: float = param(3e-3, "Adam learning rate of log α", low=0.0)
    target_entropy_ratio: float = param(
        0.5, "target entropy = ratio · log(support size) of each state's policy", low=0.0, high=1.0
    )


class SacDLearner(TwinHeadLearner):
    NAME = "sac_d"
    LOSS = "qf_loss"
    HYPER = SacHyper
    SCHEDULED = ("alpha",)

    def __init__(self, qnet: QNetwork, env: VecRetrievalEnv, run: RunSettings, hp: SacHyper):
        super().__init__(qnet, env, run)
        self.hp = hp
        self.temperature = Temperature(self.hp.alpha, self.hp.alpha_lr, self.hp.alpha_min, self.hp.learn_alpha)
        self.alpha = self.temperature.alpha
        self._entropy: list[torch.Tensor] = []  # H(π′) of the target states since the last optimiser step
        self._target_h: list[torch.Tensor] = []

    # -- acting (PQN's behaviour policy, the implicit actor) ---------------------------------
    def _act(self) -> list[Transition]:
        return self.soft_step(self.hp, self.alpha)

    # -- targets and one micro-step --------------------------------------------------------
    @torch.no_grad()
    def _target_values(self, items: list[tuple[Episode, list[int]]]) -> torch.Tensor:
        """SAC-D's V(s) for (episode, chunks held) pairs; records the entropies for the α step."""
        heads, avail = self.qnet.target_heads(items, False)
        v, h, support = sac_values(heads, avail, self.hp.top_k_actions, self.alpha)
        self._entropy.append(h.cpu())
        self._target_h.append(target_entropy(support, self.hp.target_entropy_ratio).cpu())
        return v

    def micro_step(self) -> dict[str, float]:
        """Roll out L steps in every env, SAC-D's λ-returns (``lam`` = 0: r + γV(s′)), one
        backward pass of the twin loss; every K micro-steps the optimiser step, then the
        temperature step and the EMA of the target encoders."""
        self.qnet.new_rollout()
        steps = [self._act() for _ in range(self.rollout_len)]  # [L][E]
        bootstrap = [(ep, list(ep.selected)) for ep in self.env.episodes]
        cells, states = value_states(steps, bootstrap)
        values = self._target_values(states) if states else None
        rewards, dones, v_next, v_last = rollout_values(steps, cells, values, self.qnet)
        returns = lambda_returns(rewards, dones, v_next, v_last, self.hp.gamma, self.hp.lam)
        scalars = self.regress_on([tr for step in steps for tr in step], returns.flatten())
        if self.end_micro_step():
            scalars.update(self.optimizer_step())
            if self._entropy:  # the next states valued since the last optimiser step
                h, target = torch.cat(self._entropy), torch.cat(self._target_h)
                scalars["entropy"] = float(h.mean())
                scalars["alpha_loss"] = self.temperature.step(h, target)
            self._entropy, self._target_h = [], []
            self.alpha = self.temperature.alpha
            self.qnet.update_targets(ema_weight(self.hp))
            scalars["alpha"] = self.alpha
        return scalars

    def extra_state(self) -> dict[str, Any]:
        return {**super().extra_state(), "temperature": self.temperature.state_dict()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        self.temperature.load_state_dict(state["temperature"])
        self.alpha = self.temperature.alpha
