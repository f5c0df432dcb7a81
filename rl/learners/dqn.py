"""DQN on Q-RAG's Q-network (docs/DQN.md): the same Q-network (state/action encoders, positions,
EMA target encoders), environments and evaluation as PQN; only the learning rule differs.

Each micro-step steps every environment ``env_steps_per_update`` times with an ε-greedy or
softmax behaviour policy, stores the n-step transitions in a replay buffer (rl/learners/replay.py: sample
references and selections, rebuilt into token ids at every use because the encoders change), and
regresses Q(s_t, a_t) = q1 + q2 on a uniformly drawn batch towards

    y = R + γ^k (1 − done) V′(s_{t+k}),   R = Σ_{i<k} γ^i r_{t+i},  k ≤ n
    V′(s) = max_{a ∈ A(s)} Q′(s, a)                       (DQN)
    V′(s) = Q′(s, argmax_{a ∈ A(s)} Q(s, a))              (Double DQN: online argmax, target value)

with Q′ from the target encoders and A(s) the chunks not yet selected. As in PQN, each twin head
regresses to half the target (loss ½·mean((2q1 − y)²) + ½·mean((2q2 − y)²)), so Q = q1 + q2 is
what greedy evaluation ranks by.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from envs.env import Episode, VecRetrievalEnv
from rl.learners.acting import epsilon_greedy_actions
from rl.learners.base import BatchShape, RunSettings, TwinHeadLearner
from rl.learners.replay import NStepAssembler, ReplayBuffer, Step, physical_memory
from rl.model.qfunc import NEG_INF
from rl.model.qnetwork import QNetwork
from rl.schema import Schema, param

EXPLORATION = ("epsilon", "softmax")
TARGET_UPDATES = ("ema", "hard")


def bootstrap_values(
    target_q: torch.Tensor, available: torch.Tensor, online_q: torch.Tensor | None = None
) -> torch.Tensor:
    """V′ for S states of one sample: target_q, online_q [S, N], available [S, N] bool -> [S].
    Without ``online_q`` the target network's max over available chunks; with it (Double DQN)
    the target network's value of the online network's best available chunk. 0 where nothing
    is available (such a state is terminal)."""
    chooser = target_q if online_q is None else online_q
    best = chooser.masked_fill(~available, NEG_INF).argmax(-1, keepdim=True)
    v = target_q.gather(-1, best).squeeze(-1)
    return torch.where(available.any(-1), v, torch.zeros_like(v))


def nstep_targets(
    ret: torch.Tensor, k: torch.Tensor, done: torch.Tensor, v_next: torch.Tensor, gamma: float
) -> torch.Tensor:
    """y = R + γ^k (1 − done) V′(s_{t+k}) for a batch of n-step transitions."""
    return ret + gamma ** k.to(ret.dtype) * (1.0 - done.to(ret.dtype)) * v_next


@dataclass
class Hyper(Schema):
    """``algo.dqn.hyperparams`` (``learner=dqn``). Optimiser, schedule and clipping are
    algo.optimizer, algo.scheduler and algo.max_grad_norm, as for every learner."""

    gamma: float = param(0.99, "discount γ", low=0.0, high=1.0)
    n_step: int = param(1, "n: rewards summed before bootstrapping (fewer at an episode end)", low=1, high=127)
    double: bool = param(True, "Double DQN: the online encoders pick argmax, the target encoders value it")
    buffer_size: int = param(100000, "transitions kept (ring buffer, 22 + 4·envs.max_steps bytes each)", low=1)
    learning_starts: int = param(
        64, "env steps of uniform acting before the first update (also fills the buffer)", low=0
    )
    env_steps_per_update: int = param(1, "vectorised env steps (× envs_parallel transitions) per micro-step", low=1)
    exploration: str = param(
        "epsilon", "epsilon (ε-greedy) | softmax (Boltzmann over Q / temperature)", choices=EXPLORATION
    )
    epsilon_start: float = param(1.0, "ε right after the warm-up", low=0.0, high=1.0)
    epsilon_end: float = param(0.05, "ε after the decay", low=0.0, high=1.0)
    epsilon_decay_steps: int = param(
        200, "env steps of linear decay from epsilon_start to epsilon_end (after the warm-up)", low=1
    )
    temperature: float = param(0.05, "softmax exploration: π(a|s) ∝ exp(Q(s,a)/temperature)", low=0.0, low_open=True)
    top_k_actions: int | None = param(None, "softmax exploration over the top-k available chunks (null = all)", low=1)
    target_update: str = param(
        "ema",
        "ema (θ′ ← τθ + (1−τ)θ′ every optimiser step) | hard (θ′ ← θ every target_update_interval steps)",
        choices=TARGET_UPDATES,
    )
    tau: float = param(0.1, "EMA rate (target_update=ema)", low=0.0, high=1.0)
    target_update_interval: int = param(100, "optimiser steps between hard copies (target_update=hard)", low=1)
    acting_dropout: bool = param(True, "act with dropout on, as PQN's rollouts (targets run in eval mode)")

    @classmethod
    def check_more(cls, checker: Any, hp: str) -> None:
        """The replay buffer against this machine's memory; the position codes it can replay."""
        _, size = checker.value(f"{hp}.buffer_size")
        _, steps = checker.value("envs.max_steps")
        if isinstance(size, int) and isinstance(steps, int) and steps > 0:
            need, have = size * ReplayBuffer.row_bytes(steps), physical_memory()
            if have and need > have:  # allocated up front: fail here, not after the run folder exists
                checker.errors.append(
                    f"{hp}.buffer_size={size}: the replay buffer needs {need / 2**30:.1f} GiB "
                    f"({ReplayBuffer.row_bytes(steps)} bytes per transition at envs.max_steps={steps}), "
                    f"more than this machine's {have / 2**30:.1f} GiB"
                )
        present, processor = checker.value("envs.positions_processor")
        if present and processor == "random":  # the same refusal as __init__, before the run folder exists
            checker.errors.append(
                "envs.positions_processor='random': learner=dqn replays transitions from sample indices and "
                "does not keep the codes random positions draw per episode; use relative, absolute or none"
            )


