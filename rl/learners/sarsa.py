"""SARSA on Q-RAG's Q-network (``learner=sarsa``; docs/TRAINING.md, "SARSA"): PQN's rollout, soft top-k
policy, α schedule, EMA targets and twin-head loss, towards the n-step SARSA target

  G_t = Σ_{i<m} γ^i r_{t+i} + γ^m Q′(s_{t+m}, a_{t+m}),   m = min(n, L − t),

cut at the first episode end inside the window; Q′ = q′1 + q′2 of the target encoders, a_{t+m}
the chunk the rollout chose. At the rollout's end (t + m = L) the next action is not taken yet:
Q′(s_L, a_L) is replaced by E_{a∼π(·|s_L)} Q′(s_L, a), π the policy of the next acting step, so
the target draws nothing from the acting random stream.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from envs.env import Episode, VecRetrievalEnv
from rl.learners.acting import SoftHyper, Transition, lr_tied_alpha, policy_probs, rewards_and_dones
from rl.learners.base import RunSettings, TwinHeadLearner, ema_weight
from rl.model.qnetwork import QNetwork
from rl.schema import param


def sarsa_returns(
    rewards: torch.Tensor, dones: torch.Tensor, q_taken: torch.Tensor, bootstrap: torch.Tensor, gamma: float, n: int
) -> torch.Tensor:
    """n-step SARSA targets, time-major [L, E]. ``q_taken[t]`` = Q′(s_t, a_t) of the action taken at
    step t (row 0 is never used); ``bootstrap`` = the value of s_L after the last step;
    ``dones[t] = 1``: the episode ended at step t (nothing is bootstrapped across it)."""
    if n < 1:
        raise ValueError(f"n-step SARSA needs n >= 1, got {n}")
    rewards, dones, q_taken = rewards.float(), dones.float(), q_taken.float()
    L = rewards.shape[0]
    out = torch.empty_like(rewards)
    for t in range(L):
        acc = torch.zeros_like(rewards[0])
        disc = torch.ones_like(rewards[0])
        for j in range(t, min(t + n, L)):
            acc = acc + disc * rewards[j]
            disc = disc * gamma * (1.0 - dones[j])
        end = t + n
        acc = acc + disc * (bootstrap.float() if end >= L else q_taken[end])
        out[t] = acc
    return out


@dataclass
class SarsaHyper(SoftHyper):
    """``algo.sarsa.hyperparams`` (``learner=sarsa``): the soft learners' keys (rl/learners/acting.py;
    the acting, α-schedule and EMA keys mean what they mean for PQN) and the n of the target."""

    n_steps: int = param(1, "n of the n-step target (1 = TD(0)); cut at episode ends and at the rollout's end", low=1)


class SarsaLearner(TwinHeadLearner):
    NAME = "sarsa"
    LOSS = "qf_loss"
    HYPER = SarsaHyper
    SCHEDULED = ("alpha",)

    def __init__(self, qnet: QNetwork, env: VecRetrievalEnv, run: RunSettings, hp: SarsaHyper):
        super().__init__(qnet, env, run)
        self.hp = hp
        self.alpha = self.hp.alpha  # α = α₀ until the first optimiser step, then tied to the LR
        self.n_steps = self.hp.n_steps

    # -- acting (PQN's behaviour policy) ----------------------------------------------------
    def _act(self) -> list[Transition]:
        return self.soft_step(self.hp, self.alpha)

    # -- targets --------------------------------------------------------------------------
    @torch.no_grad()
    def _q_taken(self, items: list[tuple[Episode, list[int], int]]) -> torch.Tensor:
        """Q′(s, a) = q′1 + q′2 of the target network for (episode, chunks held, chosen chunk)."""
        states = [(ep, sel) for ep, sel, _ in items]
        heads, _ = self.qnet.target_heads(states, False)
        acts = torch.tensor([a for _, _, a in items], device=heads.device)
        return heads.sum(1).gather(1, acts.view(-1, 1)).squeeze(1)

    @torch.no_grad()
    def _expected_next_q(self, episodes: list[Episode]) -> torch.Tensor:
        """E_{a∼π(·|s)} Q′(s, a) in every env's current state, π the policy of the next acting step."""
        qnet, train = self.qnet, self.hp.acting_dropout
        states = [(ep, list(ep.selected)) for ep in episodes]
        heads, _ = qnet.target_heads(states, False)
        q_target = [heads[i, :, : ep.n_chunks].sum(0) for i, ep in enumerate(episodes)]
        if not self.warming_up:  # the online Q the next acting step will sample from
            q_online = qnet.q_values(episodes, train=train)
        out = torch.zeros(len(episodes), device=qnet.device)
        for i, ep in enumerate(episodes):
            if not bool(ep.available.any()):
                continue
            if self.warming_up:  # uniform over the available chunks
                probs = ep.available.double() / float(ep.available.sum())
            else:
                probs = policy_probs(q_online[i], ep.available, self.hp.top_k_actions, self.alpha)
            out[i] = (probs * q_target[i].double()).sum().float()
        return out

    # -- one micro-step -------------------------------------------------------------------
    def micro_step(self) -> dict[str, float]:
        """Roll out L steps in every env (PQN's acting), n-step SARSA targets, one backward pass;
        every K micro-steps an optimiser step (PQN's: clip, AdamW, schedule, α, EMA)."""
        qnet, L, E, n = self.qnet, self.rollout_len, self.env.n_envs, self.n_steps
        qnet.new_rollout()
        steps: list[list[Transition]] = [self._act() for _ in range(L)]
        rewards, dones = rewards_and_dones(steps, qnet)
        # Q′(s_t, a_t) enters only the target of step t − n, and only if no episode ended in
        # between: the others are multiplied by zero and not computed.
        needed = [(t, e) for t in range(n, L) for e in range(E) if not any(steps[j][e].done for j in range(t - n, t))]
        q_taken = torch.zeros(L, E, device=qnet.device)
        if needed:
            vals = self._q_taken([(steps[t][e].ep, steps[t][e].selected, steps[t][e].action) for t, e in needed])
            for (t, e), v in zip(needed, vals):
                q_taken[t, e] = v
        # the bootstrap enters only where the last step did not end the episode
        live = [e for e in range(E) if not steps[L - 1][e].done]
        boot = torch.zeros(E, device=qnet.device)
        if live:
            boot[torch.tensor(live, device=qnet.device)] = self._expected_next_q([self.env.episodes[e] for e in live])
        returns = sarsa_returns(rewards, dones, q_taken, boot, self.hp.gamma, n)
        scalars = self.regress_on([tr for s in steps for tr in s], returns.flatten())
        if self.end_micro_step():
            scalars.update(self.optimizer_step())
            # PQN's: α tied to the learning rate just set, EMA of the target encoders
            self.alpha = lr_tied_alpha(self.hp, scalars["lr"], self.base_lr)
            self.qnet.update_targets(ema_weight(self.hp))
            scalars["alpha"] = self.alpha
        return scalars
