"""The learner contract and what every learner shares.

:class:`Learner` is everything the trainer (rl/run/train.py) and the tools (scripts/bench.py) use of a
learner; nothing else is read by name. :class:`LearnerBase` holds what the learners share: AdamW and
the LR schedule over the Q-network's trainable encoders (``algo.optimizer``, ``algo.scheduler``),
gradient clipping (``algo.max_grad_norm``), counters, acting (the one environment step, with the
behaviour policies of rl/learners/acting.py), the optimiser step (DESIGN §5.5) and the checkpoint
state. A learner adds its objective (``micro_step``), which takes the optimiser step every K-th
micro-step and then makes its own updates (temperature, target encoders) itself. It is built from
typed settings (:class:`RunSettings`, and its ``HYPER`` dataclass read from
``algo.<objective>.hyperparams``, rl/schema.py), never from the config node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import torch
from omegaconf import DictConfig

from envs.env import Episode, VecRetrievalEnv
from envs.seeding import derive_seed
from rl import distributed as dist
from rl.learners.acting import Observation, SoftHyper, SoftPolicy, Transition, soft_topk_actions
from rl.learners.schedules import Scheduler, build_scheduler
from rl.model.model_keys import ModelKeys
from rl.model.qnetwork import QNetwork
from rl.schema import Schema, param


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


def _weight_decay_ok(checker: Any, key: str, prefix: str) -> None:
    # AdamW multiplies the weights by 1 - lr·weight_decay each step: above 1 they flip sign
    _, lr = checker.value(f"{prefix}.lr")
    in_range = isinstance(lr, (int, float)) and not isinstance(lr, bool) and 0 < lr <= 1
    checker.number(key, 0.0, 1.0 / lr if in_range else None)


@dataclass
class Optimizer(Schema):
    """``algo.optimizer``: AdamW over the trainable encoders, shared by every learner."""

    # Adam moves every weight by about lr per step: above 1 the run diverges at once
    lr: float = param(5e-5, "lr₀, the learning rate the schedule scales", low=0.0, high=1.0, low_open=True)
    weight_decay: float = param(0.01, "AdamW's decoupled weight decay (<= 1/lr)", check=_weight_decay_ok)
    betas: tuple[float, float] = param(
        (0.9, 0.98),
        "Adam's moment decay rates (β₁, β₂)",
        ok=(lambda v: len(v) == 2 and all(_is_number(b) and 0 <= b < 1 for b in v), "two numbers in [0, 1)"),
    )
    eps: float = param(1e-6, "Adam's ε", low=0.0, low_open=True)


@dataclass
class Shared(Schema):
    """The ``algo`` keys every learner shares (a learner's own: ``algo.<NAME>.hyperparams``)."""

    model: ModelKeys = param(ModelKeys, "the pretrained encoder (rl/model/model_keys.py)")
    optimizer: Optimizer = param(Optimizer, "AdamW over the trainable encoders")
    scheduler: Scheduler = param(Scheduler, "the learning-rate schedule (DESIGN §5.7)")
    max_grad_norm: float = param(
        2.0, "gradient clipping (global L2 norm) before every AdamW step", low=0.0, low_open=True
    )


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass(frozen=True)
class RunSettings:
    """The run's keys every learner reads, typed: the shared ``algo`` keys and four top-level ones
    (each stated once, with its default and check, in rl/run/keys.py). A learner's own keys are its
    ``HYPER`` dataclass; :func:`rl.learners.build_learner` reads both from the config, once."""

    algo: Shared
    batch_size: int  # B: minimum transitions per micro-step
    accumulate_grads: int  # K: micro-steps per optimiser step
    learning_start: int  # the soft top-k learners' warm-up (DQN has its own)
    seed: int

    @classmethod
    def from_cfg(cls, cfg: DictConfig) -> RunSettings:
        return cls(
            Shared.from_cfg(cfg.algo),
            int(cfg.batch_size),
            int(cfg.accumulate_grads),
            int(cfg.learning_start),
            int(cfg.seed),
        )


class Learner(Protocol):
    """What the trainer may use of a learner (``algo.objective`` picks one, rl/learners/__init__.py)."""

    LOSS: ClassVar[str]  # the main loss among micro_step()'s scalars (log line, progress bar)
    qnet: QNetwork
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

    NAME: ClassVar[str]  # algo.objective, learner=<NAME>, algo.<NAME>.hyperparams
    HYPER: ClassVar[type[Schema]]  # the dataclass of algo.<NAME>.hyperparams (every key's default and check)
    LOSS: ClassVar[str] = "loss"
    LEGACY: ClassVar[tuple[str, ...]] = ()  # the legacy switches (envs/legacy.py) it takes as keywords
    # attributes (floats) a learner schedules itself, e.g. its temperature α: in every metrics row
    # (eval_row) and in its checkpoints (extra_state)
    SCHEDULED: ClassVar[tuple[str, ...]] = ()

    def __init__(self, qnet: QNetwork, env: VecRetrievalEnv, run: RunSettings):
        self.qnet, self.env = qnet, env
        shared = run.algo
        self.max_grad_norm = shared.max_grad_norm
        self.k_accum = run.accumulate_grads
        self.batch_size = run.batch_size
        self.rollout_len = math.ceil(self.batch_size / env.n_envs)  # L = ceil(B / E)
        opt = shared.optimizer
        self.optimizer = torch.optim.AdamW(
            qnet.trainable_parameters(),
            lr=opt.lr,
            betas=opt.betas,
            eps=opt.eps,
            weight_decay=opt.weight_decay,
            # one kernel instead of the foreach loop's dozens (CUDA only; other rounding: a switch)
            fused=qnet.speed.fused_adamw and qnet.device.type == "cuda",
        )
        qnet.watch(self.optimizer)  # each optimiser step makes the Q-network's cached embeddings stale
        self.base_lr = opt.lr
        self.scheduler = build_scheduler(self.optimizer, shared.scheduler)
        self.counters = Counters()
        self.learning_start = run.learning_start  # the soft top-k learners' warm-up (DQN has its own)
        self._finished_returns: list[float] = []  # written by env_step only
        # each data-parallel rank samples its own actions (rank 0 = the 1-process seed)
        self.policy_gen = torch.Generator().manual_seed(derive_seed(dist.rank_seed(run.seed), "policy") % 2**63)

    # -- acting ----------------------------------------------------------------------------
    def start_slots(self, env_state: dict[str, Any] | None = None) -> None:
        """The training slots start (a new run) or resume (``env_state``: a checkpoint's
        ``env.state_dict()``); slots still empty get fresh episodes, and every slot's sample enters
        the Q-network (``QNetwork.prepare``). The one way slots are filled outside :meth:`env_step`
        (which prepares each slot it resets): an episode that never entered is refused by the
        network at its first state."""
        env = self.env
        if env_state is not None:
            env.load_state_dict(env_state)
        if any(ep is None for ep in env.episodes):
            env.reset_all()
        self.qnet.prepare(env.episodes)

    def observe(self, dropout: bool, keep_states: bool = True) -> Observation:
        """The training slots before a step, for a policy to choose on (online Q in the ``dropout``
        mode). ``keep_states``: every slot's state token ids are built now and every transition of
        :meth:`env_step` carries them (the on-policy loss reuses them); off, only those a policy
        builds."""
        obs = Observation(self.qnet, self.env, dropout)
        if keep_states:
            for slot in range(len(obs.episodes)):
                obs.state(slot)
        return obs

    def env_step(self, obs: Observation, actions: list[int]) -> list[Transition]:
        """Every training slot takes one step with the ``actions`` a policy chose on ``obs`` (from
        :meth:`observe`); finished episodes are counted, their returns kept for
        :meth:`drain_returns` and their slots reset."""
        env = self.env
        pos = self.qnet.positions  # each action's code from the host (no read-back per slot)
        trans = [
            Transition(ep, list(ep.selected), st, a, ep.code_of(pos, a))
            for ep, st, a in zip(obs.episodes, obs.states, actions)
        ]
        slots = list(range(len(trans)))
        rewards, dones, _ = env.step(slots, actions)
        self.counters.env_steps += len(slots)
        fresh = []
        for slot, tr, r, d in zip(slots, trans, rewards, dones):
            tr.reward, tr.done = r, d
            if d:
                self._finished_returns.append(tr.ep.ret)
                self.counters.episodes += 1
                fresh.append(env.reset_random(slot))
        self.qnet.prepare(fresh)  # a reset slot's sample enters the network (a bootstrap may read it)
        return trans

    @property
    def warming_up(self) -> bool:
        """Uniform acting for the first 2·learning_start environment steps (soft top-k learners)."""
        return self.counters.env_steps < 2 * self.learning_start

    def soft_step(self, hp: SoftHyper, alpha: float) -> list[Transition]:
        """One step of every env with the soft top-k policy at temperature ``alpha`` (PQN, SARSA, SAC-D)."""
        policy = SoftPolicy(self.warming_up, alpha, hp.top_k_actions, hp.acting_dropout)
        obs = self.observe(hp.acting_dropout)
        return self.env_step(obs, soft_topk_actions(obs.q_values, obs.available, policy, self.policy_gen))

    def end_micro_step(self) -> bool:
        """Count a micro-step whose gradients are accumulated; True on every K-th one, which takes
        the optimiser step (the learner calls :meth:`optimizer_step`, then makes its own updates)."""
        self.counters.micro_steps += 1
        return self.counters.micro_steps % self.k_accum == 0

    def optimizer_step(self) -> dict[str, float]:
        """DESIGN §5.5 steps 1-4 in order: average the gradients across ranks, clip, AdamW,
        scheduler, zero; then the count. The learner's own updates (α, the target encoders) follow
        in its ``micro_step``. The Q-network drops its stale caches itself (it watches the
        optimiser). Returns grad_norm and lr (the next step's rate)."""
        params = self.qnet.trainable_parameters()
        if dist.enabled():  # data parallel: same mean gradient on every rank -> same weights
            dist.average_gradients(params)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.counters.optimizer_steps += 1
        return {"grad_norm": float(grad_norm), "lr": self.optimizer.param_groups[0]["lr"]}

    def drain_returns(self) -> list[float]:
        out, self._finished_returns = self._finished_returns, []
        return out

    def eval_row(self) -> dict[str, float]:
        return {"lr": self.optimizer.param_groups[0]["lr"], **{k: getattr(self, k) for k in self.SCHEDULED}}

    def batch_shape(self) -> BatchShape:
        return BatchShape(self.rollout_len, self.env.n_envs, self.k_accum, self.batch_size)

    @classmethod
    def hyperparams(cls, cfg: DictConfig) -> Schema:
        """``algo.<NAME>.hyperparams`` read into :attr:`HYPER`, with a clear error when the
        learner's node is missing (``algo.objective`` set without its ``learner=`` choice)."""
        name = cls.NAME
        node = (cfg.algo.get(name) or {}).get("hyperparams")
        if node is None:
            raise ValueError(
                f"algo.{name}.hyperparams is missing: choose the learner with learner={name}, not algo.objective alone"
            )
        return cls.HYPER.from_cfg(node)

    def state_dict(self) -> dict[str, Any]:
        return {
            "agent": self.qnet.state_dict(),  # the key of the first release's files, which still load
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "counters": vars(self.counters).copy(),
            "policy_gen": self.policy_gen.get_state(),
            "env": self.env.state_dict(),
            "weights_version": self.qnet.weights_version,
            **self.extra_state(),
        }

    def extra_state(self) -> dict[str, Any]:
        """A subclass's own checkpoint entries (merged into :meth:`state_dict`): the SCHEDULED values."""
        return {k: getattr(self, k) for k in self.SCHEDULED}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`extra_state` saved."""
        for k in self.SCHEDULED:
            setattr(self, k, float(state[k]))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.qnet.load_state_dict(state["agent"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.counters = Counters(**state["counters"])
        if "policy_gen" in state:
            self.policy_gen.set_state(state["policy_gen"])
        self.start_slots(state["env"])
        self.load_extra_state(state)


class TwinHeadLearner(LearnerBase):
    """A learner whose loss regresses Q(s, a) = q1 + q2 of chosen chunks towards targets (PQN,
    SARSA, SAC-D, DQN); each computes its targets its own way and hands them to :meth:`regress`."""

    def regress(
        self,
        episodes: list[Episode],
        states: list[list[int]],
        actions: list[int],
        codes: list[int],
        g: torch.Tensor,
    ) -> dict[str, float]:
        """One backward pass of the twin-head loss (DESIGN §5.4)
        [0.5·mean((2q1 − g)²) + 0.5·mean((2q2 − g)²)] / K, (q1, q2) the online heads of the chosen
        chunks ``actions`` of the ``episodes`` in the states ``states`` (token ids, from
        QNetwork.inputs.state_ids; ``codes``: each chunk's position code p̂(a), -1 for none). Returns
        the loss's scalars; the learner counts the micro-step and takes the optimiser step."""
        q1, q2 = self.qnet.online_heads(episodes, states, actions, codes)
        loss = (0.5 * ((2 * q1 - g) ** 2).mean() + 0.5 * ((2 * q2 - g) ** 2).mean()) / self.k_accum
        loss.backward()
        with torch.no_grad():
            q = (q1 + q2).detach()
            # one read-back for the four scalars (each float() would wait for the GPU)
            stats = torch.stack([loss.detach(), q.mean(), (q - g).abs().mean(), g.mean()]).tolist()
            scalars = {
                "qf_loss": stats[0] * self.k_accum,
                "q_mean": stats[1],
                "td_abs": stats[2],
                "target_mean": stats[3],
            }
        return scalars

    def regress_on(self, transitions: list[Any], g: torch.Tensor) -> dict[str, float]:
        """:meth:`regress` on rollout transitions (rl.learners.acting.Transition) towards ``g``."""
        return self.regress(
            [tr.ep for tr in transitions],
            [tr.state for tr in transitions],
            [tr.action for tr in transitions],
            [tr.code for tr in transitions],
            g,
        )


def ema_weight(hp: Any) -> float:
    """τ of the target encoders' EMA θ′ ← τ·θ + (1 − τ)·θ′: ``hp.tau``, or 1 (E′ ≡ E, "w/o Target")
    with ``hp.use_target_networks`` off."""
    return hp.tau if hp.use_target_networks else 1.0
