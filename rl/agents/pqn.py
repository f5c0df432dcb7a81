"""PQN-style learner (DESIGN §4.2, §4.4, §5): on-policy rollouts from persistent environments,
soft λ-returns, twin-head regression, AdamW with an LR-tied temperature and EMA targets.

Target values V(s_t) are computed for the whole rollout in one batched pass after it ends.
This equals computing them at acting time (DESIGN §5.2): target encoders and α only change at
optimiser steps, never inside a rollout, and run deterministically in eval mode by default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from envs.env import Episode, VecRetrievalEnv
from envs.legacy import flag
from rl.agent import QRAGAgent
from rl.agents.base import Hyperparams, TwinHeadLearner
from rl.qfunc import q_all, sample_policy, soft_values
from rl.returns import lambda_returns


@dataclass
class Hyper(Hyperparams):
    """``algo.pqn.hyperparams`` (configs/learner/pqn.yaml holds every default)."""

    gamma: float = 0.99
    alpha: float = 0.01
    lam: float = field(default=0.65, metadata={"key": "Lambda"})
    tau: float = 0.1
    top_k_actions: int | None = 5
    alpha_min: float = 1e-6
    soft_target: bool = True
    use_target_networks: bool = True
    acting_dropout: bool = True


@dataclass
class Transition:
    ep: Episode
    selected: list[int]  # chunks held before acting (selection order)
    state: list[int]  # state token ids
    action: int
    code: int  # p̂_t(a_t), or -1 for no positions
    reward: float = 0.0
    done: bool = False


class PQNLearner(TwinHeadLearner):
    NAME = "pqn"
    LOSS = "qf_loss"
    HYPER: type[Hyperparams] = Hyper  # the dataclass of algo.<NAME>.hyperparams
    # legacy.* switches that reproduce defects of the reference's PQN; PQN's variants (SARSA,
    # SAC-D) share its acting and loss but not those defects
    LEGACY_SWITCHES = True

    @classmethod
    def check_config(cls, checker: Any, hp: str) -> None:
        for k in ("gamma", "Lambda", "tau"):
            checker.number(f"{hp}.{k}", 0.0, 1.0)
        checker.number(f"{hp}.alpha", 0.0)
        checker.number(f"{hp}.alpha_min", 0.0)
        checker.integer(f"{hp}.top_k_actions", 1, nullable=True)
        for k in ("soft_target", "use_target_networks", "acting_dropout"):
            checker.boolean(f"{hp}.{k}")

    def __init__(self, agent: QRAGAgent, env: VecRetrievalEnv, cfg: Any, legacy: Any = None):
        super().__init__(agent, env, cfg, legacy)
        self.hp = self.HYPER.from_cfg(self.hyperparams(cfg))
        self.alpha = self.hp.alpha  # α = α₀ until the first optimiser step
        self.learning_start = int(cfg.learning_start)
        self.sort_by_index = env.sort_by_index
        legacy = legacy if self.LEGACY_SWITCHES else None
        self.legacy_off_by_one = flag(legacy, "lambda_return_off_by_one")
        self.legacy_drop_last = flag(legacy, "drop_last_transition")
        self.legacy_topk = flag(legacy, "target_topk_before_mask")
        self.target_train_mode = flag(legacy, "dropout_in_targets")

    # -- acting ---------------------------------------------------------------------------
    @property
    def warming_up(self) -> bool:
        return self.counters.env_steps < 2 * self.learning_start

    def _act(self) -> list[Transition]:
        """One vectorised step: choose an action in every slot, step, reset finished slots."""
        env, agent = self.env, self.agent
        slots = list(range(env.n_envs))
        eps = [env.episodes[s] for s in slots]
        states = [agent.state_ids(ep, self.sort_by_index) for ep in eps]
        codes = [ep.codes(env.pos) for ep in eps]
        actions: list[int] = []
        if self.warming_up:  # uniform over available chunks (DESIGN §4.2)
            for ep in eps:
                avail = torch.nonzero(ep.available).flatten()
                pick = torch.randint(len(avail), (1,), generator=self.policy_gen).item()
                actions.append(int(avail[pick]))
        else:
            train = self.hp.acting_dropout
            s_emb = agent.embed(agent.state_enc, states, train=train)
            agent.ensure_chunk_embeddings(eps, "online", train)
            for i, ep in enumerate(eps):
                u = agent.chunk_embeddings(ep, "online", train)
                q = q_all(s_emb[i], agent.rotate(u, codes[i]))
                actions.append(sample_policy(q, ep.available, self.hp.top_k_actions, self.alpha, self.policy_gen))
        trans = [
            Transition(ep, list(ep.selected), st, a, -1 if c is None else int(c[a]))
            for ep, st, a, c in zip(eps, states, actions, codes)
        ]
        rewards, dones, _ = env.step(slots, actions)
        self.counters.env_steps += len(slots)
        for slot, tr, r, d in zip(slots, trans, rewards, dones):
            tr.reward, tr.done = r, d
            if d:
                self._finished_returns.append(tr.ep.ret)
                self.counters.episodes += 1
                env.reset_random(slot)
        return trans

    # -- targets --------------------------------------------------------------------------
    @torch.no_grad()
    def _target_values(self, items: list[tuple[Episode, list[int]]]) -> torch.Tensor:
        """V(s) for (episode, selected-chunks) pairs, batched over all states (DESIGN §4.4)."""
        agent = self.agent
        states = [agent.state_ids(ep, self.sort_by_index, selected=sel) for ep, sel in items]
        s_emb = agent.embed(agent.target_state, states, train=self.target_train_mode)
        out = torch.zeros(len(items), device=agent.device)
        groups: dict[int, list[int]] = {}
        for i, (ep, _) in enumerate(items):
            groups.setdefault(id(ep), []).append(i)
        agent.ensure_chunk_embeddings([ep for ep, _ in items], "target", self.target_train_mode)
        for idx in groups.values():
            ep = items[idx[0]][0]
            u_t = agent.chunk_embeddings(ep, "target", self.target_train_mode)
            # availability of every state of this sample built on the host, one copy
            avail_np = np.ones((len(idx), ep.n_chunks), dtype=bool)
            for row, i in enumerate(idx):
                avail_np[row, items[i][1]] = False
            avail = torch.from_numpy(avail_np).to(agent.device, non_blocking=True)
            codes = ep.codes(self.env.pos, avail)  # [S, N], one batched computation
            rotated = agent.rotate(u_t.expand(len(idx), -1, -1), codes)
            v = soft_values(
                s_emb[idx],
                rotated,
                avail,
                self.hp.top_k_actions,
                self.alpha,
                soft=self.hp.soft_target,
                legacy_topk_before_mask=self.legacy_topk,
            )
            out[torch.tensor(idx, device=agent.device)] = v
        return out

    # -- one micro-step -------------------------------------------------------------------
    def micro_step(self) -> dict[str, float]:
        """Roll out L steps in every env, compute λ-returns and accumulate one backward pass;
        every K micro-steps take an optimiser step. Returns this micro-step's scalars."""
        agent, L, E = self.agent, self.rollout_len, self.env.n_envs
        agent.tick += 1  # speed.chunk_cache=false: chunks are embedded again at every rollout start
        steps = [self._act() for _ in range(L)]  # [L][E]
        bootstrap_items = [(ep, list(ep.selected)) for ep in self.env.episodes]
        if self.legacy_drop_last:
            self._act()  # the reference's (L+1)-th step: advances the envs, never trained
        flat = [tr for step in steps for tr in step]
        # Only V(s_{t+1}) after a non-final step enters the λ-return; V(s_0) and values after a
        # done are multiplied by zero, so they are not computed at all (exactly the same targets).
        items = [(tr.ep, tr.selected) for tr in flat] + bootstrap_items
        needed = [i for i in range(E, len(items)) if not flat[i - E].done]
        values = torch.zeros(len(items), device=agent.device)
        if needed:
            values[torch.tensor(needed, device=agent.device)] = self._target_values([items[i] for i in needed])
        v = values[: L * E].view(L, E)
        boot = values[L * E :]
        rewards = torch.tensor([[tr.reward for tr in s] for s in steps], device=agent.device)
        dones = torch.tensor([[float(tr.done) for tr in s] for s in steps], device=agent.device)
        returns = lambda_returns(rewards, dones, v, boot, self.hp.gamma, self.hp.lam, self.legacy_off_by_one)

        # loss: re-encode states and chosen chunks with gradient, train mode (DESIGN §5.4)
        return self.regress(
            [tr.state for tr in flat],
            [agent.action_ids(tr.ep, tr.action) for tr in flat],
            [tr.code for tr in flat],
            returns.flatten(),
        )

    def optimizer_step(self) -> dict[str, float]:
        """DESIGN §5.5, in order: clip, AdamW, scheduler, zero, α, EMA, (acting alias), stale caches."""
        scalars = self.gradient_step()
        self.alpha = max(self.hp.alpha * scalars["lr"] / self.base_lr, self.hp.alpha_min)
        tau = self.hp.tau if self.hp.use_target_networks else 1.0  # "w/o Target": E′ ≡ E
        self.agent.update_targets(tau)
        self.finish_step()
        return {**scalars, "alpha": self.alpha}

    def eval_row(self) -> dict[str, float]:
        return {**super().eval_row(), "alpha": self.alpha}

    def extra_state(self) -> dict[str, Any]:
        return {"alpha": self.alpha}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.alpha = float(state["alpha"])
