"""Acting: the behaviour policies as pure functions of Q-values, availability and a generator, and
the :class:`Observation` they choose on; the step itself is the learner base's
(rl.learners.base.LearnerBase.observe, then env_step), the one place that steps the training envs.

Policies (DESIGN §4.2), each over the available chunks A(s):
  uniform         a ∼ U(A(s))                                   (every learner's warm-up)
  greedy          a = argmax_{a ∈ A(s)} Q(s, a)
  soft top-k      a ∼ softmax((Q(s, a) − max Q)/α) over the top-min(k, |A|) of A(s)   (PQN, SARSA, SAC-D)
  ε-greedy        uniform with probability ε, else greedy (or soft top-k with a temperature)   (DQN)
The Q-values come from ``q_of(slots)`` (:meth:`Observation.q_values`), the online Q-function of the
listed slots, so a policy computes only the rows it uses (ε-greedy: the slots that do not explore).
The rollout's values for λ-returns are gathered here too (:func:`value_states`, :func:`rollout_values`),
around the learner's own V: the learner calls both, so no function here calls back into it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from envs.env import Episode, VecRetrievalEnv
from rl.model.padded import pad_rows
from rl.model.qfunc import NEG_INF, masked_topk, sample_policy, soft_topk_draws, soft_topk_probs
from rl.model.qnetwork import QNetwork
from rl.schema import Schema, param

QOf = Callable[[list[int]], list[torch.Tensor]]  # slots -> Q(s, ·) [N] of each


@dataclass
class Transition:
    ep: Episode
    selected: list[int]  # chunks held before acting (selection order)
    state: list[int] | None  # state token ids (None: not built, see LearnerBase.env_step)
    action: int
    code: int  # p̂_t(a_t), or -1 for no positions
    reward: float = 0.0
    done: bool = False


class Observation:
    """The training slots before a step: their episodes and (built on first use, once, by the
    Q-network) state token ids; :meth:`q_values` is the online Q-function a policy samples from.
    Every slot's sample has entered the network already (rl.learners.base.LearnerBase.start_slots,
    and LearnerBase.env_step for each reset)."""

    def __init__(self, qnet: QNetwork, env: VecRetrievalEnv, dropout: bool):
        self.qnet, self.dropout = qnet, dropout
        self.episodes = [env.episodes[s] for s in range(env.n_envs)]
        self.available = [ep.available for ep in self.episodes]
        self.states: list[list[int] | None] = [None] * len(self.episodes)

    def state(self, slot: int) -> list[int]:
        if self.states[slot] is None:
            self.states[slot] = self.qnet.inputs.state_ids(self.episodes[slot])
        return self.states[slot]  # type: ignore[return-value]

    def q_values(self, slots: list[int]) -> list[torch.Tensor]:
        """Q(s, ·) [N] of the listed slots, online encoders in the acting dropout mode."""
        return self.qnet.q_values(
            [self.episodes[s] for s in slots],
            train=self.dropout,
            states=[self.state(s) for s in slots],
        )


@dataclass
class SoftHyper(Schema):
    """The keys of the soft top-k learners (PQN, SARSA, SAC-D), first in their
    ``algo.<name>.hyperparams``: discount, the policy's temperature and support, target encoders."""

    gamma: float = param(0.99, "discount γ", low=0.0, high=1.0)
    alpha: float = param(
        0.01, "α₀ of the soft top-k policy (and soft targets); α = max(α₀·lr_t/lr₀, alpha_min)", low=0.0, low_open=True
    )
    alpha_min: float = param(1e-6, "floor of α", low=0.0)
    tau: float = param(0.1, "EMA rate of the target encoders", low=0.0, high=1.0)
    top_k_actions: int | None = param(
        5, "k: the policy (and soft value) over the top-k available chunks (null = all)", low=1
    )
    use_target_networks: bool = param(True, 'false: targets are the online encoders, τ = 1 ("w/o Target")')
    acting_dropout: bool = param(True, "rollouts act with dropout on (the reference's train mode)")


@dataclass(frozen=True)
class SoftPolicy:
    """The soft top-k policy's settings at one acting step."""

    warming_up: bool
    alpha: float
    top_k: int | None
    dropout: bool  # online encoders in train mode while acting


# -- behaviour policies ----------------------------------------------------------------------
def uniform_action(available: torch.Tensor, generator: torch.Generator) -> int:
    """a ∼ U(A(s))."""
    avail = torch.nonzero(available).flatten()
    return int(avail[torch.randint(len(avail), (1,), generator=generator).item()])


def greedy_action(q: torch.Tensor, available: torch.Tensor) -> int:
    """argmax of Q over the available chunks."""
    return int(masked_topk(q, available, 1)[1][0])


