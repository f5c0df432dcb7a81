"""Speed switches (rl/model/fast/) change only the schedule, never the results; the agent owns its caches.

Covers: the length-bucketing planner against a brute-force optimum, bucketed vs reference
embedding, streamed vs one-shot tokenisation, the config parsing of the ``speed`` block (removed
switches of older run folders included), the agent's per-episode caches (ids against the
tokenizer, invalidation, memory), and a learner/evaluation run with every switch on vs
``all_off()``.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import math
import weakref

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from envs.env import Episode, PositionSettings
from rl.model.embedder import load_tokenizer
from rl.model.fast import switches as switches_module
from rl.model.fast.batching import embed_sequences, plan_slices
from rl.model.fast.switches import REMOVED, SpeedSwitches
from rl.model.model_keys import ModelKeys, Predictor
from rl.model.precision import Precision
from rl.model.tokens.layout import token_layout
from rl.model.tokens.tokenize import assemble_tokens, stream_chunk_tokens, tokenize_sample
from tests.conftest import chunk_embeddings

MODEL = ModelKeys(name="offline:minilm")
CPU = torch.device("cpu")


def all_off() -> SpeedSwitches:
    return SpeedSwitches(**{f.name: False for f in dataclasses.fields(SpeedSwitches)})


# -- plan_slices -------------------------------------------------------------------------
def _call_cost(lens, slices, call_cost):
    """What the slices really cost: one launch each plus its rows padded to its longest member."""
    return sum(call_cost + (b - a) * int(lens[b - 1]) for a, b in slices)


def _valid(lens, slices, max_batch, budget):
    return all(b - a <= max_batch and ((b - a) * int(lens[b - 1]) <= budget or b - a == 1) for a, b in slices)


def _segment_cost(lens, cuts, max_batch, budget, call_cost):
    """The planner's model: a segment padded to its max length, split into ceil(rows/per_call) calls."""
    total = 0
    for a, b in zip(cuts[:-1], cuts[1:]):
        w = int(lens[b - 1])
        per_call = max(1, min(max_batch, budget // w))
        total += math.ceil((b - a) / per_call) * call_cost + (b - a) * w
    return total


def _brute(lens, max_batch, budget, call_cost, allowed_cuts):
    """Minimum of the segment model over every subset of ``allowed_cuts`` (interior positions)."""
    n, best = len(lens), None
    for mask in range(1 << len(allowed_cuts)):
        cuts = [0] + [c for i, c in enumerate(allowed_cuts) if mask >> i & 1] + [n]
        c = _segment_cost(lens, cuts, max_batch, budget, call_cost)
        best = c if best is None or c < best else best
    return best


def _random_case(rng):
    n = int(rng.integers(1, 11))
    lens = np.sort(rng.integers(1, int(rng.integers(2, 30)), n))
    return lens, int(rng.integers(1, 8)), int(rng.integers(1, 120)), int(rng.integers(0, 40))


def _check_slices(lens, slices, max_batch, budget):
    assert slices[0][0] == 0 and slices[-1][1] == len(lens)
    assert all(a < b for a, b in slices)
    assert all(slices[i][1] == slices[i + 1][0] for i in range(len(slices) - 1))  # contiguous, in order
    assert _valid(lens, slices, max_batch, budget), slices


def test_plan_slices_is_optimal_without_row_limits():
    """No per-call limit binds: the plan's cost equals the optimum over all contiguous partitions."""
    rng = np.random.default_rng(0)
    for _ in range(400):
        lens, _, _, call_cost = _random_case(rng)
        slices = plan_slices(lens, 100, 10**6, call_cost)
        _check_slices(lens, slices, 100, 10**6)
        best = _brute(lens, 100, 10**6, call_cost, list(range(1, len(lens))))
        assert _call_cost(lens, slices, call_cost) == best, (lens.tolist(), call_cost, slices)


def test_plan_slices_with_row_and_token_limits():
    """With binding limits: valid calls, and the plan is at least as good as the best partition
    cut at length-group boundaries under the planner's own model (ceil(rows/per_call) calls)."""
    rng = np.random.default_rng(1)
    for _ in range(600):
        lens, max_batch, budget, call_cost = _random_case(rng)
        slices = plan_slices(lens, max_batch, budget, call_cost)
        _check_slices(lens, slices, max_batch, budget)
        group_cuts = [i for i in range(1, len(lens)) if lens[i] != lens[i - 1]]
        group_opt = _brute(lens, max_batch, budget, call_cost, group_cuts)
        global_opt = _brute(lens, max_batch, budget, call_cost, list(range(1, len(lens))))
        got = _call_cost(lens, slices, call_cost)
        assert global_opt <= got <= group_opt, (lens.tolist(), max_batch, budget, call_cost, slices)


# -- embed_sequences ---------------------------------------------------------------------
class Toy(torch.nn.Module):
    """Mask-aware, padding-invariant and exact: (Σ id, length, Σ id·position) over real tokens.
    Like the real Embedder, ``padded=False`` ignores the mask, so a call that wrongly claims
    'no padding' gives wrong rows."""

    dim = 3

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[int, int]] = []

    def forward(self, ids, mask, padded=True):
        self.calls.append(tuple(ids.shape))
        m = mask if padded else torch.ones_like(mask)
        pos = (m.cumsum(1) - 1) * m
        return torch.stack(((ids * m).sum(1), m.sum(1), (ids * pos * m).sum(1)), 1).double()


def _want(seqs):
    return torch.tensor([[sum(s), len(s), sum(i * x for i, x in enumerate(s))] for s in seqs], dtype=torch.float32)


@pytest.mark.parametrize("left", [False, True])
def test_embed_sequences_bucketed_equals_reference(left):
    rng = np.random.default_rng(2)
    seqs = [rng.integers(1, 50, int(rng.integers(1, 25))).tolist() for _ in range(157)]
    seqs += [[7] * 5] * 6  # a run of equal lengths (an unpadded call)
    want = _want(seqs)
    toy = Toy()
    bucketed = embed_sequences(toy, seqs, 0, CPU, max_batch=16, left=left, bucket=True, token_budget=120)
    assert all(r <= 16 and (r * w <= 120 or r == 1) for r, w in toy.calls)
    assert len({w for _, w in toy.calls}) > 1  # several widths: bucketing really happened
    ref = embed_sequences(Toy(), seqs, 0, CPU, max_batch=16, left=left, bucket=False)
    toy_pad = Toy()
    padded = embed_sequences(toy_pad, seqs, 0, CPU, max_batch=16, left=left, bucket=False, pad_to=40)
    assert {w for _, w in toy_pad.calls} == {40}
    assert bucketed.dtype == torch.float32
    for got in (bucketed, ref, padded):
        assert torch.equal(got, want)
    for bucket in (True, False):  # out= a slice of a bigger tensor: written in place, nothing else touched
        big = torch.full((len(seqs) + 7, Toy.dim), float("nan"))
        ret = embed_sequences(
            Toy(),
            seqs,
            0,
            CPU,
            max_batch=16,
            left=left,
            bucket=bucket,
            token_budget=120,
            pad_to=None if bucket else 30,
            out=big[3 : 3 + len(seqs)],
        )
        assert ret.data_ptr() == big[3].data_ptr()
        assert torch.equal(big[3 : 3 + len(seqs)], want)
        assert torch.isnan(big[:3]).all() and torch.isnan(big[3 + len(seqs) :]).all()


# -- streamed tokenisation -----------------------------------------------------------------
@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(MODEL)


def test_streamed_tokens_equal_one_shot(tok):
    layout = token_layout(tok, action_cap=12, memory_cap=8, state_cap=None, model_max=512)
    cut = max(layout.action_content, layout.memory_content)
    rng = np.random.default_rng(3)
    words = "Mary John went to the kitchen garden office hallway bathroom moved journeyed back".split()
    chunks = [" ".join(rng.choice(words, int(rng.integers(1, 14)))) + "." for _ in range(41)]
    chunks[5] = ""  # an empty chunk
    q, qp, pp = "Where is Mary?", "query: ", "passage: "
    parts = list(stream_chunk_tokens(tok, chunks, layout.content_cut, pp, first=3, largest=8, ahead=True))
    assert [p[0] for p in parts] == [0, 3, 9, 17, 25, 33]  # doubling slices, capped at `largest`
    streamed = assemble_tokens(tok, q, parts, layout, qp)
    one_shot = tokenize_sample(tok, q, chunks, layout, qp, pp)
    for a in (streamed, one_shot):
        assert a.question == tok(qp + q, add_special_tokens=False)["input_ids"][:cut]
        assert a.chunks == [tok(c, add_special_tokens=False)["input_ids"][:cut] for c in chunks]
        assert a.action_chunks == [tok(pp + c, add_special_tokens=False)["input_ids"][:cut] for c in chunks]
        assert a.text_len == len(tok(qp + q)["input_ids"]) + sum(len(tok(c)["input_ids"]) for c in chunks)
    assert any(len(tok(c, add_special_tokens=False)["input_ids"]) > cut for c in chunks)  # the cut matters
    no_prefix = assemble_tokens(
        tok, q, list(stream_chunk_tokens(tok, chunks, layout.content_cut, "", first=2, largest=4)), layout
    )
    assert no_prefix.action_chunks is no_prefix.chunks and no_prefix.chunks == one_shot.chunks


# -- SpeedSwitches.from_run_cfg ---------------------------------------------------------------
def test_speed_switches_from_run_cfg():
    from tests.conftest import compose_cfg

    default = SpeedSwitches()
    assert default.as_dict() == {
        "chunk_cache": True,
        "length_bucketing": True,
        "overlap_tokenization": True,
        "cuda_graphs": True,
        "compile": False,
        "packed_encoder": True,
        "packed_compile": True,
        "fused_adamw": True,
    }
    assert SpeedSwitches.from_run_cfg(None) == default
    assert SpeedSwitches.from_run_cfg(OmegaConf.create({})) == default
    assert SpeedSwitches.from_run_cfg(OmegaConf.create({"speed": None})) == default
    assert SpeedSwitches.from_run_cfg(compose_cfg(["experiment=demo"])) == default  # training.yaml = the defaults
    nulls = OmegaConf.create({"speed": {f.name: None for f in dataclasses.fields(SpeedSwitches)}})
    assert SpeedSwitches.from_run_cfg(nulls) == default
    some = SpeedSwitches.from_run_cfg(
        OmegaConf.create({"speed": {"chunk_cache": False, "length_bucketing": None, "compile": True}})
    )
    assert some == dataclasses.replace(default, chunk_cache=False, compile=True)
    with pytest.raises(ValueError, match="chunk_cahce"):
        SpeedSwitches.from_run_cfg(OmegaConf.create({"speed": {"chunk_cahce": False}}))
    assert SpeedSwitches.from_run_cfg(OmegaConf.create({"compile_encoders": True})).compile
    assert SpeedSwitches.from_run_cfg(OmegaConf.create({"compile_encoders": True, "speed": {"compile": None}})).compile
    assert not SpeedSwitches.from_run_cfg(
        OmegaConf.create({"compile_encoders": True, "speed": {"compile": False}})
    ).compile
    assert not SpeedSwitches.from_run_cfg(OmegaConf.create({"compile_encoders": False})).compile
    off = all_off()
    assert not any(off.as_dict().values()) and set(off.as_dict()) == set(default.as_dict())


def test_removed_switches_are_ignored_with_one_warning(monkeypatch, caplog):
    """A run folder of an older version lists the five removed switches (any value): it loads,
    they change nothing, one warning per process; an unknown name is still refused."""
    monkeypatch.setattr(switches_module, "_warned", False)
    assert set(REMOVED) == {"token_cache", "batched_targets", "batch_envs", "single_encoder_eval", "pinned_transfers"}
    assert not set(REMOVED) & set(SpeedSwitches().as_dict())
    old = {"speed": {**{k: False for k in REMOVED}, "chunk_cache": False}}
    with caplog.at_level(logging.WARNING, logger="rl.model.fast.switches"):
        assert SpeedSwitches.from_run_cfg(OmegaConf.create(old)) == dataclasses.replace(
            SpeedSwitches(), chunk_cache=False
        )
        assert SpeedSwitches.from_run_cfg(OmegaConf.create({"speed": {k: True for k in REMOVED}})) == SpeedSwitches()
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and all(k in warnings[0] for k in REMOVED), warnings
    with pytest.raises(ValueError, match=r"unknown speed switch\(es\) \['batch_env'\]"):
        SpeedSwitches.from_run_cfg(OmegaConf.create({"speed": {"batch_env": True, "token_cache": True}}))


def test_speed_block_through_the_eval_merge(tmp_path):
    """testing.yaml's all-null block keeps the run's switches; the command line overrides them;
    a run folder from before the block (top-level compile_encoders) gets the defaults + compile;
    one with the removed switches loads and evaluates with the rest."""
    from rl.run.eval_config import merge_eval_config
    from tests.eval.conftest import TRAIN_OVERRIDES, eval_cfg, write_run_config

    run_dir = tmp_path / "run"
    write_run_config(run_dir, TRAIN_OVERRIDES + ["speed.chunk_cache=false", "speed.compile=true"])
    merged = merge_eval_config(eval_cfg(run_dir))
    assert SpeedSwitches.from_run_cfg(merged) == dataclasses.replace(SpeedSwitches(), chunk_cache=False, compile=True)
    merged = merge_eval_config(eval_cfg(run_dir, "speed.length_bucketing=false", "speed.compile=false"))
    assert SpeedSwitches.from_run_cfg(merged) == dataclasses.replace(
        SpeedSwitches(), chunk_cache=False, length_bucketing=False
    )
    old = OmegaConf.load(run_dir / "config.yaml")
    del old["speed"]
    old.compile_encoders = True
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(old))
    merged = merge_eval_config(eval_cfg(run_dir))
    assert SpeedSwitches.from_run_cfg(merged) == dataclasses.replace(SpeedSwitches(), compile=True)
    old.speed = {"token_cache": True, "batch_envs": False, "pinned_transfers": True, "chunk_cache": False}
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(old))
    merged = merge_eval_config(eval_cfg(run_dir))
    assert SpeedSwitches.from_run_cfg(merged) == dataclasses.replace(SpeedSwitches(), chunk_cache=False, compile=True)


