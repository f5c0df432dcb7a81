"""Round 12's lease (experiments/round12/lease.env, a 2-GPU machine): Table 2b's plans as experiments/table2b/lease.env
names them (one copy of them), every training line composes and passes the training checks, the GPU column is a
card of the 2-GPU machine and no card holds more than 10 runs; the beam path-score lines run in two queues a card
that together run each of that card's lines once, validation first; every evaluation (plan chains and beam lines)
names a run the lease trains, composes over that run's config as eval_retriever.py composes it, and writes a file no
other evaluation of the lease writes."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.recipes.lease_plans import (
    assert_training_lines_pass,
    assert_wave_fits,
    beam_lines,
    composed,
    entries,
    eval_lines,
    readme_calls,
    settings,
    trained,
    write_runs,
    written,
)

R12 = ROOT / "experiments" / "round12"
LEASE = R12 / "lease.env"
T2B = ROOT / "experiments" / "table2b" / "lease.env"
CARDS = {"0", "1"}
WAVE = 16


def test_settings_name_files_that_exist():
    s, t2b = settings(LEASE), settings(T2B)
    assert s["RUNS"] == t2b["RUNS"] == ["runs/table2b"] and not s["JOBS_SETUP"]
    assert s["TRAIN_PLANS"] == t2b["TRAIN_PLANS"]  # Table 2b's own plan files, not copies
    assert s["EVAL_PLANS"] == [*t2b["EVAL_PLANS"], "experiments/round12/tstop_mh_eval.txt"]  # NIAH T = 8: round 11
    for key in ("TRAIN_PLANS", "EVAL_PLANS"):
        assert all(plan.is_file() for plan, _ in entries(LEASE, key)), key


def queue(line: str) -> list[str]:
    """The beam lines one JOBS_EVAL line runs, in order: its command with `cat` for the `bash` that runs them."""
    gpu, rest = line.split(" ", 1)
    assert gpu.startswith("CUDA_VISIBLE_DEVICES=") and rest.startswith("bash <("), line
    out = subprocess.run(["bash", "-c", "cat " + rest.removeprefix("bash ")], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_beam_queues_run_each_line_of_their_card_once():
    """Four JOBS_EVAL lines, two a card, each under CUDA_VISIBLE_DEVICES of its card: together they run every beam
    line of that card exactly once, and every queue starts on validation (the score is chosen there)."""
    jobs = settings(LEASE)["JOBS_EVAL"]
    assert len(jobs) == 4 and all("experiments/round12/beam_eval.txt" in ln for ln in jobs)
    lines = [ln for ln in (R12 / "beam_eval.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    for card in CARDS:
        mine = [ln for ln in jobs if ln.startswith(f"CUDA_VISIBLE_DEVICES={card} ")]
        assert len(mine) == 2 and all(f'"s/^{card} //p"' in ln for ln in mine), mine
        queues = [queue(ln) for ln in mine]
        assert sorted(q for qs in queues for q in qs) == sorted(ln.split(" ", 1)[1] for ln in lines if ln[0] == card)
        assert all(q and "envs.test_split=validation" in q[0] for q in queues), card


def test_the_wave_fits_the_machine():
    assert_wave_fits(LEASE, WAVE)


def test_every_training_line_composes_and_passes_the_checks():
    assert_training_lines_pass(LEASE)


@pytest.fixture(scope="module")
def lease_runs(tmp_path_factory) -> Path:
    return write_runs(tmp_path_factory.mktemp("lease"), trained(LEASE))


def test_every_evaluation_composes_and_writes_a_file_of_its_own(lease_runs):
    from envs.data.registry import build_dataset

    runs = trained(LEASE)
    files: list[str] = []
    for folder, run, ov, plan, gpu in eval_lines(LEASE):
        assert gpu in CARDS and run in runs[folder], (plan, run, folder)
        cfg = composed(lease_runs, f"{folder}/{run}", ov)
        files.append(written(cfg, lease_runs, f"{folder}/{run}"))
        if plan == "tstop_mh_eval.txt":  # the longer budget beside the run's own eval_seed42.jsonl
            steps = int(cfg.envs.max_steps)
            assert steps == {"hotpotqa": 5, "musique": 8}[str(cfg.envs.name)], (run, steps)
            assert files[-1] == f"{folder}/{run}/eval_seed42_T{steps}.jsonl" and int(cfg.num_samples) == -1
    chosen, sizes = set(), {}
    for gpu, path, ov in beam_lines(R12 / "beam_eval.txt"):
        folder, run = path.rsplit("/", 1)
        assert gpu in CARDS and run in runs[folder], path
        cfg = composed(lease_runs, path, [*ov, "eval.planner=beam", "overwrite=true"])  # as the script composes
        files.append(written(cfg, lease_runs, path))
        assert files[-1].startswith(f"{path}/beam_") and files[-1].endswith("_beam4x3.jsonl"), files[-1]
        data = "musique" if str(cfg.envs.name) == "musique" else "hotpotqa"
        assert Path(str(cfg.envs.data_path)).resolve() == (ROOT / "data" / data).resolve(), path
        if str(cfg.envs.test_split) == "validation":  # the data's own validation file: what the score is chosen on
            if data not in sizes:
                sizes[data] = len(build_dataset(cfg.envs, "validation", 42, 0.0))
            assert sizes[data] == 100, data
            chosen.add(run)
    assert len(files) == len(set(files)), [f for f, k in Counter(files).items() if k > 1]
    assert len(files) == 34 + 7 + 24
    assert chosen == {p.rsplit("/", 1)[1] for _, p, _ in beam_lines(R12 / "beam_eval.txt")}  # test ones: validated


def test_the_readme_calls_name_this_lease():
    """README.md's calls run this settings file on the 2-GPU kind, every verb once."""
    calls = readme_calls(R12 / "README.md")
    assert "kind=nvidia-h200-x2" in (R12 / "README.md").read_text()
    assert all("scripts/lease.sh experiments/round12/lease.env " in c for c in calls)
    verbs = [c.split("experiments/round12/lease.env ", 1)[1].split()[0] for c in calls]
    assert verbs == ["setup", "parts", "start", "watch", "eval", "pack"]
