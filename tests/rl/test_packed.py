"""The packed variable-length encoder (rl/model/fast/packed.py) against the padded path.

The padded path (``embed_sequences`` over the Hugging Face module) is the reference: the packed
encoder must give the same embeddings (fp32: 1e-5; bf16 autocast: an error against fp32 of the
same size as the padded path's own) for the real MiniLM and random tiny BERT / XLM-RoBERTa models,
every pooling, mixed lengths from 1 token to the model's maximum, slices and filler padding of
the compiled shapes, and after in-place weight updates. Unsupported models keep the padded path
with a log line. On a GPU, ``experiments/bench/check_packed_encoder.py`` compares the CUDA kernels.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from envs.env import PositionSettings
from rl.model.embedder import Embedder, load_backbone
from rl.model.fast import packed as packed_module
from rl.model.fast.batching import embed_sequences
from rl.model.fast.packed import PackedEncoder, plan_packed_slices, unsupported_reason
from rl.model.model_keys import ModelKeys, Predictor
from rl.model.tokens.layout import TokenLayout
from rl.model.tokens.ragged import FramedIds, IdLists, RaggedIds, as_seq_set

CPU = torch.device("cpu")


def _randomise(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Every weight away from its init (LayerNorms at 1/0 would hide a swapped LayerNorm)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=gen))
    return model


def _tiny(kind: str) -> torch.nn.Module:
    from transformers import BertConfig, BertModel, XLMRobertaConfig, XLMRobertaModel

    shape = dict(vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    if kind == "bert":
        torch.manual_seed(0)
        model = BertModel(BertConfig(**shape, max_position_embeddings=64), add_pooling_layer=False)
    else:  # positions count from pad_token_id + 1, as in multilingual-E5
        torch.manual_seed(1)
        cfg = XLMRobertaConfig(**shape, max_position_embeddings=66, pad_token_id=1, hidden_act="gelu_new")
        model = XLMRobertaModel(cfg, add_pooling_layer=False)
    return _randomise(model, 2).eval()


@pytest.fixture(scope="module")
def minilm() -> torch.nn.Module:
    return load_backbone(ModelKeys(name="offline:minilm")).eval()


@pytest.fixture(scope="module")
def tiny_bert() -> torch.nn.Module:
    return _tiny("bert")


@pytest.fixture(scope="module")
def tiny_xlmr() -> torch.nn.Module:
    return _tiny("xlmr")


def _ids(n: int, max_len: int, vocab: int, seed: int, low: int = 3) -> list[list[int]]:
    """Mixed lengths with a length-1 and a maximal sequence; no id below ``low`` (pad ids)."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, max_len // 3, n)
    lens[[0, n // 2, n - 1]] = [1, max_len, 2]
    return [rng.integers(low, vocab, int(k)).tolist() for k in lens]


def _padded(enc, seqs, pad, left=False, amp=None):
    return embed_sequences(enc, seqs, pad, CPU, 64, amp, left=left)


CASES = [  # (backbone fixture, pad id, longest sequence, vocab, pooling, left padding, normalize)
    ("minilm", 0, 512, 30000, "mean", False, False),
    ("tiny_bert", 0, 64, 200, "mean", False, False),
    ("tiny_bert", 0, 64, 200, "cls", False, True),
    ("tiny_bert", 0, 64, 200, "last", False, False),
    ("tiny_xlmr", 1, 64, 200, "mean", False, False),
    ("tiny_xlmr", 1, 64, 200, "last", True, True),  # left padding: positions from the non-pad tokens
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[4]}-{'left' if c[5] else 'right'}")
def test_packed_equals_padded_fp32(case, request):
    name, pad, max_len, vocab, pooling, left, normalize = case
    enc = Embedder(request.getfixturevalue(name), pooling, 0.1, normalize).eval()
    n = 16 if name == "minilm" else 60
    seqs = _ids(n, max_len, vocab, seed=3)
    want = _padded(enc, seqs, pad, left)
    got = PackedEncoder(enc, pad, left, attention="grouped")(seqs)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_nested_attention_equals_grouped(tiny_bert):
    """The GPU fallback backend (SDPA over a nested jagged tensor) computes the same on CPU."""
    enc = Embedder(tiny_bert).eval()
    seqs = _ids(40, 64, 200, seed=4)
    torch.testing.assert_close(
        PackedEncoder(enc, 0, attention="nested")(seqs), _padded(enc, seqs, 0), rtol=1e-5, atol=1e-5
    )


def test_slices_and_filler_do_not_change_results(tiny_xlmr, monkeypatch):
    """Many small slices, each padded to a bucketed width with filler sequences, give the same
    embeddings as one unpadded slice: filler rows never reach a pooled embedding and no sequence
    attends across a slice or filler boundary."""
    enc = Embedder(tiny_xlmr, "mean").eval()
    seqs = _ids(80, 64, 200, seed=5)
    whole = PackedEncoder(enc, 1, attention="grouped")(seqs)
    monkeypatch.setattr(packed_module, "SLICE_TOKENS", 256)
    monkeypatch.setattr(packed_module, "MIN_BUCKET", 64)
    bucketed = PackedEncoder(enc, 1, attention="grouped", buckets=True)
    assert bucketed.buckets == (64, 256)
    plan = plan_packed_slices(as_seq_set(seqs).lens, 256, bucketed.buckets)
    assert len(plan) > 3 and any(s.width > sum(len(x) for x in seqs[s.lo : s.hi]) for s in plan)  # filler used
    torch.testing.assert_close(bucketed(seqs), whole, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(whole, _padded(enc, seqs, 1), rtol=1e-5, atol=1e-5)


def test_filler_pad_tokens_would_change_a_sequence_if_attended(tiny_bert):
    """The filler check above has teeth: appending pad tokens to a sequence (what a leak across
    the boundary would do) changes its embedding."""
    enc = Embedder(tiny_bert).eval()
    seq = _ids(3, 40, 200, seed=6)[1]
    p = PackedEncoder(enc, 0, attention="grouped")
    leak = p([seq + [0] * 8])[0]
    assert (leak - p([seq])[0]).abs().max() > 1e-3


def test_bf16_autocast_error_like_the_padded_path(minilm):
    """bf16: both paths round differently, so each is compared with the fp32 embeddings; the
    packed path's error must be no larger than twice the padded path's own (+ 2e-3 of the
    embedding scale), and every embedding's cosine to fp32 at least 0.999."""
    enc = Embedder(minilm).eval()
    seqs = _ids(24, 512, 30000, seed=7)
    exact = _padded(enc, seqs, 0)
    eager = _padded(enc, seqs, 0, amp=torch.bfloat16)
    got = PackedEncoder(enc, 0, attention="grouped")(seqs, dtype=torch.bfloat16)
    err_eager, err_packed = (eager - exact).abs().max(), (got - exact).abs().max()
    assert err_packed <= 2 * err_eager + 2e-3 * exact.abs().max(), (err_packed, err_eager)
    assert torch.nn.functional.cosine_similarity(got, exact).min() > 0.999


def test_weight_updates_are_seen(tiny_bert):
    """Weights are read at every call: in-place updates (optimiser, EMA) and load_state_dict
    with ``assign=True`` (new Parameter objects) change the packed embeddings exactly as the
    padded path's."""
    import copy

    enc = Embedder(copy.deepcopy(tiny_bert)).eval()
    seqs = _ids(30, 64, 200, seed=8)
    p = PackedEncoder(enc, 0, attention="grouped")
    before = p(seqs)
    with torch.no_grad():
        enc.backbone.encoder.layer[1].attention.self.value.weight.mul_(1.5)
        enc.backbone.encoder.layer[0].output.LayerNorm.bias.add_(0.3)
    after = p(seqs)
    assert (after - before).abs().max() > 1e-3
    torch.testing.assert_close(after, _padded(enc, seqs, 0), rtol=1e-5, atol=1e-5)
    state = {k: v * 0.9 for k, v in enc.state_dict().items()}
    enc.load_state_dict(state, assign=True)
    torch.testing.assert_close(p(seqs), _padded(enc, seqs, 0), rtol=1e-5, atol=1e-5)


def test_compiled_functions_are_traced_once_per_bucket(tiny_bert, monkeypatch):
    """Compiled (a counting backend here), calls of different sizes in one bucketed shape reuse
    the traced functions; a new bucket traces once more; results equal the eager run."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    monkeypatch.setattr(packed_module, "SLICE_TOKENS", 1024)
    monkeypatch.setattr(packed_module, "MIN_BUCKET", 256)
    enc = Embedder(tiny_bert).eval()
    counter = CompileCounter()
    p = PackedEncoder(enc, 0, compile_backend=counter, attention="grouped")
    eager = PackedEncoder(enc, 0, attention="grouped")
    a, b, c = _ids(12, 40, 200, seed=9), _ids(9, 40, 200, seed=10), _ids(150, 64, 200, seed=11)
    widths = [{s.width for s in plan_packed_slices(as_seq_set(x).lens, 1024, p.buckets)} for x in (a, b, c)]
    assert widths == [{256}, {256}, {256, 1024}]
    torch.testing.assert_close(p(a), eager(a), rtol=1e-5, atol=1e-6)
    traced = counter.frame_count
    assert traced == 2  # embed_tokens and layer_tail, at the 256-token bucket
    p(b)  # other lengths, same bucket
    assert counter.frame_count == traced
    torch.testing.assert_close(p(c), eager(c), rtol=1e-5, atol=1e-6)  # a new shape: 1024
    assert counter.frame_count == traced + 2
    torch._dynamo.reset()


def test_plan_packed_slices_covers_everything_within_bounds():
    rng = np.random.default_rng(12)
    buckets = (32, 128, 512)  # 4x apart, as the real ones
    for _ in range(200):
        lens = rng.integers(1, 33, int(rng.integers(1, 80)))  # none over the smallest bucket (512 vs 2 K)
        for b in (None, buckets):
            plan = plan_packed_slices(lens, 512, b)
            assert plan[0].lo == 0 and plan[-1].hi == len(lens)
            assert all(s.hi == t.lo for s, t in zip(plan, plan[1:])) and all(s.lo < s.hi for s in plan)
            tokens = [int(lens[s.lo : s.hi].sum()) for s in plan]
            assert all(t <= 512 for t in tokens)
            if b is None:
                assert [s.width for s in plan] == tokens
            else:
                assert all(s.width in b and s.width >= t for s, t in zip(plan, tokens))
                # padding: < one sequence per slice + the smallest bucket
                assert sum(s.width for s in plan) - sum(tokens) < 32 * len(plan) + buckets[0]


def test_packed_ids_equal_the_padded_rows():
    rng = np.random.default_rng(13)
    lists = [rng.integers(5, 100, int(k)).tolist() for k in rng.integers(0, 9, 40)]
    content = RaggedIds.from_lists(lists)
    with_cls, without = TokenLayout(101, 102, 0, 7, 7, 64), TokenLayout(None, 102, 0, 4, 4, 64)  # 5 and 3 content ids
    for seqs in (IdLists(lists), FramedIds(content, with_cls), FramedIds(content, without)):
        ids, mask = seqs.rows(np.arange(len(seqs)), int(seqs.lens.max()), 0, False)
        assert seqs.packed(7, 31).tolist() == ids[7:31][mask[7:31]].tolist()


def test_concat_takes_ragged_and_plain_parts():
    """RaggedIds.concat of RaggedIds (cut ones too) and plain id lists: their items in order; one
    RaggedIds part comes back as it is, no part gives no items."""
    lists = [[5, 6, 7], [], [8], [9, 10, 11, 12]]
    cut = RaggedIds.from_lists(lists).cut(2)  # shares flat: starts no longer tile it
    both = RaggedIds.concat([cut, [[1, 2], [3]], lists[:1]])
    assert list(both) == [[5, 6], [], [8], [9, 10], [1, 2], [3], [5, 6, 7]]
    one = RaggedIds.concat([[[4]]])
    assert RaggedIds.concat([cut]) is cut and isinstance(one, RaggedIds) and list(one) == [[4]]
    assert len(RaggedIds.concat([])) == 0


def test_mpnet_keeps_a_padded_path_without_host_syncs(monkeypatch):
    """MPNet (all-mpnet-base-v2, algo=mpnet) adds a relative-position bias to its attention scores,
    which the packed kernels cannot: the padded path serves it, with the 4-D additive mask its eager
    attention takes, so transformers never tests ``mask.all()`` (a host sync per call, and one no CUDA
    graph can capture); padded rows still equal each sequence run alone. A tiny random MPNet: the
    real one (an optional install) is tests/rl/test_mpnet.py's."""
    from transformers import MPNetConfig, MPNetModel, masking_utils

    torch.manual_seed(3)
    cfg = MPNetConfig(
        vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=66, relative_attention_num_buckets=32,
    )  # fmt: skip
    enc = Embedder(_randomise(MPNetModel(cfg, add_pooling_layer=False), 4).eval(), "mean", 0.1)
    assert "relative-position bias" in unsupported_reason(enc, False)

    original = masking_utils._ignore_bidirectional_mask_sdpa

    def sync(padding_mask, *args, **kwargs):
        assert padding_mask is None, "transformers built the mask itself, testing mask.all() on the host"
        return original(padding_mask, *args, **kwargs)  # no mask (unpadded rows): nothing to test

    monkeypatch.setattr(masking_utils, "_ignore_bidirectional_mask_sdpa", sync)
    seqs = _ids(12, 64, 200, seed=5)
    got = _padded(enc, seqs, pad=1)
    with torch.no_grad():
        alone = torch.cat([enc(torch.tensor([s]), torch.ones(1, len(s), dtype=torch.long), padded=False) for s in seqs])
    torch.testing.assert_close(got, alone, rtol=1e-5, atol=1e-6)


def test_unsupported_models_keep_the_padded_path(tiny_bert, tiny_xlmr, caplog):
    """Other architectures and left-padded BERT fall back with a log line saying why; a
    left-padded XLM-R (positions from the tokens) is served; dropout in train mode is not."""
    from transformers import DistilBertConfig, DistilBertModel

    from rl.model.fast.encoding import EncodingPath
    from rl.model.fast.switches import SpeedSwitches

    distil = Embedder(DistilBertModel(DistilBertConfig(vocab_size=50, dim=16, n_layers=1, n_heads=2, hidden_dim=32)))
    assert "distilbert" in unsupported_reason(distil, False)
    assert "left padding" in unsupported_reason(Embedder(tiny_bert), True)
    assert unsupported_reason(Embedder(tiny_xlmr), True) is None
    layout = TokenLayout(101, 102, 0, 16, 16, 64)
    path = EncodingPath([distil], SpeedSwitches(), layout, False, CPU, None, 64)
    assert path.describe() == {"packed_encoder": None, "packed_off": "not on a GPU"}
    with caplog.at_level(logging.INFO, logger="rl.model.fast.encoding"):
        path.use_packed([distil], None, attention="grouped")
    assert not path.packed and "packed encoder off: model type 'distilbert'" in caplog.text
    bert = Embedder(tiny_bert)
    path = EncodingPath([bert], SpeedSwitches(), layout, False, CPU, None, 64)
    path.use_packed([bert], None, attention="grouped")
    assert path.describe() == {"packed_encoder": {"attention": "grouped", "compiled": False}}
    bert.train()
    assert not path.packed[bert].serves()  # dropout would be drawn: the padded path runs
    bert.eval()
    assert path.packed[bert].serves()


def test_agent_chunk_sets_and_streamed_haystack_use_the_packed_path(monkeypatch):
    """Through the Q-network: chunk sets of several samples (passage prefix, an empty chunk, a
    chunk cut at max_action_length) and a haystack tokenised on the worker thread while it is
    embedded give the padded path's embeddings when the packed encoder serves them."""
    from envs.env import Episode
    from rl.model.fast import encoding
    from rl.model.fast.switches import SpeedSwitches
    from rl.model.precision import Precision
    from rl.model.qnetwork import QNetwork

    model = ModelKeys(name="offline:minilm", predictor=Predictor(num_layers=2), passage_prefix="passage: ")
    layout = {"max_action_length": 24, "max_action_length_in_memory": 8}
    NO_POSITIONS = PositionSettings("none", 1, "paper", 1)
    qnet = QNetwork(model, layout, CPU, Precision.resolve("fp32", CPU), 64, SpeedSwitches(), NO_POSITIONS, False)
    rng = np.random.default_rng(14)
    words = ["Mary", "went", "to", "the", "kitchen", "garden", "John", "moved", "office", "back"]
    chunks = [" ".join(rng.choice(words, int(k))) + "." for k in rng.integers(1, 12, 30)]
    chunks[3], chunks[7] = "", " ".join(words * 5)  # [CLS] prefix [SEP]; a chunk over the cap
    samples = [{"question": "Where is Mary?", "chunks": chunks[i:]} for i in (0, 11)]
    eps = [Episode(0, s, torch.ones(len(s["chunks"]), dtype=torch.bool)) for s in samples]
    qnet.prepare(eps)
    enc = qnet.action_enc
    enc.eval()
    want = qnet.encoding.chunk_sets(enc, [qnet.inputs.tokens.get(ep) for ep in eps])
    qnet.encoding.use_packed([qnet.state_enc, enc], None, attention="grouped")
    calls = []
    real_call = PackedEncoder.__call__
    monkeypatch.setattr(PackedEncoder, "__call__", lambda self, *a, **k: calls.append(1) or real_call(self, *a, **k))
    got = qnet.encoding.chunk_sets(enc, [qnet.inputs.tokens.get(ep) for ep in eps])
    assert calls, "the packed encoder did not serve the chunk sets"
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    monkeypatch.setattr(encoding, "STREAM_FIRST_SLICE", 4)
    _, streamed = qnet.encoding.tokenize_and_embed(enc, qnet.inputs.tokenizer, chunks, qnet.dim, "passage: ")
    torch.testing.assert_close(streamed, want[0], rtol=1e-5, atol=1e-6)