# -- the agent's caches ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_qnet():
    from rl.model.qnetwork import QNetwork

    model = ModelKeys(
        name="offline:minilm", predictor=Predictor(num_layers=1), query_prefix="query: ", passage_prefix="passage: "
    )
    layout = {
        "max_action_length": 12,
        "max_action_length_in_memory": 8,
        "eval_max_action_length_in_memory": 6,
        "max_state_length": 40,
    }
    return QNetwork(model, layout, CPU, Precision.resolve("fp32", CPU), 64, SpeedSwitches(), NO_POSITIONS, False)


NO_POSITIONS = PositionSettings("none", 1, "paper", 1)

SAMPLE = {
    "id": "s0",
    "question": "Where is Mary after she went to the garden?",
    "chunks": [
        "Mary went to the kitchen.",
        "John moved to the hallway and then went back to the office before journeying to the garden again.",
        "",
        "Sandra journeyed to the bathroom.",
        "Mary travelled to the garden.",
    ],
}


def _episode(sample=SAMPLE):
    return Episode(0, dict(sample), torch.ones(len(sample["chunks"]), dtype=torch.bool))


def test_agent_tokens_match_the_tokenizer(small_qnet):
    """State and action ids spliced from the agent's cached ids equal those built from the
    tokenizer's own output, text by text (the reference re-tokenises every state)."""
    qnet, tok = small_qnet, small_qnet.inputs.tokenizer
    cls, sep = tok.cls_token_id, tok.sep_token_id
    ids = lambda text, cut: tok(text, add_special_tokens=False)["input_ids"][:cut]  # noqa: E731
    ep = _episode()
    qnet.prepare([ep])
    tokens = qnet.inputs.tokens.get(ep)
    qnet.prepare([ep])
    assert qnet.inputs.tokens.get(ep) is tokens  # tokenised once per episode
    assert tokens.action_chunks != tokens.chunks  # the passage prefix is in the action ids
    for sel in ([], [1], [3, 0], [4, 1, 2], [0, 1, 2, 3, 4]):
        for sort in (False, True):
            qnet.inputs.sort_by_index = sort  # bound at construction; both orders checked on one network
            for evaluation, mem in ((False, 6), (True, 4)):  # memory caps 8 and 6, minus [CLS] [SEP]
                order = sorted(sel) if sort else sel
                want = [cls] + ids("query: " + SAMPLE["question"], mem) + [sep]
                for j in order:
                    want += ids(SAMPLE["chunks"][j], mem) + [sep]
                if len(want) > 40:
                    want = want[:39] + [sep]
                assert qnet.inputs.state_ids(ep, evaluation, selected=sel) == want, (sel, sort, evaluation)
    for j, chunk in enumerate(SAMPLE["chunks"]):
        assert qnet.inputs.action_ids(ep, j) == [cls] + ids("passage: " + chunk, 10) + [sep]
    want_len = len(tok("query: " + SAMPLE["question"])["input_ids"]) + sum(
        len(tok(c)["input_ids"]) for c in SAMPLE["chunks"]
    )
    assert qnet.inputs.text_length(ep) == want_len
    # a haystack cache file without the count: recounted from the ids cut at 10, specials added
    tokens.text_len = None
    try:
        cut = [ids("query: " + SAMPLE["question"], 10), *(ids(c, 10) for c in SAMPLE["chunks"])]
        assert qnet.inputs.text_length(ep) == sum(len(x) + 2 for x in cut) < want_len
    finally:
        tokens.text_len = want_len


