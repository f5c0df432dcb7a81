"""The retrieval MDP (DESIGN §1) for E episodes stepped together.

The env owns what the MDP needs and nothing of the learner: the current sample of each slot,
the chunks selected so far, a device-resident availability mask, position codes and rewards.
Encoders, tokens and embeddings belong to the agent (``rl``), keyed by the slot's sample.

``done = terminated ∨ (t+1 ≥ max_steps) ∨ (nothing left)``. Reaching ``max_steps`` is
terminal on purpose (no bootstrap across the time limit, DESIGN §1.4, §11 #48): the step budget is
part of the task. ``truncated`` is reported separately for logging.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from envs.feedback import Feedback
from envs.positions import PROCESSORS, random_codes, relative_codes, relative_codes_by_gap
from envs.seeding import derive_rng
from envs.types import Sample

# up to this many chunks, an episode's own codes come from the definition on the host (fewer GPU launches)
HOST_CODES_MAX_CHUNKS = 4096


@dataclass
class PositionSettings:
    """How chunk positions are coded. No defaults here: every value comes from the ``envs`` node
    (each env config states its processor; rl/run/keys.py ``EnvPositions`` holds the one default of
    the others)."""

    processor: str
    step_size: int
    formula: str
    max_chunks_count: int

    def __post_init__(self) -> None:
        if self.processor not in PROCESSORS:
            raise ValueError(f"envs.positions_processor must be one of {PROCESSORS}, got {self.processor!r}")

    @classmethod
    def from_cfg(cls, envs_cfg: Any) -> PositionSettings:
        return cls(
            processor=str(envs_cfg.positions_processor),
            step_size=int(envs_cfg.step_size),
            formula=str(envs_cfg.relative_formula),
            max_chunks_count=int(envs_cfg.max_chunks_count),
        )


@dataclass
class Episode:
    """One slot's episode: the sample and what has been selected (in selection order)."""

    index: int
    sample: Sample
    available: torch.Tensor  # bool [N] on the env's device
    selected: list[int] = field(default_factory=list)
    random_positions: torch.Tensor | None = None  # int64 [N] on the host (processor 'random')
    ret: float = 0.0
    late: bool = False  # the sample comes from the env's late dataset (VecRetrievalEnv.draw_late)

    @property
    def n_chunks(self) -> int:
        return len(self.sample["chunks"])

    @property
    def t(self) -> int:
        return len(self.selected)

    def codes(self, pos: PositionSettings, available: torch.Tensor | None = None) -> torch.Tensor | None:
        """p̂_t(i) for every chunk, or None for processor 'none'. ``available`` ([N] or [S, N])
        gives the codes of other states of this sample (only relative codes depend on it);
        without it the episode's own state, whose unavailable chunks are ``selected``. The one
        choice between the relative codes' definition and their fast path (envs/positions.py):
        the own state of a sample of at most HOST_CODES_MAX_CHUNKS chunks from the definition on
        the host (about 20 µs, against some 20 kernel launches on a GPU), all else from the fast
        path on the device (:func:`state_codes`)."""
        avail = self.available if available is None else available
        if pos.processor == "relative" and available is None and self.n_chunks <= HOST_CODES_MAX_CHUNKS:
            codes = relative_codes_by_gap(self.n_chunks, self.selected, pos.step_size, pos.formula)
            return torch.from_numpy(codes).to(avail.device, non_blocking=True)
        rows = avail.reshape(-1, self.n_chunks)  # the states as state_codes' rows: one formula
        codes = state_codes(pos, [self] * len(rows), rows)
        return None if codes is None else codes.reshape(avail.shape)

    def code_of(self, pos: PositionSettings, chunk: int) -> int:
        """p̂_t(chunk) in the episode's current state, read on the host (acting keeps it with the
        transition without reading the device's codes back, a sync per slot); -1 for 'none'."""
        if pos.processor == "none":
            return -1
        if pos.processor == "absolute":
            return chunk
        if pos.processor == "random":
            return int(self.random_positions[chunk])
        return int(relative_codes_by_gap(self.n_chunks, self.selected, pos.step_size, pos.formula)[chunk])


def state_codes(pos: PositionSettings, episodes: Sequence[Episode], available: torch.Tensor) -> torch.Tensor | None:
    """p̂(i) [S, N_max] of S states in a padded layout: row r is a state of ``episodes[r]``'s sample
    with availability ``available[r]`` [N_max] (its chunks first, then pads, never available);
    None for processor 'none'. A real chunk's code equals :meth:`Episode.codes` of that state:
    relative codes take the pads as selected chunks, so the last gap still ends at N_r."""
    if pos.processor == "none":
        return None
    if pos.processor == "absolute":
        return torch.arange(available.shape[-1], device=available.device).expand_as(available)
    if pos.processor == "random":
        rows = [ep.random_positions for ep in episodes]
        padded = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=0)
        return padded.to(available.device, non_blocking=True)
    return relative_codes(~available, pos.step_size, pos.formula)


