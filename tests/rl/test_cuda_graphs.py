"""CUDA-graph replays equal eager encoder calls (GPU only: skipped on CPU machines; the piece plan runs anywhere)."""

import numpy as np
import pytest
import torch

from rl.model.embedder import Embedder
from rl.model.fast.batching import embed_sequences
from rl.model.fast.cuda_graphs import ROW_BUCKETS, WIDTH_BUCKETS, GraphedEncoder, _bucket, plan_pieces

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_buckets_cover_and_round_up():
    assert _bucket(1, ROW_BUCKETS) == 1 and _bucket(3, ROW_BUCKETS) == 4 and _bucket(129, ROW_BUCKETS) is None
    assert (
        _bucket(17, WIDTH_BUCKETS) == 32 and _bucket(512, WIDTH_BUCKETS) == 512 and _bucket(513, WIDTH_BUCKETS) is None
    )


def _encoder():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256)
    return Embedder(BertModel(cfg, add_pooling_layer=False)).cuda()


@cuda
@pytest.mark.cuda
@pytest.mark.parametrize("amp", [None, torch.bfloat16])
def test_graph_replay_equals_eager_and_sees_weight_updates(amp):
    enc = _encoder().eval()
    g = GraphedEncoder(enc, pad=0, left=False, amp=amp, pool=torch.cuda.graph_pool_handle())
    gen = torch.Generator().manual_seed(1)
    dev = torch.device("cuda")
    for rows in (1, 3, 8, 100):
        seqs = [
            torch.randint(1, 1000, (int(torch.randint(3, 60, (1,), generator=gen)),), generator=gen).tolist()
            for _ in range(rows)
        ]
        with torch.no_grad():
            want = embed_sequences(enc, seqs, 0, dev, 1024, amp)
            got = g(seqs)
        tol = 2e-2 if amp else 1e-4
        assert got is not None and torch.allclose(got, want, atol=tol * want.abs().max().item(), rtol=0)
    with torch.no_grad():  # an in-place update (as AdamW / EMA / load_state_dict do) reaches the graph
        for p in enc.parameters():
            p.mul_(0.5)
        want = embed_sequences(enc, seqs, 0, dev, 1024, amp)
        got = g(seqs)
    assert torch.allclose(got, want, atol=(2e-2 if amp else 1e-4) * want.abs().max().item(), rtol=0)


@cuda
@pytest.mark.cuda
def test_train_mode_replays_draw_fresh_dropout():
    enc = _encoder().train()
    g = GraphedEncoder(enc, pad=0, left=False, amp=None, pool=torch.cuda.graph_pool_handle())
    with torch.no_grad():
        a, b = g([[5, 6, 7, 8]]), g([[5, 6, 7, 8]])
    assert not torch.equal(a, b)


@cuda
@pytest.mark.cuda
def test_calls_outside_the_buckets_are_left_to_eager():
    g = GraphedEncoder(_encoder().eval(), pad=0, left=False, amp=None, pool=torch.cuda.graph_pool_handle())
    assert g([[1] * 600]) is None and g([[1, 2]] * 200) is None


def test_pieces_cover_every_row_once_within_the_buckets():
    rng = np.random.default_rng(0)
    for n in (1, 127, 128, 129, 1100):
        lens = rng.integers(1, 513, n)
        lens[: n // 2] = rng.integers(3, 40, n // 2)  # mostly chunk-like, some wide
        pieces = plan_pieces(lens, 1 << 15, 512)
        flat = np.concatenate(pieces)
        assert sorted(flat.tolist()) == list(range(n))  # every row once
        assert np.all(np.diff(lens[flat]) >= 0)  # sorted by length: each piece pads only to its own longest
        for idx in pieces:
            assert 1 <= len(idx) <= ROW_BUCKETS[-1]
            assert _bucket(len(idx), ROW_BUCKETS) * _bucket(int(lens[idx].max()), WIDTH_BUCKETS) <= 1 << 15
    assert plan_pieces(np.array([5, 513]), 1 << 15, 512) is None
    assert [len(p) for p in plan_pieces(np.full(300, 20), 1 << 15, 512)] == [128, 128, 44]


@cuda
@pytest.mark.cuda
@pytest.mark.parametrize("amp", [None, torch.bfloat16])
def test_pieces_equal_eager(amp):
    enc = _encoder().eval()
    g = GraphedEncoder(enc, pad=0, left=False, amp=amp, pool=torch.cuda.graph_pool_handle())
    gen = torch.Generator().manual_seed(2)
    seqs = [
        torch.randint(1, 1000, (int(torch.randint(2, 300, (1,), generator=gen)),), generator=gen).tolist()
        for _ in range(300)
    ]
    with torch.no_grad():
        want = embed_sequences(enc, seqs, 0, torch.device("cuda"), 1024, amp)
        got = g.in_pieces(seqs)
    tol = 2e-2 if amp else 1e-4
    assert got is not None and torch.allclose(got, want, atol=tol * want.abs().max().item(), rtol=0)
    assert g.in_pieces([[1] * 600, [2, 3]]) is None