def test_agent_caches_are_its_own_and_die_with_the_episode(small_qnet):
    """Tokens and chunk embeddings live in the agent, not on the episode; an episode no longer
    referenced takes its entries with it; embeddings are recomputed when the weights change."""
    qnet = small_qnet
    qnet.inputs.tokens.clear()
    for c in qnet.caches.chunks.values():
        c.clear()
    ep = _episode()
    before = dict(vars(ep))
    qnet.prepare([ep])
    u = chunk_embeddings(qnet, ep, "online", train=False)
    assert u.shape == (len(SAMPLE["chunks"]), qnet.dim)
    assert chunk_embeddings(qnet, ep, "online", train=False) is u  # a hit
    want = qnet._embed(qnet.action_enc, [qnet.inputs.action_ids(ep, j) for j in range(ep.n_chunks)], train=False)
    torch.testing.assert_close(u, want, rtol=1e-5, atol=1e-6)
    qnet.weights_version += 1  # an optimiser step: stale
    assert chunk_embeddings(qnet, ep, "online", train=False) is not u
    chunk_embeddings(qnet, ep, "target", train=False)
    assert vars(ep).keys() == before.keys()  # nothing hung on the environment's object
    assert qnet.inputs.sizes() == {"tokens": 1, "pretokenized": 0}
    assert qnet.caches.sizes() == {"chunks_online": 1, "chunks_target": 1}
    alive = weakref.ref(ep)
    del ep
    gc.collect()
    assert alive() is None  # the caches did not keep the finished episode alive
    assert qnet.inputs.sizes() == {"tokens": 0, "pretokenized": 0}
    assert qnet.caches.sizes() == {"chunks_online": 0, "chunks_target": 0}
    many = [_episode() for _ in range(5)]
    qnet.prepare(many + many[:2], embed=True)  # one pass, duplicates once
    assert len(qnet.caches.chunks["online"]) == 5
    del many
    gc.collect()
    assert qnet.caches.sizes()["chunks_online"] == 0 and qnet.inputs.sizes()["tokens"] == 0


