"""Q-RAG's learner, PQN-style (DESIGN §5). One micro-step:

  roll out L steps in each of E persistent envs with the soft top-k policy (rl/learners/acting.py)
  V(s) = V_1 + V_2,  V_h = M + α′·log Σ_{a ∈ top-k available} exp((q′_h(a) − M)/α′)   (target heads,
        α′ = target_alpha_scale·α, = α by default)
  G_t = r_t + γ(1 − d_t)[(1 − λ) V(s_{t+1}) + λ G_{t+1}],  G_{L−1} bootstrapped from V(s_L)
  loss = [½·mean((2q1 − G)²) + ½·mean((2q2 − G)²)] / K   (online heads of the chosen chunks)

and every K micro-steps AdamW, then α = max(α₀·lr/lr₀, α_min) and θ′ ← τθ + (1 − τ)θ′.

V is computed for the whole rollout in one batched pass after it ends, which equals computing it
at acting time: the target encoders and α change only at optimiser steps (DESIGN §5.2).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from envs.env import Episode, VecRetrievalEnv
from rl.learners.acting import SoftHyper, Transition, lr_tied_alpha, rollout_values, value_states
from rl.learners.base import RunSettings, TwinHeadLearner, ema_weight
from rl.learners.returns import lambda_returns
from rl.model.qfunc import soft_values
from rl.model.qnetwork import QNetwork
from rl.schema import param


@dataclass
class Hyper(SoftHyper):
    """``algo.pqn.hyperparams`` (``learner=pqn``): the soft learners' keys (rl/learners/acting.py)
    and PQN's own. The model presets of configs/algo/ override some of these with a benchmark's
    published values."""

    lam: float = param(
        0.65, "λ of the λ-returns (was `Lambda`, still read from old run folders and command lines)", low=0.0, high=1.0
    )
    soft_target: bool = param(True, 'false: hard per-head max target ("w/o Soft-Q")')
    # The soft target's temperature apart from the policy's (1 = the same α, the paper's): isolates
    # which of the two delays the qa3 jump at α₀ 0.05 (experiments/round7/README.md).
    target_alpha_scale: float = param(
        1.0, "the soft target's temperature is target_alpha_scale·α (the policy keeps α)", low=0.0, low_open=True
    )


class PQNLearner(TwinHeadLearner):
    NAME = "pqn"
    LOSS = "qf_loss"
    HYPER = Hyper
    SCHEDULED = ("alpha",)
    # legacy.* switches that reproduce defects of the reference's PQN (docs/TRAINING.md, "Departures")
    LEGACY = ("lambda_return_off_by_one", "drop_last_transition", "target_topk_before_mask", "dropout_in_targets")

    def __init__(
        self,
        qnet: QNetwork,
        env: VecRetrievalEnv,
        run: RunSettings,
        hp: Hyper,
        lambda_return_off_by_one: bool = False,
        drop_last_transition: bool = False,
        target_topk_before_mask: bool = False,
        dropout_in_targets: bool = False,
    ):
        super().__init__(qnet, env, run)
        self.hp = hp
        self.alpha = self.hp.alpha  # α = α₀ until the first optimiser step
        self.legacy_off_by_one = lambda_return_off_by_one
        self.legacy_drop_last = drop_last_transition
        self.legacy_topk = target_topk_before_mask
        self.target_train_mode = dropout_in_targets

    # -- acting ---------------------------------------------------------------------------
    def _act(self) -> list[Transition]:
        return self.soft_step(self.hp, self.alpha)

    # -- targets --------------------------------------------------------------------------
    @torch.no_grad()
    def _target_values(self, items: list[tuple[Episode, list[int]]]) -> torch.Tensor:
        """V(s) = V_1 + V_2 of the target heads (rl.model.qfunc.soft_values) for (episode, chunks held)."""
        heads, avail = self.qnet.target_heads(items, self.target_train_mode)
        return soft_values(
            heads,
            avail,
            self.hp.top_k_actions,
            self.alpha * self.hp.target_alpha_scale,
            soft=self.hp.soft_target,
            legacy_topk_before_mask=self.legacy_topk,
        )

    # -- one micro-step -------------------------------------------------------------------
    def micro_step(self) -> dict[str, float]:
        """Roll out L steps in every env, soft values of the target heads, λ-returns, one backward
        pass of the twin loss; every K micro-steps the optimiser step, then α and the target
        encoders (DESIGN §5.5). Returns the scalars."""
        self.qnet.new_rollout()
        steps = [self._act() for _ in range(self.rollout_len)]  # [L][E]
        bootstrap = [(ep, list(ep.selected)) for ep in self.env.episodes]  # s_L
        if self.legacy_drop_last:
            self._act()  # the reference's (L+1)-th step: advances the envs, never trained
        cells, states = value_states(steps, bootstrap)
        values = self._target_values(states) if states else None
        rewards, dones, v_next, v_last = rollout_values(steps, cells, values, self.qnet)
        returns = lambda_returns(rewards, dones, v_next, v_last, self.hp.gamma, self.hp.lam, self.legacy_off_by_one)
        scalars = self.regress_on([tr for step in steps for tr in step], returns.flatten())
        if self.end_micro_step():
            scalars.update(self.optimizer_step())
            # DESIGN §5.5 steps 5-6: α tied to the learning rate just set, EMA of the target encoders
            self.alpha = lr_tied_alpha(self.hp, scalars["lr"], self.base_lr)
            self.qnet.update_targets(ema_weight(self.hp))
            scalars["alpha"] = self.alpha
        return scalars
