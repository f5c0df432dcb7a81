"""Acting shared by the on-policy learners (PQN, SARSA, SAC-D): the soft top-k behaviour policy
and one vectorised environment step.

Policy (DESIGN §4.2): while warming up (fewer than 2·learning_start environment steps) a chunk
drawn uniformly among the available ones; afterwards a ∼ softmax((Q(s, a) − max Q)/α) over the
top-min(k, |A|) available chunks, Q from the online encoders with dropout as configured.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from envs.env import Episode
from rl.model.qfunc import masked_topk, sample_policy
from rl.model.qnetwork import QNetwork


@dataclass
class Transition:
    ep: Episode
    selected: list[int]  # chunks held before acting (selection order)
    state: list[int]  # state token ids
    action: int
    code: int  # p̂_t(a_t), or -1 for no positions
    reward: float = 0.0
    done: bool = False


@dataclass(frozen=True)
class SoftPolicy:
    """The behaviour policy's settings at one acting step."""

    warming_up: bool
    alpha: float
    top_k: int | None
    dropout: bool  # online encoders in train mode while acting


def soft_topk_actions(
    qnet: QNetwork,
    episodes: Sequence[Episode],
    states: list[list[int]],
    codes: Sequence[Any],
    policy: SoftPolicy,
    generator: torch.Generator,
) -> list[int]:
    """One action per episode from :class:`SoftPolicy` (uniform while warming up)."""
    if policy.warming_up:
        actions = []
        for ep in episodes:
            avail = torch.nonzero(ep.available).flatten()
            pick = torch.randint(len(avail), (1,), generator=generator).item()
            actions.append(int(avail[pick]))
        return actions
    q = qnet.q_values(episodes, states, codes, train=policy.dropout)
    return [sample_policy(q[i], ep.available, policy.top_k, policy.alpha, generator) for i, ep in enumerate(episodes)]


def policy_probs(q: torch.Tensor, available: torch.Tensor, k: int | None, alpha: float) -> torch.Tensor:
    """[N] float64 probabilities of the soft top-k policy (rl.model.qfunc.sample_policy samples from
    exactly this distribution); 0 outside the top-min(k, |A|) available chunks."""
    vals, idx = masked_topk(q, available, k)
    probs = torch.zeros(q.shape[0], dtype=torch.float64, device=q.device)
    probs[idx] = torch.softmax(((vals - vals.max()) / alpha).double(), 0)
    return probs


def lr_tied_alpha(hp: Any, lr: float, base_lr: float) -> float:
    """The policy's temperature after an optimiser step at learning rate ``lr`` (PQN, SARSA):
    α = max(α₀ · lr / lr₀, α_min), α₀ = ``hp.alpha``, lr₀ the configured learning rate."""
    return max(hp.alpha * lr / base_lr, hp.alpha_min)


def warming_up(learner: Any) -> bool:
    """Uniform acting for the first 2·learning_start environment steps."""
    return learner.counters.env_steps < 2 * learner.learning_start


def soft_act(learner: Any) -> list[Transition]:
    """One step of every env of an on-policy learner (``hp.top_k_actions``, ``hp.acting_dropout``,
    its current ``alpha``) with the soft top-k policy."""
    hp = learner.hp
    policy = SoftPolicy(warming_up(learner), learner.alpha, hp.top_k_actions, hp.acting_dropout)
    return env_step(
        learner, lambda episodes, st, c: soft_topk_actions(learner.qnet, episodes, st, c, policy, learner.policy_gen)
    )


def env_step(
    learner: Any, choose: Callable[[list[Episode], list[list[int]], list[Any]], list[int]]
) -> list[Transition]:
    """Every training slot of ``learner.env`` takes one step with the actions ``choose(episodes,
    state token ids, position codes)``; finished episodes are counted and their slots reset."""
    env, qnet = learner.env, learner.qnet
    slots = list(range(env.n_envs))
    episodes = [env.episodes[s] for s in slots]
    states = [qnet.state_ids(ep, env.sort_by_index) for ep in episodes]
    codes = [ep.codes(env.pos) for ep in episodes]
    actions = choose(episodes, states, codes)
    trans = [
        Transition(ep, list(ep.selected), st, a, -1 if c is None else int(c[a]))
        for ep, st, a, c in zip(episodes, states, actions, codes)
    ]
    rewards, dones, _ = env.step(slots, actions)
    learner.counters.env_steps += len(slots)
    for slot, tr, r, d in zip(slots, trans, rewards, dones):
        tr.reward, tr.done = r, d
        if d:
            learner._finished_returns.append(tr.ep.ret)
            learner.counters.episodes += 1
            env.reset_random(slot)
    return trans


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
    if needed:
        values[torch.tensor(needed, device=dev)] = target_values([items[i] for i in needed])
    v = values[: L * E].view(L, E)
    boot = values[L * E :]
    rewards = torch.tensor([[tr.reward for tr in s] for s in steps], device=dev)
    dones = torch.tensor([[float(tr.done) for tr in s] for s in steps], device=dev)
    return rewards, dones, v, boot
