"""The Q-network takes episodes: positions and the state's chunk order are bound when it is built, and
the beam planner's member states (``q_values(..., selections=...)``) score exactly as episodes whose
current state holds the same chunks (the acting and greedy path); a sample enters the network once
(``prepare``), after which states and embeddings only read its ids."""

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


def holding(qnet: QNetwork, sel: list[int]) -> Episode:
    """An episode whose current state holds ``sel`` (in selection order), entered into ``qnet``."""
    avail = torch.ones(len(SAMPLE["chunks"]), dtype=torch.bool)
    avail[sel] = False
    ep = Episode(0, SAMPLE, avail, list(sel))
    qnet.prepare([ep])
    return ep


def test_member_states_score_as_the_episodes_holding_them(qnet):
    sels = [[], [2], [3, 0], [4, 1, 2]]
    members = qnet.q_values([holding(qnet, [])] * len(sels), train=False, evaluation=True, selections=sels)
    for sel, row in zip(sels, members):
        want = qnet.q_values([holding(qnet, sel)], train=False, evaluation=True)[0]
        torch.testing.assert_close(row, want, rtol=0, atol=1e-6)
    # the positions matter: the same state with its chunks unrotated scores differently
    relative, qnet.positions = qnet.positions, PositionSettings("none", 1, "paper", 10)
    try:
        plain = qnet.q_values([holding(qnet, [3, 0])], train=False, evaluation=True)[0]
    finally:
        qnet.positions = relative
    assert not torch.allclose(plain, members[2], atol=1e-4)


def test_the_state_order_is_the_networks_own(qnet):
    ep = holding(qnet, [3, 0])
    assert qnet.inputs.state_ids(ep) == qnet.inputs.state_ids(ep, selected=[0, 3])  # sort_by_index=True: document order
    qnet.inputs.sort_by_index = False
    try:
        assert qnet.inputs.state_ids(ep) != qnet.inputs.state_ids(ep, selected=[0, 3])
    finally:
        qnet.inputs.sort_by_index = True


def test_member_states_of_different_episodes_are_refused(qnet):
    with pytest.raises(ValueError, match="same episode"):
        qnet.q_values([holding(qnet, []), holding(qnet, [])], train=False, selections=[[], [1]])


def test_states_read_only_the_ids_prepared_when_the_sample_entered(qnet, monkeypatch):
    """A sample enters once (``prepare``): its ids are those the tokenizer gives (checked against
    the tokenizer called text by text), a second ``prepare`` keeps them, and building states or
    embeddings afterwards tokenises nothing; an episode that never entered is refused."""
    from rl.model.tokens import sample_input

    ep = Episode(0, SAMPLE, torch.ones(len(SAMPLE["chunks"]), dtype=torch.bool))
    with pytest.raises(RuntimeError, match=r"QNetwork.prepare"):
        qnet.inputs.state_ids(ep)
    qnet.prepare([ep])
    tokens = qnet.inputs.tokens.get(ep)
    qnet.prepare([ep])
    assert qnet.inputs.tokens.get(ep) is tokens
    tok, cap = qnet.inputs.tokenizer, qnet.inputs.layout.content_cut
    ids = [tok(c, add_special_tokens=False)["input_ids"][:cap] for c in SAMPLE["chunks"]]
    assert [list(c) for c in tokens.chunks] == ids
    assert list(tokens.question) == tok(SAMPLE["question"], add_special_tokens=False)["input_ids"][:cap]
    fail = lambda *a, **k: pytest.fail("tokenised after the sample entered")  # noqa: E731
    monkeypatch.setattr(sample_input, "tokenize_chunks", fail)  # every id is made in sample_input.py
    monkeypatch.setattr(sample_input, "tokenize_sample", fail)
    monkeypatch.setattr(sample_input, "with_question", fail)
    qnet.q_values([ep], train=False, evaluation=True)
    cls, sep, mem = tok.cls_token_id, tok.sep_token_id, qnet.inputs.layout.memory_content
    assert qnet.inputs.state_ids(ep, selected=[2]) == [cls] + tokens.question[:mem] + [sep] + ids[2][:mem] + [sep]
    assert qnet.inputs.text_length(ep) == len(tok(SAMPLE["question"])["input_ids"]) + sum(
        len(tok(c)["input_ids"]) for c in SAMPLE["chunks"]
    )
