"""all-mpnet-base-v2's GPU plan (experiments/mpnet): every training line is the MiniLM run it stands
beside (Table 2's h_noft / h_qrag_s1, round 8's a01r8 seed 1) with the encoder changed and nothing
else, and the lease settings name plans that exist and evaluate runs that the plans train."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from tests.conftest import ROOT, compose_cfg, read_plan

EXP = ROOT / "experiments"
PAIRS = [  # (mpnet plan, run, MiniLM plan, run)
    ("mpnet/table2_train.txt", "h_noft", "table2/plan_train.txt", "h_noft"),
    ("mpnet/table2_train.txt", "h_qrag_s1", "table2/plan_train.txt", "h_qrag_s1"),
    ("mpnet/qa3_train.txt", "w1_mpnet_s1", "round8/speed_train.txt", "w1_a01r8_s1"),
]


def resolved(plan: str, run: str) -> dict:
    common, runs = read_plan(EXP / plan)
    cfg = OmegaConf.to_container(compose_cfg(common + runs[run]), resolve=True)
    cfg.pop("hydra", None)
    return cfg


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p[1])
def test_the_encoder_is_the_only_change(pair):
    mine, theirs = resolved(*pair[:2]), resolved(*pair[2:])
    model, minilm = mine["algo"].pop("model"), theirs["algo"].pop("model")
    assert mine == theirs
    assert (model["name"], model["predictor"]["num_layers"]) == (".device/mpnet", 12)
    assert (minilm["name"], minilm["predictor"]["num_layers"]) == ("offline:minilm", 6)
    for key in ("name", "predictor"):
        model.pop(key), minilm.pop(key)
    assert model == minilm  # pooling, normalisation, pool_scale, prefixes: MiniLM's


def test_lease_settings_name_the_plans():
    settings = dict(
        line.split("=", 1) for line in (EXP / "mpnet" / "lease.env").read_text().splitlines() if "=" in line
    )
    train = settings["TRAIN_PLANS"].strip('"').split()
    evals = settings["EVAL_PLANS"].strip('"').split()
    trained = {run for plan in train for run in read_plan(ROOT / plan)[1]}
    assert trained == {"h_noft", "h_qrag_s1", "w1_mpnet_s1"}
    for plan in evals:
        lines = [ln.split() for ln in (ROOT / plan).read_text().splitlines() if ln and not ln.startswith("#")]
        assert lines and {ln[0] for ln in lines} <= trained
