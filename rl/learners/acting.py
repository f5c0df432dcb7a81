"""Acting: the behaviour policies as pure functions of Q-values, availability and a generator; the
step itself, and the observation it hands a policy, are the learner base's
(rl.learners.base.LearnerBase.env_step, rl.learners.base.Observation), the one place that steps the
training envs.

Policies (DESIGN §4.2), each over the available chunks A(s):
  uniform         a ∼ U(A(s))                                   (every learner's warm-up)
  greedy          a = argmax_{a ∈ A(s)} Q(s, a)
  soft top-k      a ∼ softmax((Q(s, a) − max Q)/α) over the top-min(k, |A|) of A(s)   (PQN, SARSA, SAC-D)
  ε-greedy        uniform with probability ε, else greedy (or soft top-k with a temperature)   (DQN)
The Q-values come from ``q_of(slots)``, the online Q-function of the listed slots, so a policy
computes only the rows it uses (ε-greedy: the slots that do not explore).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from envs.env import Episode
from rl.model.fast.staging import to_device
from rl.model.padded import pad_rows
from rl.model.qfunc import NEG_INF, masked_topk, sample_policy, soft_topk_draws, soft_topk_probs
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


def rollout_values(
    steps: list[list[Transition]],
    bootstrap: list[tuple[Episode, list[int]]],
    target_values: Callable[[list[tuple[Episode, list[int]]]], torch.Tensor],
    dev: torch.device,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rewards, dones, V(s_{t+1}), V(s_L)) of a rollout ``steps`` [L][E]: [L, E], [L, E], [L, E], [E],
    the values from ``target_values`` of (episode, chunks held), ``bootstrap`` the states s_L.

    Only V(s_{t+1}) after a non-final step enters a return; V(s_0) and values after a done are
    multiplied by zero, so they are not computed at all (left 0: exactly the same targets)."""
    L, E = len(steps), len(steps[0])
    flat = [tr for step in steps for tr in step]
    items = [(tr.ep, tr.selected) for tr in flat] + bootstrap
    needed = [i for i in range(E, len(items)) if not flat[i - E].done]
    values = torch.zeros(len(items), device=dev)
    if needed:  # host-built tensors go over without waiting for the GPU (rl/model/fast/staging.py)
        values[to_device(np.asarray(needed, dtype=np.int64), dev)] = target_values([items[i] for i in needed])
    v = values[: L * E].view(L, E)
    boot = values[L * E :]
    return *rewards_and_dones(steps, dev), v, boot


def rewards_and_dones(steps: list[list[Transition]], dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(rewards, dones) [L, E] float of a rollout ``steps`` [L][E] on ``dev``, built on the host and
    copied without waiting for the GPU (one copy, rl/model/fast/staging.py)."""
    host = np.array([[[tr.reward for tr in s] for s in steps], [[float(tr.done) for tr in s] for s in steps]])
    rewards, dones = to_device(host.astype(np.float32), dev)
    return rewards, dones
