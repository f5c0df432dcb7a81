"""Plan Q-RAG beam search (DESIGN §4.6) on a hand-made Q table where greedy is myopic."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from rl.eval.beam import beam_search

# 4 chunks, T = 2. Greedy takes chunk 0 (Q 0.9) and can then only reach Q 0.2;
# starting with chunk 1 (Q 0.8) leads to chunk 3 with Q 0.95.
TABLE = {
    (): [0.9, 0.8, 0.1, 0.0],
    (0,): [0.0, 0.1, 0.2, 0.15],
    (1,): [0.3, 0.0, 0.05, 0.95],
    (2,): [0.1, 0.1, 0.0, 0.1],
}


def table_q(calls: list[int]):
    def q_fn(selections: Sequence[Sequence[int]]) -> torch.Tensor:
        calls.append(len(selections))
        return torch.tensor([TABLE[tuple(s)] for s in selections])

    return q_fn


def test_greedy_fails_beam_succeeds() -> None:
    calls: list[int] = []
    greedy = beam_search(table_q(calls), 4, 2, width=1, expand=1)
    assert greedy.selected == [0, 2] and greedy.q_values == pytest.approx([0.9, 0.2])
    assert calls == [1, 1]  # one state per step
    calls.clear()
    best = beam_search(table_q(calls), 4, 2, width=2, expand=2)
    assert best.selected == [1, 3] and best.q_values == pytest.approx([0.8, 0.95])
    assert calls == [1, 2]  # one batched state pass per step over the beam members


def test_selected_chunks_are_never_repeated_and_budget_respected() -> None:
    def flat(selections: Sequence[Sequence[int]]) -> torch.Tensor:
        return torch.tensor([[1.0, 0.5, 0.2]] * len(selections))

    best = beam_search(flat, 3, 5, width=3, expand=3)
    assert sorted(best.selected) == [0, 1, 2] and len(best.q_values) == 3


def test_ties_prefer_earlier_member_then_lower_index() -> None:
    def tie(selections: Sequence[Sequence[int]]) -> torch.Tensor:
        return torch.zeros(len(selections), 5)

    assert beam_search(tie, 5, 2, width=2, expand=2).selected == [0, 1]