def test_chunk_cache_off_reembeds_every_rollout(small_qnet):
    qnet = small_qnet
    ep = _episode()
    qnet.prepare([ep])
    u = chunk_embeddings(qnet, ep, "online", train=False)
    try:
        qnet.speed = dataclasses.replace(qnet.speed, chunk_cache=False)
        qnet.tick += 1  # a rollout starts (the learner counts them from 1)
        first = chunk_embeddings(qnet, ep, "online", train=False)
        assert first is not u and chunk_embeddings(qnet, ep, "online", train=False) is first  # same rollout
        qnet.tick += 1  # the next rollout
        assert chunk_embeddings(qnet, ep, "online", train=False) is not first
    finally:
        qnet.speed = SpeedSwitches()


def test_streamed_haystack_equals_one_pass(small_qnet, monkeypatch):
    """The large-haystack path (tokenised slice by slice while embedding; GPU only by default,
    forced here at a tiny threshold) gives the agent the same tokens and chunk embeddings."""
    from rl.model.fast import encoding

    qnet = small_qnet
    monkeypatch.setattr(encoding, "STREAM_MIN_CHUNKS", 3)
    monkeypatch.setattr(encoding, "STREAM_FIRST_SLICE", 2)
    monkeypatch.setattr(qnet.encoding, "streaming", True)
    streamed, plain = _episode(), _episode()
    with monkeypatch.context() as m:
        m.setattr(
            type(qnet.inputs), "tokenize", lambda self, sample: pytest.fail("the streamed path tokenised in one go")
        )
        qnet.prepare([streamed], embed=True)  # evaluation's entry: the chunks embedded while tokenised
        u_streamed = chunk_embeddings(qnet, streamed, "online", train=False)
    monkeypatch.setattr(qnet.encoding, "streaming", False)
    qnet.prepare([plain])
    u_plain = chunk_embeddings(qnet, plain, "online", train=False)
    torch.testing.assert_close(u_streamed, u_plain, rtol=1e-5, atol=1e-6)
    a, b = qnet.inputs.tokens.get(streamed), qnet.inputs.tokens.get(plain)
    assert (a.question, a.chunks, a.action_chunks, a.text_len) == (b.question, b.chunks, b.action_chunks, b.text_len)


