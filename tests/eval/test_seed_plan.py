"""scripts/seed_plan.py: settings x seeds dealt evenly over the cards, in plan files the launchers read."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import load_script, read_plan


def test_plans_deal_every_setting_evenly(tmp_path: Path) -> None:
    mod = load_script("seed_plan")
    out = tmp_path / "r8" / "plan"
    common = "experiment=offline_babilong_qa3 steps_count=2000"
    mod.main(
        [
            str(out),
            "--gpus",
            "4",
            "--seeds",
            "1-4,9",
            "--wave",
            "3",
            "--common",
            common,
            "--last",
            "--setting",
            "a02",
            "algo.pqn.hyperparams.alpha=0.02",
            "--setting",
            "base",
            "",
        ]
    )
    got_common, runs = read_plan(Path(f"{out}_train.txt"))
    assert got_common == common.split()
    assert set(runs) == {f"w3_{s}_s{k}" for s in ("a02", "base") for k in (1, 2, 3, 4, 9)}
    assert runs["w3_a02_s9"] == ["seed=9", "algo.pqn.hyperparams.alpha=0.02"] and runs["w3_base_s2"] == ["seed=2"]
    gpus = {
        line.split()[0]: int(line.split()[1])
        for line in Path(f"{out}_train.txt").read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert sorted(Counter(gpus.values()).values()) == [2, 2, 3, 3]  # 10 runs on 4 cards
    for k in (1, 2, 3, 4, 9):  # one seed's settings never share a card
        assert gpus[f"w3_a02_s{k}"] != gpus[f"w3_base_s{k}"]
    per_card = Counter((g, n.split("_")[1]) for n, g in gpus.items())
    assert all(per_card[(g, s)] >= 1 for g in range(4) for s in ("a02", "base"))  # every card holds both
    evals = [line.split() for line in Path(f"{out}_eval.txt").read_text().splitlines() if not line.startswith("#")]
    assert "#@length_unit tokens" in Path(f"{out}_eval.txt").read_text()
    assert len(evals) == 20 and all(e[2:4] == ["200", "1000,32000"] for e in evals)
    assert sum(e[4:] == ["use_last=true"] for e in evals) == 10


def test_evaluations_without_lengths(tmp_path: Path) -> None:
    """--eval: each run of a setting gets one chain per evaluation of its setting, `-` for lengths
    under `#@length_unit none` (scripts/launch_evals.sh), dealt over the cards in turn."""
    mod = load_script("seed_plan")
    out = tmp_path / "t2" / "rows"
    ood = "eval_env=musique 'output_dir=${pretrained_path}/ood'"
    mod.main(
        [str(out), "--gpus", "4", "--seeds", "1-2", "--samples", "-1", "--setting", "h", "experiment=paper_hotpotqa"]
        + ["--setting", "m", "experiment=paper_musique", "--eval", "h", "", "--eval", "h", ood, "--eval", "m", ""]
    )
    text = Path(f"{out}_eval.txt").read_text().splitlines()
    assert text[1:2] == ["#@length_unit none"] and text[0].startswith("# made by: python scripts/seed_plan.py")
    lines = [line.split(maxsplit=4) for line in text[2:]]
    assert [(n, g) for n, g, *_ in lines] == [
        ("w1_h_s1", "0"), ("w1_h_s1", "1"), ("w1_m_s1", "2"), ("w1_h_s2", "3"), ("w1_h_s2", "0"), ("w1_m_s2", "1")
    ]  # fmt: skip
    assert all(line[2:4] == ["-1", "-"] for line in lines)
    assert [line[4:] for line in lines] == [[], [ood], [], [], [ood], []]


@pytest.mark.parametrize(
    "evals, message",
    [
        (["--eval", "h", ""], "one or more for every setting"),
        (["--eval", "h", "", "--eval", "m", "", "--eval", "x", ""], "none for another"),
        (["--eval", "h", "", "--eval", "m", "", "--lengths", "1000"], "no --lengths"),
    ],
)
def test_evaluation_refusals(tmp_path: Path, evals: list[str], message: str) -> None:
    mod = load_script("seed_plan")
    with pytest.raises(ValueError, match=message):
        mod.main([str(tmp_path / "p"), "--setting", "h", "", "--setting", "m", "", *evals])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--seeds", "3-x"], "use 1-8"),
        (["--seeds", "1,1"], "one twice"),
        (["--setting", "a_b", ""], "letters and digits"),
        (["--setting", "x", "", "--setting", "x", ""], "each once"),
        (["--gpus", "0", "--setting", "x", ""], "at least 1"),
    ],
)
def test_refusals(tmp_path: Path, args: list[str], message: str) -> None:
    mod = load_script("seed_plan")
    if "--setting" not in args:
        args = [*args, "--setting", "x", ""]
    with pytest.raises(ValueError, match=message):
        mod.main([str(tmp_path / "p"), *args])
