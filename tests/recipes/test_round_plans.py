"""The GPU-round launchers (scripts/launch_plan.sh, launch_evals.sh), the offline presets that hold
round 9's recipe (configs/experiment/offline_babilong_qa*.yaml), and the committed rounds' plan lines
against the configs their runs recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from tests.conftest import ROOT, compose_cfg, read_plan

EXP = ROOT / "experiments"


def resolved(overrides: list[str]) -> dict:
    cfg = OmegaConf.to_container(compose_cfg(overrides), resolve=True)
    cfg.pop("hydra", None)
    return cfg


@pytest.mark.parametrize(
    "task, plan, run",
    [
        ("qa1", "tasks_train.txt", "w1_qa1_s1"),
        ("qa2", "tasks_train.txt", "w1_qa2_s1"),
        ("qa3", "qa3_train.txt", "w1_isoA_s1"),
        ("qa4", "tasks_train.txt", "w1_qa4_s1"),
        ("qa5", "tasks_train.txt", "w1_qa5_s1"),
    ],
)
def test_offline_preset_is_the_round9_recipe(task, plan, run):
    """With only a seed, each preset composes round 9's line (isoA, the task's steps, E 16; issue 43)."""
    common, runs = read_plan(EXP / "round9" / plan)
    assert resolved([f"experiment=offline_babilong_{task}", "seed=1"]) == resolved(common + runs[run])


# Every training plan of a committed archive's runs. The launcher's extra overrides name the GPU machine's
# MiniLM folder and turn the progress bar off; the archive holds paths relative to the repository.
RECORDED_PLANS = {
    "round4": ["plan_train.txt"],
    "round5": ["plan_train_table3.txt", "plan_train_sft.txt", "plan_train_generator.txt"],
    "round7": ["plan_train.txt", "plan_train2.txt"],
    "round8": ["alpha_train.txt", "iso_train.txt", "speed_train.txt"],
    "round9": ["qa3_train.txt", "t3_train.txt", "t3b_train.txt", "tasks_train.txt"],
}
LAUNCHER_EXTRA = {"algo.model.name", "logger.progress_bar"}
# round 4 read g_qa3's generated file from a byte-identical copy carried to the GPU machine (its plan says so)
CARRIED = {("round4", "g_qa3"): {"envs.facts_train_path"}}


def flat(node, prefix: str = "") -> dict:
    if isinstance(node, dict):
        return {k: v for key, sub in node.items() for k, v in flat(sub, f"{prefix}{key}.").items()}
    if isinstance(node, str) and node.startswith(str(ROOT)):
        node = os.path.relpath(node, ROOT)
    return {prefix[:-1]: node}


@pytest.mark.parametrize("round_", RECORDED_PLANS)
def test_plan_lines_compose_to_the_recorded_configs(round_):
    """Each committed run's config_resolved.yaml is its plan line composed today, on every key both hold
    (a key added since takes its default): a preset change that would alter what a past line means fails here
    until the plan spells the old value out."""
    lines = {}
    for plan in RECORDED_PLANS[round_]:
        common, runs = read_plan(EXP / round_ / plan)
        lines |= {name: common + own for name, own in runs.items()}
    with tarfile.open(EXP / round_ / "runs.tar.xz") as tar:
        recorded = {
            m.name.split("/")[-2]: flat(yaml.safe_load(tar.extractfile(m).read()))
            for m in tar.getmembers()
            if m.name.endswith("/config_resolved.yaml")
        }
    assert set(recorded) == set(lines)
    for name, want in recorded.items():
        got = flat(resolved(lines[name]))
        keys = want.keys() & got.keys() - LAUNCHER_EXTRA - CARRIED.get((round_, name), set())
        differ = {k: (want[k], got[k]) for k in keys if want[k] != got[k]}
        assert not differ, f"{round_}/{name}: recorded vs composed {differ}"


def wait(pids_file: Path, timeout: float = 240) -> None:
    pids = [int(x) for x in pids_file.read_text().split()]
    end = time.time() + timeout
    while any(_alive(p) for p in pids):
        assert time.time() < end, "launched processes did not finish"
        time.sleep(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_launch_plan_then_evals(tmp_path: Path):
    """One tiny CPU run through launch_plan.sh (common < extra < line precedence, GPU mapping), then
    launch_evals.sh over two lengths; a finished run is skipped when the plan is launched again."""
    plan = tmp_path / "plan.txt"
    plan.write_text(
        "# a comment\n#@common experiment=demo steps_count=3 eval_episodes=4 seed=5\n"
        "tiny 3 steps_count=1 final_eval_episodes=0\n"
    )
    out = tmp_path / "out"
    env = dict(os.environ, PYTHON=sys.executable, TIME_LIMIT="200", THREADS="1", GPUS="cpu0 cpu1")
    res = subprocess.run(
        ["bash", str(ROOT / "scripts" / "launch_plan.sh"), str(plan), str(out), "seed=7", "logger.progress_bar=false"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert "launched 1 runs" in res.stdout
    wait(out / "pids")
    cfg = OmegaConf.load(out / "tiny" / "config.yaml")
    assert (cfg.steps_count, cfg.seed, cfg.eval_episodes) == (1, 7, 4)  # line > extra > common
    assert (out / "tiny" / "summary.json").exists(), (out / "logs" / "tiny.log").read_text()[-2000:]
    again = subprocess.run(
        ["bash", str(ROOT / "scripts" / "launch_plan.sh"), str(plan), str(out)], env=env, capture_output=True, text=True
    )
    assert "skip tiny: finished" in again.stdout

    (out / "pids").unlink()
    evals = tmp_path / "evals.txt"
    evals.write_text("tiny 1 3 1000,2000\nmissing 0 3 10\n")
    res = subprocess.run(
        ["bash", str(ROOT / "scripts" / "launch_evals.sh"), str(evals), str(out), "device=cpu"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0 and "skip missing" in res.stderr
    wait(out / "pids")
    log = next((out / "logs").glob("eval_tiny_*.log")).read_text()
    assert "FAILED" not in log
    for n in (1000, 2000):  # BabiLong's official token budgets by default
        summary = json.loads((out / "tiny" / f"eval_seed42_nt{n}.summary.json").read_text())
        assert summary["settings"]["length"]["num_tokens"] == n, log[-2000:]
    assert not list((out / "tiny").glob("eval_*_ns*"))

    # the reference's sentence counts on request
    (out / "pids").unlink()
    for f in (out / "logs").glob("eval_*.log"):
        f.unlink()
    evals.write_text("tiny 1 3 10\n")
    res = subprocess.run(
        ["bash", str(ROOT / "scripts" / "launch_evals.sh"), str(evals), str(out), "device=cpu"],
        env=dict(env, LENGTH_UNIT="sentences"),
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    wait(out / "pids")
    log = next((out / "logs").glob("eval_tiny_*.log")).read_text()
    summary = json.loads((out / "tiny" / "eval_seed42_ns10.summary.json").read_text())
    assert summary["settings"]["num_sentences"] == 10, log[-2000:]


@pytest.mark.parametrize(
    "plan, unit, expect",
    [
        ("#@length_unit sentences  # rounds 2-3\nx 0 3 50\n", None, "envs.num_sentences=50 "),
        ("#@length_unit sentences\nx 0 3 50\n", "sentences", "envs.num_sentences=50 "),
        ("x 0 3 1000\n", None, "envs.length_unit=tokens envs.num_tokens=1000 "),
        ("#@length_unit split\nx 0 3 1m eval_env=ruler_qa\n", None, "envs.test_split=test1m num_samples=3 "),
        ("#@length_unit tokens\nx 0 3 50\n", "sentences", "error: LENGTH_UNIT=sentences, but"),
        # multi-hop test sets have no length; an interpolation is single-quoted and reaches Hydra as is
        (
            "#@length_unit none\nx 0 -1 - eval_env=musique 'output_dir=${pretrained_path}/ood'\n",
            None,
            "num_samples=-1 progress_bar=false eval_env=musique output_dir=${pretrained_path}/ood\n",
        ),
        ("#@length_unit none\ny 0 3 -\nx 0 3 1000\n", None, "error: "),
        ("x 0 3 -\n", None, "error: "),
    ],
)
def test_eval_plan_length_unit(tmp_path: Path, plan: str, unit: str | None, expect: str):
    """A plan's `#@length_unit` line decides how its lengths are read (rounds 2-3 counted sentences);
    a LENGTH_UNIT contradicting it is refused. The chain's command is captured with a PYTHON that
    only prints its arguments."""
    (tmp_path / "plan.txt").write_text(plan)
    (tmp_path / "out" / "x").mkdir(parents=True)
    (tmp_path / "out" / "x" / "config.yaml").write_text("{}")
    env = {k: v for k, v in os.environ.items() if k != "LENGTH_UNIT"}
    env.update(PYTHON="echo", **({"LENGTH_UNIT": unit} if unit else {}))
    res = subprocess.run(
        ["bash", str(ROOT / "scripts" / "launch_evals.sh"), str(tmp_path / "plan.txt"), str(tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
    )
    if expect.startswith("error"):
        assert res.returncode == 2 and expect in res.stderr
        assert not (tmp_path / "out" / "pids").exists()  # refused before any chain started
        return
    assert res.returncode == 0, res.stderr
    wait(tmp_path / "out" / "pids", timeout=30)
    log = (tmp_path / "out" / "logs" / "eval_x_1.log").read_text()
    assert expect in log and ("length_unit none" not in plan or "envs." not in log)


def test_repro_offline_end_to_end(tmp_path: Path):
    """experiments/round4/repro_offline.sh on a one-run round: train, evaluate, report (CPU, demo settings)."""
    rnd = tmp_path / "round"
    rnd.mkdir()
    (rnd / "plan_train.txt").write_text(
        "#@common experiment=demo steps_count=2 eval_episodes=4\nf_qa1 0 final_eval_episodes=0\n"
    )
    (rnd / "plan_eval.txt").write_text("f_qa1 0 3 1000\n")
    out = tmp_path / "out"
    env = dict(
        os.environ,
        PYTHON=sys.executable,
        ROUND=str(rnd),
        OUT=str(out),
        GPUS="0",
        THREADS="1",
        TIME_LIMIT="200",
        EVAL_EXTRA="device=cpu",
    )
    res = subprocess.run(
        ["bash", str(ROOT / "experiments" / "round4" / "repro_offline.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    lengths = (out / "report" / "lengths.md").read_text()
    assert "| qa1 | samples | 3 | – |" in lengths  # 1K tokens evaluated, 4K not
    assert "official token budgets" in lengths
    # the evaluation's settings.data_sha256 names the real qa1 test file it read
    manifest = json.loads((ROOT / "data" / "babilong" / "babi" / "MANIFEST.json").read_text())
    sha = next(f["sha256"] for f in manifest["files"] if f["file"] == "en-10k/qa1_single-supporting-fact_test.txt.gz")
    assert f"| qa1 | test data sha256 | {sha[:12]} | – |" in lengths
    assert "data/babilong/babi/en-10k/qa1_single-supporting-fact_test.txt.gz" in lengths
    assert not (out / "pids").exists()


def test_round4_plan_lines_compose_and_pass_the_checks():
    """Every training line of the committed round 4 plan still composes and passes the config checks,
    and each ablation differs from Q-RAG's qa3 line only in its ablated key."""
    from rl.run.validate import check_training

    plan = ROOT / "experiments" / "round4" / "plan_train.txt"
    common, runs = read_plan(plan)
    assert len(runs) == 18
    cfgs = {}
    for name, ov in runs.items():
        cfg = compose_cfg(common + ov)
        check_training(cfg)
        cfgs[name] = OmegaConf.to_container(cfg, resolve=True)
    assert Path(cfgs["g_qa3"]["envs"]["facts_train_path"] + ".gz").is_file()  # the shipped generated file
    base = cfgs["t_qrag_s1"]
    for name, key in (("t_nosoftq_s1", "soft_target"), ("t_notarget_s1", "use_target_networks")):
        ablated = cfgs[name]
        assert ablated["algo"]["pqn"]["hyperparams"][key] is False
        ablated["algo"]["pqn"]["hyperparams"][key] = True
        ablated["steps_count"] = ablated["algo"]["scheduler"]["total"] = base["steps_count"]
        assert ablated == base