class DQNLearner(TwinHeadLearner):
    NAME = "dqn"
    LOSS = "qf_loss"
    SCHEDULED = ("epsilon",)
    VIEW_CACHE = 64  # replayed samples whose token ids stay cached (a sample recurs often in a small dataset)

    HYPER = Hyper

    def __init__(self, qnet: QNetwork, env: VecRetrievalEnv, run: RunSettings, hp: Hyper):
        super().__init__(qnet, env, run)
        self.hp = hp
        if qnet.positions.processor == "random":
            raise ValueError(
                "learner=dqn replays transitions from sample indices, but envs.positions_processor=random "
                "draws codes per episode that the buffer does not keep: use relative, absolute or none"
            )
        self.buffer = ReplayBuffer(self.hp.buffer_size, env.max_steps)
        self.nstep = NStepAssembler(env.n_envs, self.hp.n_step, self.hp.gamma)
        self.epsilon = self.hp.epsilon_start
        self._views: OrderedDict[int, Episode] = OrderedDict()

    # -- acting ---------------------------------------------------------------------------
    def epsilon_at(self, env_steps: int) -> float:
        """Linear decay from epsilon_start to epsilon_end over epsilon_decay_steps env steps
        counted from the end of the warm-up."""
        hp = self.hp
        frac = min(1.0, max(0, env_steps - hp.learning_starts) / max(1, hp.epsilon_decay_steps))
        return hp.epsilon_start + frac * (hp.epsilon_end - hp.epsilon_start)

    def _act(self) -> list[Step]:
        """One vectorised step (LearnerBase.observe, then env_step) with the ε-greedy or softmax
        policy (uniform during the warm-up); each transition goes through the n-step queue into the
        buffer."""
        hp = self.hp
        if self.counters.env_steps < hp.learning_starts:
            self.epsilon = 1.0  # warm-up: uniform over the available chunks
        else:
            self.epsilon = self.epsilon_at(self.counters.env_steps) if hp.exploration == "epsilon" else 0.0
        softmax = (hp.top_k_actions, hp.temperature) if hp.exploration == "softmax" else None
        obs = self.observe(hp.acting_dropout, keep_states=False)  # replay rebuilds the state ids at every use
        trans = self.env_step(
            obs, epsilon_greedy_actions(obs.q_values, obs.available, self.epsilon, self.policy_gen, softmax)
        )
        steps = []
        for slot, tr in enumerate(trans):
            st = Step(tr.ep.index, tr.selected, tr.action, tr.code, float(tr.reward), bool(tr.done))
            for ready in self.nstep.push(slot, st):
                self.buffer.add(ready)
            steps.append(st)
        return steps

    # -- replayed samples -----------------------------------------------------------------
    def _view(self, index: int) -> Episode:
        """An episode object of dataset sample ``index`` through which the Q-network rebuilds and
        caches its token ids; its availability is unused (each state's comes from its selection)."""
        ep = self._views.get(index)
        if ep is None:
            sample = self.env.dataset[index]
            ep = Episode(index, sample, torch.ones(len(sample["chunks"]), dtype=torch.bool, device=self.qnet.device))
            self.qnet.prepare([ep])
            self._views[index] = ep
            if len(self._views) > self.VIEW_CACHE:
                self._views.popitem(last=False)
        else:
            self._views.move_to_end(index)
        return ep

    @torch.no_grad()
    def _bootstrap(self, episodes: list[Episode], selections: list[list[int]]) -> torch.Tensor:
        """V′(s) for (sample, selection) pairs, batched over states (one padded layout)."""
        items = list(zip(episodes, selections))
        if not self.hp.double:
            ((q_target, avail),) = self.qnet.state_scores(items, ("target",), train=False, heads=False)
            return bootstrap_values(q_target, avail, None)  # no online scores: V′ = max Q′
        (q_target, avail), (q_online, _) = self.qnet.state_scores(items, ("target", "online"), train=False, heads=False)
        return bootstrap_values(q_target, avail, q_online)

    # -- one micro-step -------------------------------------------------------------------
    def micro_step(self) -> dict[str, float]:
        """Act (the warm-up first, until the buffer can be sampled), then one backward pass on a
        replayed batch; every K micro-steps an optimiser step."""
        qnet, hp = self.qnet, self.hp
        qnet.new_rollout()  # speed.chunk_cache=false: chunks are embedded again at every micro-step
        while self.counters.env_steps < hp.learning_starts or len(self.buffer) == 0:
            self._act()
        for _ in range(hp.env_steps_per_update):
            self._act()
        batch = [self.buffer.get(i) for i in self.buffer.sample(self.batch_size, self.policy_gen)]
        episodes = [self._view(tr.index) for tr in batch]
        # host-built, copied without waiting for the GPU's queue (QNetwork.to_device)
        ret = qnet.to_device(np.array([tr.ret for tr in batch], dtype=np.float32))
        k = qnet.to_device(np.array([tr.k for tr in batch], dtype=np.int64))
        done = qnet.to_device(np.array([tr.done for tr in batch], dtype=bool))
        v_next = torch.zeros(len(batch), device=qnet.device)
        need = [i for i, tr in enumerate(batch) if not tr.done]  # V′ after a done is multiplied by 0
        if need:
            v_next[qnet.to_device(np.array(need, dtype=np.int64))] = self._bootstrap(
                [episodes[i] for i in need], [batch[i].path for i in need]
            )
        y = nstep_targets(ret, k, done, v_next, hp.gamma)

        scalars = self.regress(
            episodes,
            [qnet.inputs.state_ids(ep, selected=tr.selected) for ep, tr in zip(episodes, batch)],
            [tr.action for tr in batch],
            [tr.code for tr in batch],
            y,
        )
        if self.end_micro_step():
            scalars.update(self.optimizer_step())
            # the target encoders: EMA with weight τ at every step, or a hard copy every
            # target_update_interval steps (counted with the step just taken)
            if hp.target_update == "ema":
                qnet.update_targets(hp.tau)
            elif self.counters.optimizer_steps % hp.target_update_interval == 0:
                qnet.update_targets(1.0)
            scalars["epsilon"] = self.epsilon
        return {**scalars, "buffer_size": float(len(self.buffer))}

    def batch_shape(self) -> BatchShape:
        """Env transitions collected per optimiser step (env_steps_per_update × E × K); each
        micro-step replays batch_size of the stored ones."""
        return BatchShape(self.hp.env_steps_per_update, self.env.n_envs, self.k_accum, self.batch_size)

    def extra_state(self) -> dict[str, Any]:
        return {"replay": self.buffer.state_dict(), "nstep": self.nstep.state_dict(), **super().extra_state()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.buffer.load_state_dict(state["replay"])
        self.nstep.load_state_dict(state["nstep"])
        super().load_extra_state(state)
