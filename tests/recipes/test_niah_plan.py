"""Table 1's GPU plan (experiments/niah/plan_train.txt): every line composes into the recipe the
plan states, on the committed training mixture; the RULER QA lease (qa_lease.env) trains that plan's
lines, makes its test sets in a setup job, and its evaluations compose over the runs' configs, each
writing a file of its own, on the card of a one-GPU machine."""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path

from omegaconf import OmegaConf

from envs.data.niah import load_niah
from tests.conftest import ROOT, compose_cfg, read_plan
from tests.recipes.lease_plans import composed, eval_lines, readme_calls, settings, trained, write_runs, written

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


QA = ROOT / "experiments" / "niah"


def test_the_qa_lease_trains_plan_train_s_own_lines():
    """issue 44 item 4: the RULER QA lease trains seed 1 and the untrained encoder exactly as
    plan_train.txt does (its lines, gpu column included), into the lease's run folder."""
    lines = (QA / "plan_train.txt").read_text().splitlines()
    qa = (QA / "qa_train.txt").read_text().splitlines()
    assert [x for x in qa if not x.startswith("# ")] == [
        x for x in lines if x.startswith("#@common ") or x.split()[:1] in (["n_s1"], ["n_noft"])
    ]
    env = settings(QA / "qa_lease.env")
    assert env["TRAIN_PLANS"] == ["experiments/niah/qa_train.txt"]
    assert env["EVAL_PLANS"] == ["experiments/niah/qa_eval.txt"]
    assert env["RUNS"] == ["runs/niah_qa"]


def test_the_qa_eval_plan_reads_every_length_of_both_tasks_for_both_runs():
    """Every (run, task) chain of qa_eval.txt: the five lengths as split names, the task's folder of
    test sets (its 4K file committed), records under the lease's run folder, nothing bash -c would
    expand (launch_evals.sh hands the line to it)."""
    text = (QA / "qa_eval.txt").read_text()
    assert "#@length_unit split" in text
    chains = set()
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        assert "$" not in line
        run, gpu, samples, lengths, *ov = line.split()
        opts = dict(o.split("=", 1) for o in ov)
        task = Path(opts["++envs.data_path"]).name
        assert (gpu, samples, lengths) == ("0", "100", "4k,16k,32k,128k,1m")
        assert opts["eval_env"] == "ruler_qa" and opts["seed"] == "42"
        assert opts["output_dir"] == f"runs/niah_qa/{run}/ruler_qa/{task}"
        assert (ROOT / opts["++envs.data_path"] / "test4k.jsonl.gz").is_file()
        chains.add((run, task))
    assert chains == {(r, t) for r in ("n_s1", "n_noft") for t in ("qa_hotpot", "qa_squad")}


def test_the_qa_setup_job_makes_checks_and_records_the_test_sets():
    """One JOBS_SETUP line: the QA sets 16K first, then the rest, data/squad checked, the 1M sha256 recorded, the
    manifest copied into the run folder (the eval call waits for that copy), on 12 of the 16 cores."""
    s = settings(QA / "qa_lease.env")
    assert not s["JOBS_START"] and not s["JOBS_EVAL"]
    (setup,) = s["JOBS_SETUP"]
    steps = [shlex.split(part) for part in setup.split("&&")]
    assert [st[:2] for st in steps[:4]] == [["$PYTHON", "scripts/niah_testsets.py"]] * 4
    assert steps[0][2:] == ["--tasks", "qa", "--jobs", "12", "--lengths", "16k"] and steps[1][2:] == steps[0][2:6]
    assert steps[2][2:] == ["--tasks", "qa", "--verify"] and steps[3][2:] == ["--write-manifest"]
    assert steps[4] == ["cp", "data/niah/ruler_gpt2/MANIFEST.json", "runs/niah_qa/qa_manifest.json"]
    calls = readme_calls(QA / "README.md")
    (ev,) = [c for c in calls if "qa_lease.env eval" in c]
    assert ev.startswith("if test -f /tmp/qrag/runs/niah_qa/qa_manifest.json; then ")


def test_every_qa_evaluation_composes_and_writes_its_own_file():
    runs = trained(QA / "qa_lease.env")
    assert {gpu for by in runs.values() for *_, gpu in by.values()} == {0, 3}  # GPUS maps 3 to the one card
    files = []
    with tempfile.TemporaryDirectory() as tmp:
        root = write_runs(Path(tmp), runs)
        for folder, run, ov, _plan, gpu in eval_lines(QA / "qa_lease.env"):
            cfg = composed(root, f"{folder}/{run}", ov)
            assert gpu == "0" and cfg.envs.name == "ruler_qa" and int(cfg.envs.max_steps) == 4
            assert cfg.algo.model.name == "offline:minilm"  # lease.sh's start points it at the carried parts
            files.append(written(cfg, root, f"{folder}/{run}"))
    assert len(files) == 4 * 5 and len(set(files)) == len(files)


def test_the_qa_readme_calls_name_this_lease():
    """The README's calls run qa_lease.env on one GPU, every verb once, the three MiniLM parts carried in turn."""
    text = (QA / "README.md").read_text()
    calls = readme_calls(QA / "README.md")
    assert "kind=nvidia-h200`" in text
    assert all("scripts/lease.sh experiments/niah/qa_lease.env " in c for c in calls)
    verbs = [c.split("experiments/niah/qa_lease.env ", 1)[1].split()[0] for c in calls]
    assert verbs == ["setup", "parts", "start", "watch", "eval", "pack"]
    carried = [c.split("# carry ", 1)[1].split(":")[0].split(";")[0] for c in calls if "# carry " in c]
    assert carried == [".device/whl .device/part-minilm-1", ".device/part-minilm-2", ".device/part-minilm-3"]
