"""Round 11's lease (experiments/round11/lease.env, a 2-GPU machine): every plan and script it names exists, every
training line composes and passes the training checks, run names are unique, the GPU column is a card of the 2-GPU
machine and no card holds more than 10 runs; the NIAH plan is Table 1's plan at the qa3 recipe's temperatures and
the t_noft lines are experiments/t_and_stop/'s own; the grid runs every NIAH run at every length; every evaluation
names a run the lease trains, composes over that run's config as eval_retriever.py composes it, and writes a file
no other evaluation of the lease (the grid's cells included) writes."""

from __future__ import annotations

import shlex
from collections import Counter
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import ROOT, compose_cfg, load_script, read_plan
from tests.recipes.lease_plans import (
    assert_training_lines_pass,
    assert_wave_fits,
    composed,
    entries,
    eval_lines,
    readme_calls,
    settings,
    trained,
    write_runs,
    written,
)

R11 = ROOT / "experiments" / "round11"
LEASE = R11 / "lease.env"
EXP = ROOT / "experiments"
ISOA = ["algo.pqn.hyperparams.alpha=0.01", "algo.pqn.hyperparams.target_alpha_scale=5.0"]
CARDS = {"0", "1"}
WAVE = 5  # n_s1-n_s3, n_noft, t_noft
NIAH_RUNS = ("n_s1", "n_s2", "n_s3", "n_noft")


def test_settings_name_files_that_exist():
    s = settings(LEASE)
    assert s["RUNS"] == ["runs/round11"]
    for key in ("TRAIN_PLANS", "EVAL_PLANS"):
        assert all(plan.is_file() and plan.parent == R11 for plan, _ in entries(LEASE, key)), key
    for line in s["JOBS_SETUP"] + s["JOBS_EVAL"]:
        for word in shlex.split(line):
            if word.startswith(("scripts/", "experiments/")):
                assert (ROOT / word).is_file(), word
    (setup,) = s["JOBS_SETUP"]  # the 16K-1M test files, their sha256 recorded, the manifest back in the archive
    steps = [shlex.split(part) for part in setup.split("&&")]
    assert [st[1] for st in steps[:3]] == ["scripts/niah_testsets.py"] * 3 and "--write-manifest" in steps[2]
    assert steps[0][-2:] == ["--lengths", "16k"] and "--lengths" not in steps[1]
    assert steps[3] == ["cp", "data/niah/ruler_gpt2/MANIFEST.json", "runs/round11/niah_manifest.json"]
    assert all(int(st[st.index("--jobs") + 1]) <= 24 for st in steps[:2])  # the training runs keep 8 of 32 cores


def test_the_grid_runs_every_niah_run_at_every_length():
    """One JOBS_EVAL line: niah_eval_grid.py over the lease's folder and its four NIAH runs, on cards 0-1, every
    length of Table 1 (4K-1M, 100 samples each: scripts/niah_testsets.py's SAMPLES)."""
    (grid,) = settings(LEASE)["JOBS_EVAL"]
    argv = shlex.split(grid)
    assert argv[:2] == ["$PYTHON", "experiments/niah/niah_eval_grid.py"]
    words = argv[2:]
    opts = {w: words[i + 1] for i, w in enumerate(words) if w.startswith("--")}
    positional = [w for i, w in enumerate(words) if not w.startswith("--") and (i == 0 or words[i - 1][:2] != "--")]
    assert positional == ["runs/round11", *NIAH_RUNS]  # no key=value: the grid's own settings (T = 4, seed 42)
    assert opts["--gpus"] == "0,1" and 1 <= int(opts["--per-gpu"]) <= 10
    assert set(opts) == {"--gpus", "--per-gpu"}  # no --lengths: all of them
    testsets = load_script("niah_testsets")
    assert list(testsets.LENGTHS) == ["4k", "16k", "32k", "128k", "1m"] and set(testsets.SAMPLES.values()) == {100}
    assert set(read_plan(R11 / "niah_train.txt")[1]) == set(NIAH_RUNS)


def test_the_wave_fits_the_machine():
    assert_wave_fits(LEASE, WAVE)


def test_every_training_line_composes_and_passes_the_checks():
    assert_training_lines_pass(LEASE)


