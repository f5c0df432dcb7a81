"""State splicing and pooling on the real offline tokenizer/model (all-MiniLM-L6-v2)."""

import numpy as np
import pytest
import torch

from rl.model.embedder import Embedder, load_backbone, load_tokenizer
from rl.model.model_keys import ModelKeys
from rl.model.tokens.layout import TokenLayout, token_layout
from rl.model.tokens.ragged import FramedIds, RaggedIds
from rl.model.tokens.splice import action_ids, state_ids
from rl.model.tokens.tokenize import SampleTokens, tokenize_sample

MODEL = ModelKeys(name="offline:minilm")


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(MODEL)


def test_state_is_spliced_per_segment(tok):
    layout = token_layout(tok, action_cap=16, memory_cap=8, state_cap=None, model_max=512)
    chunks = ["Mary went to the kitchen.", "a chunk with a literal [SEP] inside it and more words", "short"]
    st = tokenize_sample(tok, "Where is Mary?", chunks, layout)
    ids, truncated = state_ids(st, [2, 1], layout, layout.memory_content)
    cls, sep = tok.cls_token_id, tok.sep_token_id
    q = tok("Where is Mary?", add_special_tokens=False)["input_ids"][:6]
    c1 = tok(chunks[1], add_special_tokens=False)["input_ids"][:6]
    c2 = tok(chunks[2], add_special_tokens=False)["input_ids"][:6]
    assert ids == [cls] + q + [sep] + c2 + [sep] + c1 + [sep] and not truncated
    # each segment equals tokenising it alone with a max length of memory_cap, minus the framing
    alone = tok(chunks[1], truncation=True, max_length=8)["input_ids"]
    assert alone[1:-1] == c1
    assert action_ids(st, 1, layout) == tok(chunks[1], truncation=True, max_length=16)["input_ids"]


def test_whole_state_cap(tok):
    layout = token_layout(tok, 64, 64, state_cap=20, model_max=512)
    st = tokenize_sample(tok, "q", ["word " * 30, "more " * 30], layout)
    ids, truncated = state_ids(st, [0, 1], layout, layout.memory_content)
    assert truncated and len(ids) == 20 and ids[-1] == tok.sep_token_id


@pytest.mark.parametrize(("bos", "n"), [(101, 2), (None, 1)])
def test_one_action_frame_with_and_without_a_cls_token(bos, n):
    """An action is ``[CLS] c [SEP]``, or ``c [SEP]`` for a tokenizer with neither CLS nor BOS: the
    layout's ``n_special`` tokens, in the content cap, in the ids the encoders read (FramedIds) and
    in splice.action_ids alike."""
    layout = TokenLayout(bos, 102, 0, action_cap=6, memory_cap=8, state_cap=64)
    assert layout.n_special == n and layout.action_content == 6 - n
    chunks = RaggedIds.from_lists([[5, 6, 7, 8, 9, 10, 11], [12], []])
    want = [action_ids(SampleTokens([1, 2], chunks), j, layout) for j in range(3)]
    framed = FramedIds(chunks, layout)
    assert [len(a) for a in want] == framed.lens.tolist() == [6, 1 + n, n]
    ids, mask = framed.rows(np.arange(3), 6, 0, False)
    assert [row[m].tolist() for row, m in zip(ids, mask)] == want


def test_mean_pooling_scaled_and_padding_invariant():
    bb = load_backbone(MODEL)
    emb = Embedder(bb, "mean", 0.1).eval()
    assert bb.config._attn_implementation == "sdpa"  # padded calls take the 4-D boolean mask path
    ids = torch.tensor([[101, 2000, 2003, 102, 0, 0], [101, 2000, 2003, 102, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 0, 0]])
    with torch.no_grad():
        a = emb(ids, mask)
        b = emb(ids[:, :4], mask[:, :4])
        c = emb(ids[:, :4], mask[:, :4], padded=False)
        h = bb(input_ids=ids[:, :4], attention_mask=mask[:, :4]).last_hidden_state
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(b, h.mean(1) / 10, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(c, b, atol=1e-5, rtol=1e-5)
    assert a.shape == (2, 384)


def test_pad_batch_and_bucketed_embedding_keep_order():
    from rl.model.fast.batching import embed_sequences, pad_batch

    seqs = [[5, 6, 7], [8], [9, 10]]
    ids, mask = pad_batch(seqs, 0, torch.device("cpu"))
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0], [9, 10, 0]] and mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]
    ids, mask = pad_batch(seqs, 0, torch.device("cpu"), left=True)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8], [0, 9, 10]] and mask.tolist() == [[1, 1, 1], [0, 0, 1], [0, 1, 1]]

    class Toy(torch.nn.Module):  # embedding = (sum of ids, length): exposes order and padding mistakes
        dim = 2

        def forward(self, ids, mask, padded=True):
            return torch.stack(((ids * mask).sum(1), mask.sum(1)), 1).float()

    rng = torch.Generator().manual_seed(0)
    seqs = [
        torch.randint(1, 50, (int(torch.randint(1, 30, (1,), generator=rng)),), generator=rng).tolist()
        for _ in range(200)
    ]
    want = torch.tensor([[sum(s), len(s)] for s in seqs], dtype=torch.float32)
    got = embed_sequences(Toy(), seqs, 0, torch.device("cpu"), max_batch=16, token_budget=100)
    assert torch.equal(got, want)


def test_text_len_counts_uncut_tokens(tok):
    layout = token_layout(tok, 8, 8, None, 512)
    long = "word " * 40
    st = tokenize_sample(tok, "Where?", [long, "short"], layout)
    full = len(tok(long)["input_ids"]) + len(tok("short")["input_ids"]) + len(tok("Where?")["input_ids"])
    assert st.text_len == full and len(st.chunks[0]) == 6


def test_unreachable_hub_fails_at_once_without_the_clients_retries(monkeypatch, tmp_path):
    """A hub name that is not cached, with the hub unreachable: one quick probe, then a clear
    error; the networked load (about 50 s of retries offline) is never tried."""
    import socket

    from rl.model import embedder as encoders

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for k in ("HF_HUB_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    assert f"127.0.0.1:{port} cannot be reached" in encoders.hub_unreachable()
    calls = []

    class Loader:
        @staticmethod
        def from_pretrained(name, **kw):
            calls.append(kw.get("local_files_only", False))
            raise OSError("not cached" if kw.get("local_files_only") else "network")

    with pytest.raises(encoders.ModelLoadError, match="cannot be reached") as e:
        encoders._load(Loader, "some-org/not-cached")
    assert calls == [True] and "algo=minilm" in str(e.value)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert encoders.hub_unreachable() == "HF_HUB_OFFLINE is set"
