"""Replay memory of the DQN learner (rl/learners/dqn.py, docs/DQN.md): n-step transitions stored
as sample references and selections, never texts or embeddings.

The encoders keep changing, so a stored embedding would be stale at its next use; a transition
therefore holds only what rebuilds the state and the action from the sample's token ids: the
dataset index of the sample and the chunks selected. Selections grow by appending, so one array
row holds both ends of an n-step transition:

    path[:t]      the selection before acting (state s_t, selection order)
    path[t]       the action a_t
    path[:t + k]  the selection after k ≤ n steps (state s_{t+k}); k < n only at an episode end

with the action's position code at acting time, the discounted reward sum
R = Σ_{i<k} γ^i r_{t+i} and ``done`` (the episode ended within those k steps: no bootstrap).
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch


def physical_memory() -> int:
    """Bytes of RAM on this machine (0 where the platform does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


@dataclass
class Step:
    """One environment step of one slot, as the learner observed it."""

    index: int  # dataset index of the episode's sample
    selected: list[int]  # chunks held before acting, in selection order
    action: int
    code: int  # position code of the action at acting time (-1: no positions)
    reward: float
    done: bool


@dataclass
class NStep:
    """One n-step transition (see the module docstring)."""

    index: int
    path: list[int]  # selection after k steps = selection before acting + k actions
    t: int  # length of the selection before acting
    k: int  # steps summed in ret (1 ≤ k ≤ n)
    code: int
    ret: float  # Σ_{i<k} γ^i r_{t+i}
    done: bool

    @property
    def selected(self) -> list[int]:
        return self.path[: self.t]

    @property
    def action(self) -> int:
        return self.path[self.t]


class NStepAssembler:
    """Turns each slot's stream of 1-step transitions into n-step ones.

    A step waits in its slot's queue until n steps of the same episode follow it (k = n, bootstrap
    from s_{t+n}) or the episode ends (every waiting step leaves with k = steps to the end and
    done = true). Environments reset a slot only after a done, so a queue never spans episodes.
    """

    def __init__(self, n_envs: int, n: int, gamma: float):
        if n < 1:
            raise ValueError(f"algo.dqn.hyperparams.n_step must be >= 1, got {n}")
        self.n, self.gamma = int(n), float(gamma)
        self.queues: list[deque[Step]] = [deque() for _ in range(n_envs)]

    def push(self, slot: int, step: Step) -> list[NStep]:
        """Add ``slot``'s next step; the n-step transitions that became complete."""
        q = self.queues[slot]
        if q and (q[-1].done or q[-1].index != step.index or q[-1].selected + [q[-1].action] != step.selected):
            raise ValueError(
                f"slot {slot}: step does not continue the episode of the previous one "
                f"(sample {q[-1].index} -> {step.index}); push every step of a slot in order"
            )
        q.append(step)
        out = []
        if step.done:
            while q:
                out.append(self._emit(q, len(q), True))
                q.popleft()
        elif len(q) == self.n:
            out.append(self._emit(q, self.n, False))
            q.popleft()
        return out

    def _emit(self, q: deque[Step], k: int, done: bool) -> NStep:
        first, last = q[0], q[k - 1]
        ret = 0.0
        for i in range(k):
            ret += self.gamma**i * q[i].reward
        return NStep(first.index, last.selected + [last.action], len(first.selected), k, first.code, ret, done)

    def state_dict(self) -> dict[str, Any]:
        return {"queues": [[asdict(s) for s in q] for q in self.queues]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.queues = [deque(Step(**s) for s in q) for q in state["queues"]]


class ReplayBuffer:
    """Ring buffer of n-step transitions in fixed numpy arrays; uniform sampling with replacement.

    ``max_len`` bounds a selection (the episode's step limit T). Memory is
    ``capacity × bytes_per_transition`` allocated up front: 8 + 4·T + 4 + 1 + 4 + 4 + 1 bytes
    (index, path, t, k, code, ret, done), e.g. 46 bytes for T = 6.
    """

    def __init__(self, capacity: int, max_len: int):
        if capacity < 1:
            raise ValueError(f"algo.dqn.hyperparams.buffer_size must be >= 1, got {capacity}")
        self.capacity, self.max_len = int(capacity), int(max_len)
        self.index = np.zeros(capacity, dtype=np.int64)
        self.path = np.full((capacity, max_len), -1, dtype=np.int32)
        self.t = np.zeros(capacity, dtype=np.int32)
        self.k = np.zeros(capacity, dtype=np.int8)
        self.code = np.zeros(capacity, dtype=np.int32)
        self.ret = np.zeros(capacity, dtype=np.float32)
        self.done = np.zeros(capacity, dtype=bool)
        self.ptr = 0  # next row to write
        self.size = 0

    _FIELDS = ("index", "path", "t", "k", "code", "ret", "done")

    @staticmethod
    def row_bytes(max_len: int) -> int:
        """Bytes one transition takes (the layout above), before the buffer is built."""
        return 8 + 4 * max_len + 4 + 1 + 4 + 4 + 1

    @property
    def bytes_per_transition(self) -> int:
        return sum(getattr(self, f).nbytes for f in self._FIELDS) // self.capacity

    def __len__(self) -> int:
        return self.size

    def add(self, tr: NStep) -> None:
        if len(tr.path) > self.max_len:
            raise ValueError(
                f"a selection of {len(tr.path)} chunks exceeds the buffer's {self.max_len} (envs.max_steps)"
            )
        if not 1 <= tr.k <= 127:
            raise ValueError(f"n-step length {tr.k} outside 1..127")
        i = self.ptr
        self.index[i], self.t[i], self.k[i], self.code[i] = tr.index, tr.t, tr.k, tr.code
        self.ret[i], self.done[i] = tr.ret, tr.done
        self.path[i] = -1
        self.path[i, : len(tr.path)] = tr.path
        self.ptr = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def get(self, i: int) -> NStep:
        t, k = int(self.t[i]), int(self.k[i])
        return NStep(
            int(self.index[i]),
            self.path[i, : t + k].tolist(),
            t,
            k,
            int(self.code[i]),
            float(self.ret[i]),
            bool(self.done[i]),
        )

    def sample(self, batch: int, generator: torch.Generator) -> list[int]:
        """``batch`` rows drawn uniformly with replacement from the filled part."""
        if self.size == 0:
            raise ValueError("sampling from an empty replay buffer")
        return torch.randint(self.size, (batch,), generator=generator).tolist()

    def state_dict(self) -> dict[str, Any]:
        """The filled rows as tensors (checkpoints load with weights_only=True)."""
        n = self.size
        return {
            "capacity": self.capacity,
            "max_len": self.max_len,
            "ptr": self.ptr,
            "size": n,
            **{f: torch.from_numpy(getattr(self, f)[:n].copy()) for f in self._FIELDS},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if (int(state["capacity"]), int(state["max_len"])) != (self.capacity, self.max_len):
            raise ValueError(
                f"the checkpoint's replay buffer holds {state['capacity']} transitions of up to "
                f"{state['max_len']} chunks, this run's {self.capacity} of {self.max_len}: resume "
                f"with the same algo.dqn.hyperparams.buffer_size and envs.max_steps"
            )
        n = int(state["size"])
        for f in self._FIELDS:
            getattr(self, f)[:n] = state[f].numpy()
        self.ptr, self.size = int(state["ptr"]), n