class VecRetrievalEnv:
    """E parallel episodes over one dataset.

    Training slots draw sample indices uniformly with replacement from a generator derived from
    (seed, name); evaluation uses :meth:`start` with explicit indices. With a ``late_dataset`` (the
    same questions in other haystacks: training's ``late_haystacks``), resets draw from it while
    :attr:`draw_late` is set; the index is drawn the same way either way.
    """

    def __init__(
        self,
        dataset: Any,
        feedback: Feedback,
        n_envs: int,
        max_steps: int,
        positions: PositionSettings,
        sort_by_index: bool,
        device: torch.device,
        seed: int,
        name: str = "train",
        late_dataset: Any = None,
    ):
        if len(dataset) == 0:
            raise ValueError(f"the {name} dataset is empty")
        if late_dataset is not None and len(late_dataset) != len(dataset):
            raise ValueError(
                f"the late {name} dataset holds {len(late_dataset)} samples, the {name} dataset {len(dataset)}: "
                f"late haystacks must hold the same questions"
            )
        self.dataset, self.feedback = dataset, feedback
        self.n_envs, self.max_steps = n_envs, int(max_steps)
        self.pos, self.sort_by_index, self.device = positions, sort_by_index, device
        self.name = name
        self.late_dataset = late_dataset
        # set by the trainer from the optimiser step before each micro-step, so not saved: a resume
        # sets it again from the restored step (rl/run/train.py)
        self.draw_late = False
        self.rng = derive_rng(seed, "env-reset", name)
        self.pos_rng = derive_rng(seed, "env-random-positions", name)
        self.episodes: list[Episode | None] = [None] * n_envs

    # -- episode control ---------------------------------------------------------------
    def sample(self, index: int, late: bool) -> Sample:
        if late and self.late_dataset is None:
            raise ValueError(f"the {self.name} environments have no late dataset")
        return (self.late_dataset if late else self.dataset)[index]

    def start(self, slot: int, index: int, late: bool = False) -> Episode:
        sample = self.sample(index, late)
        if not sample["chunks"]:
            raise ValueError(f"sample {sample['id']!r} of the {self.name} set has no chunks")
        ep = Episode(index, sample, torch.ones(len(sample["chunks"]), dtype=torch.bool, device=self.device), late=late)
        if self.pos.processor == "random":
            ep.random_positions = torch.as_tensor(random_codes(ep.n_chunks, self.pos_rng, self.pos.max_chunks_count))
        self.feedback.reset(slot, sample)
        self.episodes[slot] = ep
        return ep

    def reset_random(self, slot: int) -> Episode:
        return self.start(slot, int(self.rng.integers(len(self.dataset))), self.draw_late)

    def reset_all(self) -> None:
        for slot in range(self.n_envs):
            self.reset_random(slot)

    def step(self, slots: Sequence[int], actions: Sequence[int]) -> tuple[list[float], list[bool], list[bool]]:
        """Apply one action per slot. Returns (rewards, dones, truncated). Does not reset."""
        eps = [self.episodes[s] for s in slots]
        for ep, a in zip(eps, actions):
            # checked on the host: a chunk is unavailable exactly when it was selected (reading the
            # device mask would wait for the GPU once per slot)
            if not 0 <= a < ep.n_chunks or a in ep.selected:
                raise ValueError(f"action {a} is not available in sample {ep.sample['id']!r}")
            ep.available[a] = False
            ep.selected.append(int(a))
        last = [ep.t >= self.max_steps or ep.t >= ep.n_chunks for ep in eps]
        rewards, completed = self.feedback.step(slots, [ep.selected for ep in eps], last_step=last)
        dones, truncated = [], []
        for ep, r, c, end in zip(eps, rewards, completed, last):
            ep.ret += r
            dones.append(bool(c or end))
            truncated.append(bool(end and not c))
        return rewards, dones, truncated

    # -- checkpointing (resume continues mid-episode) ------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "rng": self.rng.bit_generator.state,
            "pos_rng": self.pos_rng.bit_generator.state,
            "episodes": [
                None
                if ep is None
                else {
                    "index": ep.index,
                    "selected": list(ep.selected),
                    "ret": ep.ret,
                    "random_positions": ep.random_positions,
                    "late": ep.late,
                }
                for ep in self.episodes
            ],
            "feedback": getattr(self.feedback, "state_dict", lambda: None)(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.pos_rng.bit_generator.state = state["pos_rng"]
        for slot, es in enumerate(state["episodes"]):
            if es is None:
                continue
            late = bool(es.get("late", False))  # checkpoints from before late haystacks: never late
            sample = self.sample(es["index"], late)
            ep = Episode(
                es["index"], sample, torch.ones(len(sample["chunks"]), dtype=torch.bool, device=self.device), late=late
            )
            for a in es["selected"]:
                ep.available[a] = False
            ep.selected, ep.ret = list(es["selected"]), float(es["ret"])
            if es["random_positions"] is not None:
                ep.random_positions = es["random_positions"].cpu()
            self.feedback.reset(slot, sample)
            self.episodes[slot] = ep
        if state.get("feedback") is not None and hasattr(self.feedback, "load_state_dict"):
            self.feedback.load_state_dict(state["feedback"])