def soft_topk_actions(
    q_of: QOf, available: Sequence[torch.Tensor], policy: SoftPolicy, generator: torch.Generator
) -> list[int]:
    """One action per slot from :class:`SoftPolicy` (uniform while warming up)."""
    if policy.warming_up:
        return [uniform_action(a, generator) for a in available]
    q = pad_rows(q_of(list(range(len(available)))), NEG_INF)
    return soft_topk_draws(q, pad_rows(available, False), policy.top_k, policy.alpha, generator)


def epsilon_greedy_actions(
    q_of: QOf,
    available: Sequence[torch.Tensor],
    epsilon: float,
    generator: torch.Generator,
    softmax: tuple[int | None, float] | None = None,
) -> list[int]:
    """Per slot: explore (uniform) with probability ε, else greedy, or with ``softmax`` = (k,
    temperature) the soft top-k policy at that temperature. The coin of every slot is drawn
    first, then Q of the slots that do not explore, then each slot's action in order."""
    explore = [bool(torch.rand(1, generator=generator).item() < epsilon) for _ in available] if epsilon > 0 else []
    exploit = [i for i in range(len(available)) if not (explore and explore[i])]
    q = dict(zip(exploit, q_of(exploit))) if exploit else {}
    actions = []
    for i, a in enumerate(available):
        if i not in q:
            actions.append(uniform_action(a, generator))
        elif softmax is not None:
            actions.append(sample_policy(q[i], a, softmax[0], softmax[1], generator))
        else:
            actions.append(greedy_action(q[i], a))
    return actions


def policy_probs(q: torch.Tensor, available: torch.Tensor, k: int | None, alpha: float) -> torch.Tensor:
    """[N] float64 probabilities of the soft top-k policy (rl.model.qfunc.soft_topk_draws samples from
    exactly this distribution); 0 outside the top-min(k, |A|) available chunks."""
    top, idx, _ = soft_topk_probs(q.unsqueeze(0), available.unsqueeze(0), k, alpha)
    return torch.zeros(q.shape[0], dtype=torch.float64, device=q.device).index_put_((idx[0],), top[0])


def lr_tied_alpha(hp: Any, lr: float, base_lr: float) -> float:
    """The policy's temperature after an optimiser step at learning rate ``lr`` (PQN, SARSA):
    α = max(α₀ · lr / lr₀, α_min), α₀ = ``hp.alpha``, lr₀ the configured learning rate."""
    return max(hp.alpha * lr / base_lr, hp.alpha_min)


def value_states(
    steps: list[list[Transition]], bootstrap: list[tuple[Episode, list[int]]]
) -> tuple[list[int], list[tuple[Episode, list[int]]]]:
    """The states of a rollout ``steps`` [L][E] whose value V enters a λ-return, ``bootstrap`` the
    states s_L: (cells, states), each state as (episode, chunks held) and its cell t·E + e in the
    [L + 1, E] grid of V(s_t) (row t = L: s_L). Only V(s_{t+1}) after a step that did not end its
    episode enters a return; V(s_0) and values after a done are multiplied by zero, so they are not
    computed at all (left 0 by :func:`rollout_values`: exactly the same targets)."""
    E = len(steps[0])
    flat = [tr for step in steps for tr in step]
    items = [(tr.ep, tr.selected) for tr in flat] + bootstrap
    cells = [i for i in range(E, len(items)) if not flat[i - E].done]
    return cells, [items[i] for i in cells]


def rollout_values(
    steps: list[list[Transition]], cells: list[int], values: torch.Tensor | None, qnet: QNetwork
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rewards, dones, V(s_t), V(s_L)) of a rollout ``steps`` [L][E]: [L, E], [L, E], [L, E], [E] on
    the network's device, V the learner's ``values`` of the states of :func:`value_states` at
    ``cells`` (None when there are none), 0 in every other cell."""
    L, E = len(steps), len(steps[0])
    grid = torch.zeros((L + 1) * E, device=qnet.device)
    if cells:  # host-built indices go over without waiting for the GPU
        grid[qnet.to_device(np.asarray(cells, dtype=np.int64))] = values
    v = grid[: L * E].view(L, E)
    boot = grid[L * E :]
    return *rewards_and_dones(steps, qnet), v, boot


def rewards_and_dones(steps: list[list[Transition]], qnet: QNetwork) -> tuple[torch.Tensor, torch.Tensor]:
    """(rewards, dones) [L, E] float of a rollout ``steps`` [L][E] on the network's device, built on
    the host and copied without waiting for the GPU (one copy)."""
    host = np.array([[[tr.reward for tr in s] for s in steps], [[float(tr.done) for tr in s] for s in steps]])
    rewards, dones = qnet.to_device(host.astype(np.float32))
    return rewards, dones
