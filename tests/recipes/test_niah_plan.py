"""Table 1's GPU plan (experiments/niah/plan_train.txt): every line composes into the recipe the
plan states, on the committed training mixture."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from envs.data.niah import load_niah
from tests.conftest import ROOT, compose_cfg, read_plan

PLAN = ROOT / "experiments" / "niah" / "plan_train.txt"


def test_each_plan_line_composes_into_the_stated_recipe():
    common, runs = read_plan(PLAN)
    assert set(runs) == {"n_s1", "n_s2", "n_s3", "n_noft"}
    for name, overrides in runs.items():
        cfg = OmegaConf.to_container(compose_cfg(common + overrides), resolve=True)
        assert cfg["algo"]["model"]["name"] == "offline:minilm"
        assert cfg["envs"]["name"] == "niah" and cfg["envs"]["max_steps"] == 4  # the paper's T
        assert (cfg["batch_size"], cfg["envs_parallel"], cfg["eval_split"]) == (64, 16, "validation")
        assert cfg["steps_count"] == (0 if name == "n_noft" else 1000)
        data = Path(cfg["envs"]["data_path"])
        assert data == ROOT / "data" / "niah" / "ruler_gpt2" / "mix8_4k"
    samples = load_niah(data, "train")
    assert len(samples) == 2000 and len(load_niah(data, cfg["envs"]["test_split"])) == 200
