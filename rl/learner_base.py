"""What every learner (Q-RAG's PQN, the SFT baseline) shares: AdamW and the LR schedule over the
agent's trainable encoders, counters, the policy generator, the gradient step (SPEC §5.5 steps 1-4)
and the checkpoint state. Subclasses add their objective (``micro_step``) and post-step updates."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from envs.env import VecRetrievalEnv
from envs.seeding import derive_seed
from rl import distributed as dist
from rl.agent import QRAGAgent
from rl.schedules import build_scheduler


@dataclass
class Counters:
    micro_steps: int = 0
    optimizer_steps: int = 0
    env_steps: int = 0
    episodes: int = 0


@dataclass
class RolloutStats:
    finished_returns: list[float] = field(default_factory=list)


class LearnerBase:
    def __init__(self, agent: QRAGAgent, env: VecRetrievalEnv, algo_cfg: Any, cfg: Any):
        self.agent, self.env = agent, env
        hp = algo_cfg.pqn.hyperparams
        self.max_grad_norm = float(hp.get("max_grad_norm", 2.0))
        self.k_accum = int(cfg.accumulate_grads)
        self.batch_size = int(cfg.batch_size)
        self.rollout_len = math.ceil(self.batch_size / env.n_envs)  # L = ceil(B / E)
        opt = algo_cfg.pqn.optimizer
        self.optimizer = torch.optim.AdamW(
            agent.trainable_parameters(), lr=float(opt.lr), betas=tuple(opt.get("betas", (0.9, 0.98))),
            eps=float(opt.get("eps", 1e-6)), weight_decay=float(opt.get("weight_decay", 0.01)))
        self.base_lr = float(opt.lr)
        self.scheduler = build_scheduler(self.optimizer, algo_cfg.pqn.scheduler)
        self.alpha = float(hp.get("alpha", 0.01))  # α = α₀ until the first optimiser step
        self.counters = Counters()
        self.stats = RolloutStats()
        # each data-parallel rank samples its own actions (rank 0 = the 1-process seed)
        self.policy_gen = torch.Generator().manual_seed(derive_seed(dist.rank_seed(int(cfg.seed)), "policy") % 2**63)

    def gradient_step(self) -> dict[str, float]:
        """Average gradients across ranks, clip, AdamW, scheduler, zero (SPEC §5.5 steps 1-4)."""
        params = self.agent.trainable_parameters()
        if dist.enabled():  # data parallel: same mean gradient on every rank -> same weights
            dist.average_gradients(params)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"grad_norm": float(grad_norm), "lr": self.optimizer.param_groups[0]["lr"]}

    def finish_step(self) -> None:
        """Cached chunk embeddings are stale once the weights changed (SPEC §5.5 step 8)."""
        self.agent.weights_version += 1
        self.counters.optimizer_steps += 1

    def state_dict(self) -> dict[str, Any]:
        return {
            "agent": self.agent.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "alpha": self.alpha,
            "counters": vars(self.counters).copy(),
            "policy_gen": self.policy_gen.get_state(),
            "env": self.env.state_dict(),
            "weights_version": self.agent.weights_version,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.agent.load_state_dict(state["agent"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.alpha = float(state["alpha"])
        self.counters = Counters(**state["counters"])
        if "policy_gen" in state:
            self.policy_gen.set_state(state["policy_gen"])
        self.env.load_state_dict(state["env"])
        self.agent.weights_version = int(state["weights_version"]) + 1  # recompute every cache