def test_niah_plan_is_table1_plan_at_the_new_temperatures():
    """niah_train.txt = experiments/niah/plan_train.txt (runs, overrides and steps kept; each card modulo 2) + isoA's
    two overrides on #@common."""
    old = [ln for ln in (EXP / "niah" / "plan_train.txt").read_text().splitlines() if ln and not ln.startswith("# ")]
    new = [ln for ln in (R11 / "niah_train.txt").read_text().splitlines() if ln and not ln.startswith("# ")]
    assert new[0] == f"{old[0]} {' '.join(ISOA)}" and len(new) == len(old)
    for a, b in zip(old[1:], new[1:]):
        (na, ga, *oa), (nb, gb, *ob) = a.split(), b.split()
        assert (nb, int(gb), ob) == (na, int(ga) % 2, oa), b
    common, runs = read_plan(R11 / "niah_train.txt")
    assert set(runs) == set(NIAH_RUNS)
    for name, own in runs.items():
        cfg = OmegaConf.to_container(compose_cfg(common + own), resolve=True)
        hp = cfg["algo"]["pqn"]["hyperparams"]
        assert (hp["alpha"], hp["target_alpha_scale"], cfg["envs"]["name"], cfg["envs"]["max_steps"]) == (
            0.01,
            5.0,
            "niah",
            4,
        )
        assert cfg["steps_count"] == (0 if name == "n_noft" else 1000)


def test_niah_t8_plan_is_what_its_header_writes():
    """niah_t8_eval.txt's lines are its header's loop: every NIAH run x every subtask, cards dealt in turn."""
    from envs.data.niah_generator import TASKS

    i, want = 0, []
    for r in NIAH_RUNS:
        for t in TASKS:
            want.append(
                f"{r} {i % 2} 100 4k ++envs.data_path=data/niah/ruler_gpt2/{t} envs.task={t} envs.max_steps=8"
                f" seed=42 output_dir=runs/round11/{r}/niah/{t}".split()
            )
            i += 1
    got = [ln.split() for ln in (R11 / "niah_t8_eval.txt").read_text().splitlines() if ln and ln[0] != "#"]
    assert got == want


def test_t_and_stop_lines_are_that_plans_own():
    """The untrained qa3 encoder and its T = 12 chains, as experiments/t_and_stop/ plans them."""
    for mine, theirs in (("tstop_train.txt", "plan_train.txt"), ("tstop_qa3_eval.txt", "plan_eval.txt")):
        lines = [ln for ln in (R11 / mine).read_text().splitlines() if ln and not ln.startswith("# ")]
        assert lines and set(lines) <= set((EXP / "t_and_stop" / theirs).read_text().splitlines()), mine
        assert all(ln.startswith(("#@", "t_noft ")) for ln in lines), mine


@pytest.fixture(scope="module")
def lease_runs(tmp_path_factory) -> Path:
    return write_runs(tmp_path_factory.mktemp("lease"), trained(LEASE))


def test_every_evaluation_composes_and_writes_a_file_of_its_own(lease_runs):
    grid = load_script("niah_eval_grid", "experiments/niah")
    runs = trained(LEASE)
    files = [  # the grid's cells: niah/<task>/eval_seed42_test<len>.jsonl
        f"runs/round11/{r}/niah/{t}/{grid.stem(n)}.jsonl"
        for r in NIAH_RUNS
        for t in grid.TASKS
        for n in grid.testsets.LENGTHS
    ]
    for folder, run, ov, plan, gpu in eval_lines(LEASE):
        assert gpu in CARDS and run in runs[folder], (plan, run, folder)
        cfg = composed(lease_runs, f"{folder}/{run}", ov)
        files.append(written(cfg, lease_runs, f"{folder}/{run}"))
        if plan == "niah_t8_eval.txt":  # into the grid's cell folder, beside its T = 4 records
            task = str(cfg.envs.task)
            assert (int(cfg.envs.max_steps), int(cfg.num_samples), int(cfg.seed)) == (8, 100, 42)
            assert files[-1] == f"runs/round11/{run}/niah/{task}/eval_seed42_test4k_T8.jsonl"
            assert (ROOT / "data" / "niah" / "ruler_gpt2" / task / "test4k.jsonl.gz").is_file()
        else:
            assert plan == "tstop_qa3_eval.txt" and run == "t_noft", plan
            assert int(cfg.envs.max_steps) == 12 and files[-1].startswith("runs/round11/t_noft/eval_seed42_nt")
            assert files[-1].endswith("_T12.jsonl"), files[-1]
    assert len(files) == len(set(files)), [f for f, k in Counter(files).items() if k > 1]
    assert len(files) == 160 + 32 + 3


def test_the_readme_calls_name_this_lease():
    """README.md's calls run this settings file on the 2-GPU kind, every verb once."""
    calls = readme_calls(R11 / "README.md")
    assert "kind=nvidia-h200-x2" in (R11 / "README.md").read_text()
    assert all("scripts/lease.sh experiments/round11/lease.env " in c for c in calls)
    verbs = [c.split("experiments/round11/lease.env ", 1)[1].split()[0] for c in calls]
    assert verbs == ["setup", "parts", "start", "watch", "eval", "pack"]
