"""all-mpnet-base-v2's GPU plan (experiments/mpnet): every training line is the MiniLM run it stands
beside (Table 2's h_noft / h_qrag_s1, round 8's a01r8 seed 1) with the encoder changed and nothing
else; the lease settings name plans that exist and evaluate runs that the plans train, every
evaluation (the qa3 chains and Table 2's, started by JOBS_START) composes over its run's config and
writes a file of its own, every card is one of the 2-GPU machine's, and the README's calls carry the
parts it counts."""

from __future__ import annotations

import re
import shlex
import tempfile
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import ROOT, compose_cfg, read_plan
from tests.recipes.lease_plans import composed, eval_lines, readme_calls, settings, trained, write_runs, written

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


LEASE = EXP / "mpnet" / "lease.env"
CARDS = {0, 1}  # kind=nvidia-h200-x2
# experiments/table2/table2_evals.sh's four evaluations of a HotpotQA run (greedy and beam, MuSiQue out of domain)
TABLE2_EVALS = (
    [],
    ["eval.planner=beam"],
    ["eval_env=musique", "envs.max_steps=4", "output_dir={run}/ood_musique"],
    ["eval_env=musique", "envs.max_steps=4", "output_dir={run}/ood_musique", "eval.planner=beam"],
)


def test_lease_settings_name_the_plans():
    s = settings(LEASE)
    assert s["RUNS"] == ["runs/mpnet"]
    runs = trained(LEASE)
    assert set(runs) == {"runs/mpnet"}
    assert set(runs["runs/mpnet"]) == {"h_noft", "h_qrag_s1", "w1_mpnet_s1"}
    assert {gpu for *_, gpu in runs["runs/mpnet"].values()} <= CARDS
    lines = eval_lines(LEASE)
    assert lines and {run for _, run, *_ in lines} <= set(runs["runs/mpnet"])
    assert {int(gpu) for *_, gpu in lines} <= CARDS


def table2_jobs() -> dict[str, list[str]]:
    """{run: argv of its evaluation} of the JOBS_START lines: each waits (with a time cap) for the run's
    summary.json, then runs table2_evals.sh for that run alone."""
    out = {}
    for line in settings(LEASE)["JOBS_START"]:
        wait, evals = (shlex.split(part) for part in line.split("&&"))
        run = re.search(r"runs/mpnet/(\w+)/summary\.json", wait[-1]).group(1)
        assert wait[:3] == ["timeout", "1080", "bash"], wait
        out[run] = evals
    return out


def test_table2_jobs_evaluate_each_table2_run_on_its_card():
    jobs = table2_jobs()
    runs = trained(LEASE)["runs/mpnet"]
    assert set(jobs) == {"h_noft", "h_qrag_s1"}
    for run, argv in jobs.items():
        env = dict(w.split("=", 1) for w in argv if "=" in w and not w.startswith("runs/"))
        assert env == {"CUDA_VISIBLE_DEVICES": str(runs[run][2]), "ONLY": run}  # the card that trained it
        assert argv[-3:] == ["bash", "experiments/table2/table2_evals.sh", "runs/mpnet"]
        assert (ROOT / argv[-2]).is_file()
    # the script's loop that gives these runs the four evaluations of TABLE2_EVALS
    assert "for run in h_noft h_qrag_s1 " in (ROOT / "experiments/table2/table2_evals.sh").read_text()


def test_every_evaluation_composes_and_writes_its_own_file():
    """The qa3 chains (launch_evals.sh) and Table 2's four evaluations of each run (table2_evals.sh), composed
    over the run's config as eval_retriever.py composes them: MPNet's weights, distinct output files."""
    runs = trained(LEASE)
    files = []
    with tempfile.TemporaryDirectory() as tmp:
        root = write_runs(Path(tmp), runs)
        for folder, run, ov, _plan, _gpu in eval_lines(LEASE):
            cfg = composed(root, f"{folder}/{run}", ov)
            assert cfg.algo.model.name == ".device/mpnet" and int(cfg.envs.max_steps) == 6
            files.append(written(cfg, root, f"{folder}/{run}"))
        for run in table2_jobs():
            for extra in TABLE2_EVALS:
                ov = [
                    "num_samples=-1",
                    "progress_bar=false",
                    *(o.format(run=f"{root}/runs/mpnet/{run}") for o in extra),
                ]
                cfg = composed(root, f"runs/mpnet/{run}", ov)
                assert cfg.algo.model.name == ".device/mpnet"
                assert cfg.envs.name == ("musique" if "eval_env=musique" in extra else "hotpotqa")
                files.append(written(cfg, root, f"runs/mpnet/{run}"))
    assert len(files) == 4 + 8 and len(set(files)) == len(files), files


def test_the_readme_calls_carry_every_part_once():
    """README.md's calls: setup, the parts calls, start, watch, then eval and pack in one call; the parts they
    carry are 1 ... N, N the count the README gives."""
    text = " ".join((EXP / "mpnet" / "README.md").read_text().split())
    calls = readme_calls(EXP / "mpnet" / "README.md")
    assert "kind=nvidia-h200-x2" in text
    assert all("scripts/lease.sh experiments/mpnet/lease.env " in c for c in calls)
    verbs = [c.split("experiments/mpnet/lease.env ", 1)[1].split()[0] for c in calls]
    assert verbs == ["setup", "parts", "start", "watch", "eval"] and calls[-1].endswith("lease.env pack")
    n = int(re.search(r"of (\d+) parts here", text).group(1))
    assert f"need **{n} parts**" in text and f"{n + 2} calls in all; the {n - 2} that only carry a part" in text
    assert calls[0].endswith("carry .device/whl .device/part-mpnet-1")
    assert f"k = 2 ... {n - 1}: {n - 2} calls" in calls[1] and f"carry .device/part-mpnet-{n}:" in calls[2]
