"""Rounds 7-8 (experiments/round7, round8) and the GPU learning check (experiments/learning_check): every plan line
composes, each setting is what the round's README says it is, and the committed raw files were made
with their plan lines' settings."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, compose_cfg, read_plan

ROUND = ROOT / "experiments" / "round7"
EXP = ROOT / "experiments"
PLANS = [
    ROUND / "plan_train.txt",
    ROUND / "plan_train2.txt",
    EXP / "learning_check" / "plan_train.txt",
    EXP / "round8" / "alpha_train.txt",
    EXP / "round8" / "iso_train.txt",
]
KEYS = {  # what each setting is said to be: (alpha0, lr ratio, soft target, target networks, target's alpha scale)
    "base": (0.05, 0.0, True, True, 1.0),
    "a01": (0.01, 0.0, True, True, 1.0),
    "r10": (0.05, 0.1, True, True, 1.0),
    "a01r10": (0.01, 0.1, True, True, 1.0),
    "nosoftq": (0.01, 0.0, False, True, 1.0),
    "notarget": (0.01, 0.0, True, False, 1.0),
    "check": (0.05, 0.0, True, True, 1.0),
    "a02": (0.02, 0.0, True, True, 1.0),
    "a03": (0.03, 0.0, True, True, 1.0),
    "isoT": (0.05, 0.0, True, True, 0.2),
    "isoA": (0.01, 0.0, True, True, 5.0),
}


def setting(name: str) -> str:
    return name.split("_", 1)[1].rsplit("_s", 1)[0] if name.startswith("w") else name.rsplit("_s", 1)[0]


def facts(cfg: dict) -> tuple:
    hp = cfg["algo"]["pqn"]["hyperparams"]
    scale = hp.get("target_alpha_scale", 1.0)  # round 7's runs predate the key: the same α
    return (hp["alpha"], cfg["algo"]["scheduler"]["ratio"], hp["soft_target"], hp["use_target_networks"], scale)


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_setting_composes_to_what_it_is_called(plan: Path) -> None:
    common, runs = read_plan(plan)
    seen = set()
    for name, own in runs.items():
        if setting(name) in seen:
            continue  # one composition per setting: the seeds differ only in seed=
        seen.add(setting(name))
        cfg = compose_cfg(common + own)
        assert cfg.envs.task == "qa3_three-supporting-facts" and cfg.steps_count == 2000 and cfg.envs_parallel == 16
        assert facts(cfg) == KEYS[setting(name)], name
    assert all(any(o.startswith("seed=") for o in own) for own in runs.values())


def test_raw_files_were_made_with_their_plan_lines() -> None:
    planned = {name: setting(name) for plan in PLANS[:2] for name in read_plan(plan)[1]}
    found = {}
    with tarfile.open(ROUND / "runs.tgz") as tar:
        for member in tar.getmembers():
            if member.name.endswith("/config.yaml"):
                cfg = yaml.safe_load(tar.extractfile(member).read())
                found[member.name.split("/")[-2]] = facts(cfg)
    assert set(found) == set(planned)
    assert all(found[name] == KEYS[planned[name]] for name in found)