def test_round5_sft_plan_lines_compose_and_train_the_fixed_loss():
    """The round 5 SFT lines compose, pass the config checks and run the default loss (DESIGN §4.5),
    not round 4's legacy rules, at Q-RAG's 2 000 steps."""
    from rl.run.validate import check_training

    plan = ROOT / "experiments" / "round5" / "plan_train_sft.txt"
    common, runs = read_plan(plan)
    assert sorted(runs) == ["t_sft_s1", "t_sft_s2", "t_sft_s3"]
    for ov in runs.values():
        cfg = compose_cfg(common + ov)
        check_training(cfg)
        assert cfg.algo.objective == "sft" and cfg.steps_count == 2000
        assert not cfg.legacy.sft_binary_loss and not cfg.legacy.sft_stop_at_first_miss


def test_round5_generator_plan_lines_compose_and_differ_from_qrag_only_in_their_data():
    """experiments/round5/plan_train_generator.txt: g_qa3_s* train on the shipped generated qa3
    file, g_mix_qa3_s1 on the real and the generated file as one set; nothing else differs from
    Q-RAG's qa3 line of the same seed."""
    from rl.run.validate import check_training

    common, runs = read_plan(ROOT / "experiments/round5/plan_train_generator.txt")
    qrag_common, qrag = read_plan(ROOT / "experiments/round4/plan_train.txt")
    assert common == qrag_common and set(runs) == {"g_qa3_s1", "g_qa3_s2", "g_qa3_s3"}
    real = ROOT / "data/babilong/babi/en-10k/qa3_three-supporting-facts_train.txt"
    generated = ROOT / "data/babilong/babi-generated/en-10k/qa3_three-supporting-facts_train.txt"
    for name, ov in runs.items():
        cfg = compose_cfg(common + ov)
        check_training(cfg)
        got = OmegaConf.to_container(cfg, resolve=True)
        base = OmegaConf.to_container(compose_cfg(common + qrag[f"t_qrag_s{name[-1]}"]), resolve=True)
        facts = got["envs"].pop("facts_train_path")
        assert facts == ([str(real), str(generated)] if name.startswith("g_mix") else str(generated))
        base["envs"].pop("facts_train_path")
        assert got == base
