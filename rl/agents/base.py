"""The learner contract and what every learner shares.

:class:`Learner` is everything the trainer (rl/trainer.py) and the tools (scripts/bench.py) use of a
learner; nothing else is read by name. :class:`LearnerBase` holds what the learners share: AdamW and
the LR schedule over the agent's trainable encoders (``algo.optimizer``, ``algo.scheduler``),
gradient clipping (``algo.max_grad_norm``), counters, the acting generator, the gradient step (DESIGN
§5.5 steps 1-4) and the checkpoint state. A learner adds its objective (``micro_step``) and its
post-step updates; its own hyperparameters live in ``algo.<objective>.hyperparams``
(configs/learner/<objective>.yaml).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

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


@dataclass(frozen=True)
class BatchShape:
    """Transitions per optimiser step = rollout_len × n_envs (≥ batch_size) × k_accum."""

    rollout_len: int
    n_envs: int
    k_accum: int
    batch_size: int


class Learner(Protocol):
    """What the trainer may use of a learner (``algo.objective`` picks one, rl/agents/__init__.py)."""

    LOSS: ClassVar[str]  # the main loss among micro_step()'s scalars (log line, progress bar)
    agent: QRAGAgent
    env: VecRetrievalEnv  # the training environments (persistent slots)
    counters: Counters
    policy_gen: torch.Generator  # acting randomness, one stream per data-parallel rank

    def micro_step(self) -> dict[str, float]:
        """One micro-step; the scalars to log. The micro-step that took an optimiser step also
        returns that step's scalars (``lr``, ``grad_norm``, and e.g. ``alpha``)."""
        ...

    def drain_returns(self) -> list[float]:
        """Returns of the training episodes finished since the last call."""
        ...

    def eval_row(self) -> dict[str, float]:
        """Extra columns of a metrics.jsonl row (the schedule's current values)."""
        ...

    def batch_shape(self) -> BatchShape: ...

    def state_dict(self) -> dict[str, Any]:
        """Everything a resume needs (on CPU the resumed run equals an uninterrupted one)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class LearnerBase:
    """Shared plumbing; subclasses set ``LOSS`` and implement ``micro_step``."""

    NAME: ClassVar[str]  # algo.objective, configs/learner/<NAME>.yaml, algo.<NAME>.hyperparams
    LOSS: ClassVar[str] = "loss"

    @classmethod
    def check_config(cls, checker: Any, hp: str) -> None:
        """Add this learner's value checks of ``hp`` (= algo.<NAME>.hyperparams) to an
        rl.validate.Checker; run before anything is written."""

    def __init__(self, agent: QRAGAgent, env: VecRetrievalEnv, cfg: Any, legacy: Any = None):
        self.agent, self.env = agent, env
        algo = cfg.algo
        self.max_grad_norm = float(algo.max_grad_norm)
        self.k_accum = int(cfg.accumulate_grads)
        self.batch_size = int(cfg.batch_size)
        self.rollout_len = math.ceil(self.batch_size / env.n_envs)  # L = ceil(B / E)
        opt = algo.optimizer
        self.optimizer = torch.optim.AdamW(
            agent.trainable_parameters(),
            lr=float(opt.lr),
            betas=tuple(opt.betas),
            eps=float(opt.eps),
            weight_decay=float(opt.weight_decay),
        )
        self.base_lr = float(opt.lr)
        self.scheduler = build_scheduler(self.optimizer, algo.scheduler)
        self.counters = Counters()
        self._finished_returns: list[float] = []
        # each data-parallel rank samples its own actions (rank 0 = the 1-process seed)
        self.policy_gen = torch.Generator().manual_seed(derive_seed(dist.rank_seed(int(cfg.seed)), "policy") % 2**63)

    def gradient_step(self) -> dict[str, float]:
        """Average gradients across ranks, clip, AdamW, scheduler, zero (DESIGN §5.5 steps 1-4)."""
        params = self.agent.trainable_parameters()
        if dist.enabled():  # data parallel: same mean gradient on every rank -> same weights
            dist.average_gradients(params)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"grad_norm": float(grad_norm), "lr": self.optimizer.param_groups[0]["lr"]}

    def drain_returns(self) -> list[float]:
        out, self._finished_returns = self._finished_returns, []
        return out

    def eval_row(self) -> dict[str, float]:
        return {"lr": self.optimizer.param_groups[0]["lr"]}

    def batch_shape(self) -> BatchShape:
        return BatchShape(self.rollout_len, self.env.n_envs, self.k_accum, self.batch_size)

    def hyperparams(self, cfg: Any) -> Any:
        """``algo.<NAME>.hyperparams`` (configs/learner/<NAME>.yaml), with a clear error when the
        learner's node is missing (``algo.objective`` set without its ``learner=`` group)."""
        name = self.NAME
        node = (cfg.algo.get(name) or {}).get("hyperparams")
        if node is None:
            raise ValueError(
                f"algo.{name}.hyperparams is missing: choose the learner with learner={name} "
                f"(configs/learner/{name}.yaml), not algo.objective alone"
            )
        return node

    def finish_step(self) -> None:
        """Cached chunk embeddings are stale once the weights changed (DESIGN §5.5 step 8)."""
        self.agent.weights_version += 1
        self.counters.optimizer_steps += 1

    def state_dict(self) -> dict[str, Any]:
        return {
            "agent": self.agent.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "counters": vars(self.counters).copy(),
            "policy_gen": self.policy_gen.get_state(),
            "env": self.env.state_dict(),
            "weights_version": self.agent.weights_version,
            **self.extra_state(),
        }

    def extra_state(self) -> dict[str, Any]:
        """A subclass's own checkpoint entries (merged into :meth:`state_dict`)."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`extra_state` saved."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.agent.load_state_dict(state["agent"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.counters = Counters(**state["counters"])
        if "policy_gen" in state:
            self.policy_gen.set_state(state["policy_gen"])
        self.env.load_state_dict(state["env"])
        self.agent.weights_version = int(state["weights_version"]) + 1  # recompute every cache
        self.load_extra_state(state)
