"""CUDA-graph replays equal eager encoder calls (GPU only: skipped on CPU machines)."""

import pytest
import torch

from rl.model.embedder import Embedder
from rl.model.fast.batching import embed_sequences
from rl.model.fast.cuda_graphs import ROW_BUCKETS, WIDTH_BUCKETS, GraphedEncoder, _bucket

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
