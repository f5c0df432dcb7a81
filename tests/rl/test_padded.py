"""The batched (padded) Q-values, soft top-k policy, position codes and target values against
per-sample loops written here from their definitions (DESIGN §3, §4.2, §4.4).

Samples of different chunk counts share one [R, N_max] layout (rl/model/padded.py); every real
entry must equal what its sample alone gives, pads must never be chosen or counted, and the
policy's draws must consume the CPU generator exactly as one draw per state over its own
top-min(k, |A|) (so a run's actions are those of the per-slot loop)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from envs.env import Episode, PositionSettings, state_codes
from envs.positions import relative_codes_by_gap
from rl.learners.acting import policy_probs
from rl.model.fast.switches import SpeedSwitches
from rl.model.model_keys import ModelKeys, Predictor
from rl.model.padded import availability_rows, pad_rows
from rl.model.precision import Precision
from rl.model.qfunc import soft_topk_draws, soft_topk_probs, soft_values
from tests.conftest import chunk_embeddings

CPU = torch.device("cpu")


def test_pad_rows_lays_each_row_first_then_the_fill():
    g = torch.Generator().manual_seed(0)
    rows = [torch.randn(n, 3, generator=g) for n in (4, 1, 6)]
    out = pad_rows(rows, -7.0)
    assert out.shape == (3, 6, 3)
    for r, row in enumerate(rows):
        assert torch.equal(out[r, : len(row)], row)
        assert bool((out[r, len(row) :] == -7.0).all())
    flags = pad_rows([torch.tensor([True, False]), torch.ones(3, dtype=torch.bool)], False)
    assert flags.tolist() == [[True, False, False], [True, True, True]]


def test_availability_rows_excludes_the_held_chunks_and_the_pads():
    avail, valid = availability_rows([3, 5, 2], [[1], [0, 4], [0, 1]])
    assert valid.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    assert avail.tolist() == [[1, 0, 1, 0, 0], [0, 1, 1, 1, 0], [0, 0, 0, 0, 0]]


# -- position codes of padded states ---------------------------------------------------------
def _episode(n: int, index: int = 0) -> Episode:
    return Episode(
        index,
        {"id": f"s{index}", "question": "q", "chunks": [f"c{j}" for j in range(n)]},
        torch.ones(n, dtype=torch.bool),
    )


@pytest.mark.parametrize(
    "processor,formula",
    [
        ("none", "linspace"),
        ("absolute", "linspace"),
        ("random", "linspace"),
        ("relative", "linspace"),
        ("relative", "paper"),
    ],
)
def test_state_codes_of_padded_states_equal_each_samples_own(processor, formula):
    """Rows of samples with 3 to 11 chunks, selections from empty to everything: each row's real
    codes equal the sample's own (Episode.codes on its [N] mask; relative codes also against the
    numpy formula), whatever the pads."""
    rng = np.random.default_rng(0)
    pos = PositionSettings(processor, step_size=50, formula=formula, max_chunks_count=2000)
    episodes, selections = [], []
    for i, n in enumerate([7, 3, 11, 6, 11]):
        ep = _episode(n, i)
        ep.random_positions = torch.as_tensor(rng.integers(0, 1000, n))
        k = n if i == 4 else int(rng.integers(0, n))  # the last state holds every chunk
        episodes.append(ep)
        selections.append([int(j) for j in rng.permutation(n)[:k]])
    avail, _ = availability_rows([ep.n_chunks for ep in episodes], selections)
    codes = state_codes(pos, episodes, torch.from_numpy(avail))
    if processor == "none":
        assert codes is None
        return
    for r, (ep, sel) in enumerate(zip(episodes, selections)):
        own = ep.codes(pos, torch.from_numpy(avail[r : r + 1, : ep.n_chunks]))
        assert torch.equal(codes[r, : ep.n_chunks], own[0]), r
        if processor == "relative":
            want = relative_codes_by_gap(ep.n_chunks, sel, pos.step_size, formula)
            assert codes[r, : ep.n_chunks].tolist() == want.tolist(), r


# -- the soft top-k policy -------------------------------------------------------------------------
def _policy_reference(q: torch.Tensor, available: torch.Tensor, k: int | None, alpha: float):
    """Per state (unpadded [N]): the top-min(k, |A|) available chunks by Q, softmax((Q − max)/α)."""
    n_avail = int(available.sum())
    kk = n_avail if k is None else min(k, n_avail)
    vals, idx = torch.topk(q.masked_fill(~available, float("-inf")), kk)
    return torch.softmax(((vals - vals.max()) / alpha).double(), 0), idx


def _policy_case(seed: int):
    g = torch.Generator().manual_seed(seed)
    sizes = [9, 4, 12, 2, 7]
    q = [torch.randn(n, generator=g) for n in sizes]
    avail = [torch.rand(n, generator=g) < 0.6 for n in sizes]
    for a in avail:
        a[int(torch.randint(len(a), (1,), generator=g))] = True  # every state can act
    avail[1][:] = False
    avail[1][2] = True  # one available chunk: k > |A|
    return q, avail


@pytest.mark.parametrize("k", [None, 1, 3, 5, 20])
def test_soft_topk_probs_equal_the_per_state_policy(k):
    q, avail = _policy_case(1)
    probs, idx, support = soft_topk_probs(pad_rows(q, float("-inf")), pad_rows(avail, False), k, 0.7)
    for r, (qr, ar) in enumerate(zip(q, avail)):
        want_p, want_i = _policy_reference(qr, ar, k, 0.7)
        s = len(want_i)
        assert int(support[r]) == s
        torch.testing.assert_close(probs[r, :s], want_p, rtol=1e-12, atol=0)
        assert idx[r, :s].tolist() == want_i.tolist()
        assert bool((probs[r, s:] == 0).all())
        dense = torch.zeros(len(qr), dtype=torch.float64)
        dense[want_i] = want_p
        torch.testing.assert_close(policy_probs(qr, ar, k, 0.7), dense, rtol=1e-12, atol=0)


@pytest.mark.parametrize("k,alpha", [(3, 0.5), (None, 2.0), (20, 1.0), (2, 1e-6)])
def test_soft_topk_draws_are_the_per_slot_draws(k, alpha):
    """Same actions, and the generator left in the same state, as one multinomial per slot over
    its own top-min(k, |A|) probabilities (the loop the batched draw replaced)."""
    for seed in range(5):
        q, avail = _policy_case(seed)
        g_ref, g = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        want = []
        for qr, ar in zip(q, avail):
            p, idx = _policy_reference(qr, ar, k, alpha)
            want.append(int(idx[torch.multinomial(p, 1, generator=g_ref).item()]))
        got = soft_topk_draws(pad_rows(q, float("-inf")), pad_rows(avail, False), k, alpha, g)
        assert got == want
        assert torch.equal(g.get_state(), g_ref.get_state())


def test_soft_topk_draws_refuse_a_state_with_nothing_available():
    with pytest.raises(ValueError, match="available chunk"):
        soft_topk_draws(torch.zeros(1, 3), torch.zeros(1, 3, dtype=torch.bool), 2, 1.0, torch.Generator())


# -- the Q-network's padded passes -------------------------------------------------------------
POSITIONS = [PositionSettings(p, 50, "linspace", 2000) for p in ("none", "absolute", "relative")]


@pytest.fixture(scope="module")
def qnet():
    from rl.model.qnetwork import QNetwork

    model = ModelKeys(name="offline:minilm", predictor=Predictor(num_layers=1))
    layout = {"max_action_length": 12, "max_action_length_in_memory": 8, "max_state_length": 40}
    net = QNetwork(
        model, layout, CPU, Precision.resolve("fp32", CPU), 64, SpeedSwitches(), POSITIONS[0], sort_by_index=True
    )
    # a target encoder unlike the online one, so a mix-up of the two shows
    with torch.no_grad():
        for p in net.target_action.parameters():
            p.add_(0.01 * torch.randn_like(p))
    return net


def _samples() -> list[Episode]:
    words = ["Mary went to the kitchen.", "John moved to the hallway.", "Sandra journeyed to the bathroom."]
    sizes = [5, 2, 8, 3]
    return [
        Episode(
            i,
            {"id": f"s{i}", "question": f"Where is Mary {i}?", "chunks": [f"{words[j % 3]} {i} {j}" for j in range(n)]},
            torch.ones(n, dtype=torch.bool),
        )
        for i, n in enumerate(sizes)
    ]


@pytest.mark.parametrize("pos", POSITIONS, ids=lambda p: p.processor)
def test_q_values_equal_each_episodes_own(qnet, pos):
    """Q(s_i, ·) of episodes with 5, 2, 8 and 3 chunks (one of them twice, in another state):
    ⟨E_s(s_i), R(p̂)·u_j⟩ per chunk, from the episode's own cached embeddings and codes."""
    episodes = _samples()
    for ep, sel in zip(episodes, ([1, 3], [], [7, 0, 2], [0])):
        for a in sel:
            ep.available[a] = False
            ep.selected.append(a)
    episodes.append(episodes[2])
    qnet.positions = pos  # the network built with these positions
    qnet.prepare(episodes)
    states = [qnet.inputs.state_ids(ep) for ep in episodes]
    codes = [ep.codes(pos) for ep in episodes]
    got = qnet.q_values(episodes, train=False)
    s_emb = qnet._embed(qnet.state_enc, states, train=False)
    for i, ep in enumerate(episodes):
        u = chunk_embeddings(qnet, ep, "online", False)
        rotated = u if codes[i] is None else qnet.rope(u, codes[i])
        want = (rotated * s_emb[i]).sum(-1)
        assert got[i].shape == (ep.n_chunks,)
        torch.testing.assert_close(got[i], want, rtol=1e-5, atol=1e-5)
    alone = qnet.q_values(episodes[2:3], train=False)  # one sample: no padding
    torch.testing.assert_close(alone[0], got[2], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pos", POSITIONS, ids=lambda p: p.processor)
def test_target_heads_and_values_equal_each_states_own(qnet, pos):
    """Both target heads for states of samples of different sizes (one state holds every chunk of
    its sample, one holds all but one): each row's real entries are ⟨s_h, (R(p̂)·u′)_h⟩ with the
    state's own codes, pads score −inf and are unavailable; V of the padded rows equals V of each
    state alone (soft, hard and the legacy top-k before the mask, k above and below |A|)."""
    episodes = _samples()
    items = [
        (episodes[0], [1, 3]),
        (episodes[1], [0, 1]),
        (episodes[2], []),
        (episodes[2], [4, 0, 1, 2, 3, 5, 6]),
        (episodes[3], [2]),
    ]
    qnet.positions = pos  # the network built with these positions
    qnet.prepare(episodes)
    heads, avail = qnet.target_heads(items, False)
    n_max = max(ep.n_chunks for ep in episodes)
    assert heads.shape == (len(items), 2, n_max) and avail.shape == (len(items), n_max)
    states = [qnet.inputs.state_ids(ep, selected=sel) for ep, sel in items]
    s_emb = qnet._embed(qnet.target_state, states, train=False)
    h = s_emb.shape[-1] // 2
    for i, (ep, sel) in enumerate(items):
        n = ep.n_chunks
        own_avail = torch.ones(n, dtype=torch.bool)
        own_avail[sel] = False
        assert torch.equal(avail[i, :n], own_avail) and not bool(avail[i, n:].any())
        u = chunk_embeddings(qnet, ep, "target", False)
        codes = ep.codes(pos, own_avail.unsqueeze(0))
        rotated = u if codes is None else qnet.rope(u, codes[0])
        want = torch.stack([(rotated[:, :h] * s_emb[i, :h]).sum(-1), (rotated[:, h:] * s_emb[i, h:]).sum(-1)])
        torch.testing.assert_close(heads[i, :, :n], want, rtol=1e-5, atol=1e-5)
        assert bool((heads[i, :, n:] == float("-inf")).all())
        for k in (None, 1, 3, 6):
            for soft, legacy in ((True, False), (False, False), (True, True)):
                v = soft_values(heads[i : i + 1, :, :n], avail[i : i + 1, :n], k, 0.3, soft, legacy)
                v_pad = soft_values(heads, avail, k, 0.3, soft, legacy)[i]
                torch.testing.assert_close(v_pad, v[0], rtol=1e-6, atol=1e-6)
    assert float(soft_values(heads, avail, 3, 0.3)[1]) == 0.0  # nothing available: V = 0
    one, one_avail = qnet.target_heads(items[2:4], False)  # states of one sample: no pads
    n = episodes[2].n_chunks
    assert one.shape == (2, 2, n)
    torch.testing.assert_close(one, heads[2:4, :, :n], rtol=1e-5, atol=1e-5)
    assert torch.equal(one_avail, avail[2:4, :n])
