"""Rounds 7-9 (experiments/round7, round8, round9) and the GPU learning check (experiments/learning_check): every
plan line composes, each setting is what the round's README says it is, and the committed raw files were made
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
    EXP / "round8" / "speed_train.txt",
    EXP / "round9" / "qa3_train.txt",
    EXP / "round9" / "t3_train.txt",
]
KEYS = {  # what each setting is said to be: (alpha0, lr ratio, soft target, target networks, target's alpha scale)
    "base": (0.05, 0.0, True, True, 1.0),
    "a01": (0.01, 0.0, True, True, 1.0),
    "r10": (0.05, 0.1, True, True, 1.0),
    "a01r10": (0.01, 0.1, True, True, 1.0),
    "nosoftq": (0.01, 0.0, False, True, 1.0),
    "notarget": (0.01, 0.0, True, False, 1.0),
    "check": (0.01, 0.0, True, True, 5.0),  # the qa3 preset: round 9's isoA
    "a02": (0.02, 0.0, True, True, 1.0),
    "a03": (0.03, 0.0, True, True, 1.0),
    "isoT": (0.05, 0.0, True, True, 0.2),
    "isoA": (0.01, 0.0, True, True, 5.0),
    "a01r8": (0.01, 0.0, True, True, 1.0),
    "a01slow": (0.01, 0.0, True, True, 1.0),
}
SPEED = ("packed_encoder", "packed_compile", "fused_adamw")


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
        assert all(cfg.speed[k] is (setting(name) != "a01slow") for k in SPEED), name
    assert all(any(o.startswith("seed=") for o in own) for own in runs.values())


@pytest.mark.parametrize("round_, plans", [("round7", PLANS[:2]), ("round8", PLANS[3:6])])
def test_raw_files_were_made_with_their_plan_lines(round_: str, plans: list[Path]) -> None:
    planned = {name: setting(name) for plan in plans for name in read_plan(plan)[1]}
    found = {}
    with tarfile.open(EXP / round_ / "runs.tar.xz") as tar:
        for member in tar.getmembers():
            if member.name.endswith("/config.yaml") and member.name.count("/") in (1, 2):  # [wave/]run/config.yaml
                cfg = yaml.safe_load(tar.extractfile(member).read())
                found[member.name.split("/")[-2]] = (facts(cfg), tuple(cfg["speed"][k] for k in SPEED))
    assert set(found) == set(planned)
    for name, (got, speed) in found.items():
        assert got == KEYS[planned[name]] and speed == (planned[name] != "a01slow",) * 3, name


def test_round9_other_plans_compose() -> None:
    """Table 3's w/o Soft-Q, w/o Target, SFT and w/o FT, and qa1/qa2/qa4/qa5 at the isoA recipe (their round-4 steps)."""
    common, runs = read_plan(EXP / "round9" / "t3b_train.txt")
    for name in ("w1_nosoftq_s1", "w1_notarget_s1", "w1_sft_s1", "w1_noft_s1"):
        cfg = compose_cfg(common + runs[name])
        assert cfg.envs.task == "qa3_three-supporting-facts" and cfg.steps_count == (0 if "noft" in name else 2000)
        if "notarget" in name:
            assert facts(cfg) == (0.01, 0.0, True, False, 5.0)
        if "nosoftq" in name:
            assert facts(cfg) == KEYS["nosoftq"]
        if "sft" in name:
            assert cfg.algo.objective == "sft"
    common, runs = read_plan(EXP / "round9" / "tasks_train.txt")
    steps = {"qa1": 500, "qa2": 600, "qa4": 600, "qa5": 600}
    for name, own in runs.items():
        cfg = compose_cfg(common + own)
        task = setting(name)
        assert cfg.envs.task.startswith(task + "_") and cfg.steps_count == steps[task], name
        assert facts(cfg)[0] == 0.01 and facts(cfg)[4] == 5.0, name