def test_streamed_and_plain_episodes_of_one_sample_enter_together(small_qnet, monkeypatch):
    """Two episodes of the same sample index in one evaluation group, the first streamed: the second
    is looked up among the streamed ones by identity (Episode's == compares its tensors and fails)."""
    from rl.model.fast import encoding

    qnet = small_qnet
    monkeypatch.setattr(encoding, "STREAM_MIN_CHUNKS", 3)
    monkeypatch.setattr(encoding, "STREAM_FIRST_SLICE", 2)
    monkeypatch.setattr(qnet.encoding, "streaming", True)
    first, second = _episode(), _episode()
    qnet.prepare([first], embed=True)  # streamed: tokens and embeddings cached
    qnet.prepare([first, second], embed=True)  # the second has its own tokens to make
    torch.testing.assert_close(
        chunk_embeddings(qnet, second, "online", train=False), chunk_embeddings(qnet, first, "online", train=False)
    )


def test_adopted_tokens_serve_that_sample_only_while_it_lives(small_qnet):
    """The evaluation haystack cache hands pre-tokenised samples over; they are used for every
    episode over that very sample object and dropped with it."""
    from rl.run.haystack_cache import CachedSample

    qnet = small_qnet
    sample = CachedSample(SAMPLE)
    tokens = qnet.inputs.tokenize(SAMPLE)
    qnet.inputs.adopt_tokens(sample, tokens)
    ep = Episode(0, sample, torch.ones(len(SAMPLE["chunks"]), dtype=torch.bool))
    other = _episode()  # an equal sample, another object: tokenised itself
    qnet.prepare([ep, other])
    assert qnet.inputs.tokens.get(ep) is tokens
    assert qnet.inputs.tokens.get(other) is not tokens
    with pytest.raises(TypeError, match="weakly referenced"):
        qnet.inputs.adopt_tokens(dict(SAMPLE), tokens)
    alive = weakref.ref(sample)
    del sample, ep
    gc.collect()
    assert alive() is None and len(qnet.inputs.pretokenized) == 0


