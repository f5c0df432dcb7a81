"""Round 10's lease (experiments/round10/lease.env, a 2-GPU machine): every plan it names exists, every training line
composes and passes the training checks, run names are unique, the GPU column is a card of the 2-GPU machine and no
card holds more than 10 runs; every evaluation names a run the lease trains, composes over that run's config as
eval_retriever.py composes it, and writes a file no other evaluation of the lease writes; the qa3 plans are what
their headers' commands write, and each setting is the recipe at its step size."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import ROOT, compose_cfg, read_plan
from tests.recipes.lease_plans import (
    assert_plan_is_its_command_output,
    assert_seed_plans_rewrite,
    assert_settings_evaluate_one_wave,
    assert_training_lines_pass,
    assert_wave_fits,
    composed,
    eval_lines,
    seed,
    setting,
    trained,
    write_runs,
    written,
)

R10 = ROOT / "experiments" / "round10"
EXP = ROOT / "experiments"
CARDS = {"0", "1"}
LEASE = ("lease.env", "lease_1m.env", "lease_draw44.env", "lease_l128.env")  # the order they ran in
WAVE = 20
STEP_SIZE = {"ctrl": 20, "d100": 100, "d200": 200}  # the qa3 settings: the preset's step size, and the two finer ones
QA3_PLANS = ("qa3", "ctrl")  # seed_plan.py's <out> of each


def trained_all() -> dict[str, dict[str, tuple[list[str], list[str], int]]]:
    """{folder: {run: (#@common, own overrides, gpu)}} over every settings file (only lease.env trains)."""
    out: dict[str, dict[str, tuple[list[str], list[str], int]]] = {}
    for name in LEASE:
        for folder, runs in trained(R10 / name).items():
            assert not set(runs) & set(out.setdefault(folder, {})), folder
            out[folder].update(runs)
    return out


def all_eval_lines() -> list[tuple[str, str, list[str], str]]:
    """(folder, run, overrides, plan) of every chain's evaluation in the four settings files, each on a card of
    the machine."""
    lines = [e for name in LEASE for e in eval_lines(R10 / name)]
    assert all(gpu in CARDS for *_, gpu in lines)
    return [(folder, run, ov, plan) for folder, run, ov, plan, _ in lines]


@pytest.mark.parametrize("name", LEASE)
def test_settings_name_files_that_exist(name):
    assert_settings_evaluate_one_wave(R10 / name, "runs/round10")


def test_the_wave_fits_the_machine():
    assert_wave_fits(R10 / "lease.env", WAVE)


def test_every_training_line_composes_and_passes_the_checks():
    assert_training_lines_pass(R10 / "lease.env")


@pytest.mark.parametrize("out", QA3_PLANS)
def test_qa3_plans_are_what_their_commands_write(out, tmp_path):
    """scripts/seed_plan.py, run as each file's header says, writes these lines (cards dealt as it deals them)."""
    assert_seed_plans_rewrite(R10, out, tmp_path)


def test_draw_plan_is_what_its_command_writes():
    assert_plan_is_its_command_output(R10 / "draw_eval.txt")


def test_qa3_settings_are_the_recipe_at_their_step_size():
    """Every qa3 run is the preset (round 9's isoA: alpha0 0.01, the soft target at 5x, 2 000 steps, E 16) with only
    envs.step_size changed; the control composes exactly what round 9 ran as w1_isoA_s<k>."""
    common9, runs9 = read_plan(EXP / "round9" / "qa3_train.txt")
    runs = {n: v for n, v in trained(R10 / "lease.env")["runs/round10"].items() if n.startswith("w1_")}
    assert Counter(setting(n) for n in runs) == {"ctrl": 4, "d100": 8, "d200": 8}
    for name, (common, own, _) in runs.items():
        cfg = OmegaConf.to_container(compose_cfg(common + own), resolve=True)
        hp = cfg["algo"]["pqn"]["hyperparams"]
        assert (hp["alpha"], hp["target_alpha_scale"], cfg["steps_count"], cfg["envs_parallel"]) == (
            0.01,
            5.0,
            2000,
            16,
        )
        assert (cfg["envs"]["task"], cfg["envs"]["step_size"]) == (
            "qa3_three-supporting-facts",
            STEP_SIZE[setting(name)],
        )
        if setting(name) == "ctrl":
            assert compose_cfg(common + own) == compose_cfg(common9 + runs9[f"w1_isoA_s{seed(name)}"]), name


def test_qa3_evaluations_are_the_proposed_ones():
    """1K and 32K (200 questions) for every qa3 run, a second 32K draw (eval seed 43) for every run, 128K for seeds
    1-4 of each setting (experiments/qa3_32k/README.md's proposal); then, with the lease's time left, 1M (100
    questions) for seeds 1-4 of each setting, a third 32K draw (eval seed 44) and 128K for seeds 5-8 of d100 and
    d200."""
    runs = [n for n in trained(R10 / "lease.env")["runs/round10"] if n.startswith("w1_")]
    got = Counter()
    for folder, run, ov, _plan in all_eval_lines():
        if run in runs:
            es = next((o.split("=")[1] for o in ov if o.startswith("seed=")), "42")
            tokens = next(o.split("=")[1] for o in ov if o.startswith("envs.num_tokens="))
            assert f"num_samples={100 if tokens == '1000000' else 200}" in ov and folder == "runs/round10", (run, ov)
            got[run, tokens, es] += 1
    want = Counter({(r, n, "42"): 1 for r in runs for n in ("1000", "32000")})
    want.update({(r, "32000", "43"): 1 for r in runs})
    want.update({(r, "128000", "42"): 1 for r in runs if seed(r) <= 4 or setting(r) != "ctrl"})
    want.update({(r, "1000000", "42"): 1 for r in runs if seed(r) <= 4})
    want.update({(r, "32000", "44"): 1 for r in runs})
    assert got == want


@pytest.fixture(scope="module")
def lease_runs(tmp_path_factory) -> Path:
    return write_runs(tmp_path_factory.mktemp("lease"), trained_all())


def test_every_evaluation_composes_and_writes_a_file_of_its_own(lease_runs):
    runs = trained_all()
    files: list[str] = []
    for folder, run, ov, plan in all_eval_lines():
        assert run in runs[folder], (plan, run, folder)
        cfg = composed(lease_runs, f"{folder}/{run}", ov)
        files.append(written(cfg, lease_runs, f"{folder}/{run}"))
        if plan in ("qa3_eval.txt", "ctrl_eval.txt", "draw_eval.txt"):  # at the run's own step size, T and seed's name
            assert (int(cfg.envs.step_size), int(cfg.envs.max_steps)) == (STEP_SIZE[setting(run)], 6), files[-1]
            assert files[-1] == f"{folder}/{run}/eval_seed{int(cfg.seed)}_nt{int(cfg.envs.num_tokens)}.jsonl"
    assert len(files) == len(set(files)), [f for f, k in Counter(files).items() if k > 1]
    assert {f"runs/round10/{r}/eval_seed43_nt32000.jsonl" for r in runs["runs/round10"] if r.startswith("w1_")} < set(
        files
    )  # the second draw beside seed 42's file, not over it
