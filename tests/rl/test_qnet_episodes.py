"""The Q-network takes episodes: positions and the state's chunk order are bound when it is built, and
the beam planner's member states (``q_values(..., selections=...)``) score exactly as episodes whose
current state holds the same chunks (the acting and greedy path)."""

from __future__ import annotations

import pytest
import torch

from envs.env import Episode, PositionSettings
from rl.model.fast.switches import SpeedSwitches
from rl.model.model_keys import ModelKeys, Predictor
from rl.model.precision import Precision
from rl.model.qnetwork import QNetwork

CPU = torch.device("cpu")
SAMPLE = {
    "id": "s0",
    "question": "Where is Mary?",
    "chunks": [
        "Mary went to the kitchen.",
        "John moved to the hallway.",
        "Sandra journeyed to the bathroom.",
        "Mary travelled to the garden.",
        "Daniel went back to the office.",
    ],
}


@pytest.fixture(scope="module")
def qnet() -> QNetwork:
    model = ModelKeys(name="offline:minilm", predictor=Predictor(num_layers=1))
    layout = {"max_action_length": 12, "max_action_length_in_memory": 8, "max_state_length": 64}
    relative = PositionSettings("relative", 1, "paper", 10)
    return QNetwork(model, layout, CPU, Precision.resolve("fp32", CPU), 64, SpeedSwitches(), relative, True)


def holding(sel: list[int]) -> Episode:
    """An episode whose current state holds ``sel`` (in selection order)."""
    avail = torch.ones(len(SAMPLE["chunks"]), dtype=torch.bool)
    avail[sel] = False
    return Episode(0, SAMPLE, avail, list(sel))


def test_member_states_score_as_the_episodes_holding_them(qnet):
    sels = [[], [2], [3, 0], [4, 1, 2]]
    members = qnet.q_values([holding([])] * len(sels), train=False, evaluation=True, selections=sels)
    for sel, row in zip(sels, members):
        want = qnet.q_values([holding(sel)], train=False, evaluation=True)[0]
        torch.testing.assert_close(row, want, rtol=0, atol=1e-6)
    # the positions matter: the same state with its chunks unrotated scores differently
    plain = qnet.q_values([holding([3, 0])], train=False, codes=[None], evaluation=True)[0]
    assert not torch.allclose(plain, members[2], atol=1e-4)


def test_the_state_order_is_the_networks_own(qnet):
    ep = holding([3, 0])
    assert qnet.state_ids(ep) == qnet.state_ids(ep, selected=[0, 3])  # sort_by_index=True: document order
    qnet.sort_by_index = False
    try:
        assert qnet.state_ids(ep) != qnet.state_ids(ep, selected=[0, 3])
    finally:
        qnet.sort_by_index = True


def test_member_states_of_different_episodes_are_refused(qnet):
    with pytest.raises(ValueError, match="same episode"):
        qnet.q_values([holding([]), holding([])], train=False, selections=[[], [1]])