# -- learner and evaluation: all switches on vs all off -------------------------------------------
ALL_OFF = [f"speed.{f.name}=false" for f in dataclasses.fields(SpeedSwitches)]
RUN = [
    "envs.task=qa1_single-supporting-fact",
    "envs.num_sentences=20",
    "envs.max_steps=3",
    "batch_size=8",
    "envs_parallel=2",
    "accumulate_grads=2",
    "learning_start=2",
    "algo.pqn.hyperparams.acting_dropout=false",
    "algo.scheduler.warmup=0",
    "algo.optimizer.lr=1e-3",
    "logger.tensorboard=false",
    "eval_episodes=4",
    "embed_batch_size=16",
]


def _no_dropout(qnet):
    for m in qnet.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0


def test_learner_and_eval_all_on_equals_all_off(tiny_cfg, tmp_path):
    from rl.run.train import Trainer

    trainers = {}
    for name, extra in (("on", []), ("off", ALL_OFF)):
        trainers[name] = Trainer(tiny_cfg(*RUN, *extra, run_dir=tmp_path / name))
        _no_dropout(trainers[name].qnet)
    on, off = trainers["on"], trainers["off"]
    assert on.qnet.speed == SpeedSwitches() and off.qnet.speed == all_off()
    init = {k: v.clone() for k, v in on.qnet.state_dict().items()}
    for t in (on, off):
        t.learner.start_slots()
    logs = {"on": [], "off": []}
    for name, t in trainers.items():
        for _ in range(4):  # 2 optimiser steps (no warm-up): micro-steps 3-4 run on changed weights
            logs[name].append(t.learner.micro_step())
    assert on.learner.counters == off.learner.counters and on.learner.counters.optimizer_steps == 2
    assert on.qnet.tick == 4 and on.qnet.weights_version == 2
    for a, b in zip(logs["on"], logs["off"]):
        assert set(a) == set(b)
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-6), k
    returns_on = on.learner.drain_returns()
    assert returns_on == off.learner.drain_returns()
    assert returns_on  # some episodes ended (returns compared, not vacuous)
    assert [ep.index for ep in on.learner.env.episodes] == [ep.index for ep in off.learner.env.episodes]
    assert [ep.selected for ep in on.learner.env.episodes] == [ep.selected for ep in off.learner.env.episodes]
    sd_on, sd_off = on.qnet.state_dict(), off.qnet.state_dict()
    assert any(not torch.equal(sd_on[k], init[k]) for k in sd_on if k.startswith("state_enc."))  # weights moved
    for k in sd_on:
        torch.testing.assert_close(sd_on[k], sd_off[k], rtol=1e-5, atol=1e-6, msg=k)

    # greedy evaluation of the trained agents, with the run's settings
    idx = on.evals.indices
    _, rec_on = on.evals.evaluate(on.qnet, on.evals.eval_ds, idx, "validation")
    _, rec_off = off.evals.evaluate(off.qnet, off.evals.eval_ds, idx, "validation")
    assert len(rec_on) == len(rec_off) == len(idx) == 4
    for a, b in zip(rec_on, rec_off):
        assert a["id"] == b["id"] and a["pred_idx"] == b["pred_idx"] and a["steps"] == b["steps"] == 3
        assert a["return"] == b["return"]  # text_len: see test_token_cache_off_keeps_text_len
        torch.testing.assert_close(torch.tensor(a["q_values"]), torch.tensor(b["q_values"]), rtol=1e-5, atol=1e-6)
