"""Plan Q-RAG: beam search over retrieval trajectories (DESIGN §4.6).

Every partial trajectory is expanded by its ``beam_expand`` best available chunks by Q; the
``beam_width`` expansions with the highest path score are kept; after T steps (or when no chunk is
left) the trajectory with the highest path score is returned. The path score (``eval.beam_score``,
:data:`PATH_SCORES`) is a function of the Q of each action taken: ``last`` (the default and the
reference's rule: the most recent action's Q), ``sum``, ``mean``, ``first`` or ``min``. ``last``
trusts one estimate per path, so among many paths it favours those whose final Q is
overestimated; ``sum``, ``mean`` and ``min`` weigh every step. Every path of a step has the same
length, so ``sum`` and ``mean`` always pick the same paths.
Per step this costs one batched state-encoder pass over the beam members; chunks are embedded
once per sample (the episode's cached online embeddings; once for consecutive samples over the
same chunk list, ``QNetwork.prepare(..., share=True)``) and only re-rotated with the relative codes of each
member's own selection.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from envs.env import Episode
from envs.feedback import Feedback
from rl.eval.greedy import EvalSettings, _record, eval_env
from rl.model.qnetwork import QNetwork

# q_fn(selections) -> [len(selections), N] Q-values of every chunk for each partial trajectory
QFunction = Callable[[Sequence[Sequence[int]]], torch.Tensor]


# path score (eval.beam_score) from the Q of each action of a non-empty path, in order
PATH_SCORES: dict[str, Callable[[Sequence[float]], float]] = {
    "last": lambda q: q[-1],
    "sum": lambda q: sum(q),
    "mean": lambda q: sum(q) / len(q),
    "first": lambda q: q[0],
    "min": lambda q: min(q),
}


@dataclass
class Beam:
    selected: list[int] = field(default_factory=list)
    q_values: list[float] = field(default_factory=list)  # Q of each chosen action


def beam_search(q_fn: QFunction, n_chunks: int, max_steps: int, width: int, expand: int, score: str = "last") -> Beam:
    """The best trajectory of at most ``max_steps`` distinct chunks by the path score ``score``
    (:data:`PATH_SCORES`). Ties: higher Q of the last action (so ``first`` ranks the expansions of
    one member by their own Q), then earlier beam member, then lower chunk index (so width =
    expand = 1 is exactly the greedy policy, whatever the score)."""
    if width < 1 or expand < 1:
        raise ValueError(f"eval.beam_width and eval.beam_expand must be ≥ 1, got {width} and {expand}")
    if score not in PATH_SCORES:
        raise ValueError(f"eval.beam_score must be one of {', '.join(PATH_SCORES)}, got {score!r}")
    path_score = PATH_SCORES[score]
    beams = [Beam()]
    for _ in range(min(max_steps, n_chunks)):
        q = q_fn([b.selected for b in beams]).float()
        candidates: list[tuple[float, float, int, int]] = []
        for m, b in enumerate(beams):
            row = q[m].clone()
            if b.selected:
                row[torch.as_tensor(b.selected, device=row.device)] = float("-inf")
            for v, a in _top(row, min(expand, n_chunks - len(b.selected))):
                candidates.append((path_score(b.q_values + [v]), v, m, a))
        candidates.sort(key=lambda c: (-c[0], -c[1], c[2], c[3]))
        beams = [Beam(beams[m].selected + [a], beams[m].q_values + [v]) for _, v, m, a in candidates[:width]]
    return beams[0]  # the kept members are in rank order


def _top(row: torch.Tensor, k: int) -> list[tuple[float, int]]:
    """The k largest entries as (value, index), ties broken towards the lower index (as argmax)."""
    kth = torch.topk(row, k).values[-1]
    idx = torch.nonzero(row >= kth).flatten()  # O(N); more than k only on ties at the boundary
    pairs = sorted(zip(row[idx].tolist(), idx.tolist()), key=lambda p: (-p[0], p[1]))
    return pairs[:k]


def qnet_q_function(qnet: QNetwork, ep: Episode) -> QFunction:
    """Q over the episode's sample for any partial selection: the Q-network's greedy scores
    (:meth:`QNetwork.q_values`, one state pass for the whole beam), each selection's chunks rotated
    by that selection's own position codes. ``ep`` has entered the network (:meth:`QNetwork.prepare`)."""

    def q_fn(selections: Sequence[Sequence[int]]) -> torch.Tensor:
        rows = qnet.q_values([ep] * len(selections), train=False, evaluation=True, selections=selections)
        return torch.stack(rows)

    return q_fn


@torch.no_grad()
def beam_episodes(
    qnet: QNetwork,
    dataset: Any,
    indices: Sequence[int],
    feedback: Feedback,
    settings: EvalSettings,
    width: int = 4,
    expand: int = 3,
    score: str = "last",
) -> Iterator[dict[str, Any]]:
    """One record per sample index (same fields as ``greedy_episodes``); ``q_values[t]`` is the
    Q of the action the returned trajectory took at step t; ``score``: the path score
    (:data:`PATH_SCORES`)."""
    if settings.stop_q_threshold is not None:
        raise ValueError(
            "eval.stop_q_threshold is not supported with eval.planner=beam; use the "
            "post-hoc qvalue filter (scripts/stopping_analysis.py) on the beam's q_values"
        )
    env = eval_env(qnet, dataset, feedback, settings, 1)
    _held: list[Any] = []  # kept, not read: the previous sample's haystack, alive while the next sample joins it
    for index in indices:
        t0 = time.perf_counter()
        ep = env.start(0, int(index))
        _held = qnet.prepare([ep], share=True, embed=True)  # the sample enters (tokens, chunk embeddings)
        q_fn = qnet_q_function(qnet, ep)
        best = beam_search(q_fn, ep.n_chunks, settings.max_steps, width, expand, score)
        for a in best.selected:  # replay through the env: rewards from the test feedback
            _, dones, _ = env.step([0], [a])
            if dones[0]:
                break
        yield _record(ep, best.q_values[: ep.t], qnet.inputs.text_length(ep), time.perf_counter() - t0)
