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


QA = ROOT / "experiments" / "niah"


def test_the_qa_lease_trains_plan_train_s_own_lines():
    """issue 44 item 4: the RULER QA lease trains seed 1 and the untrained encoder exactly as
    plan_train.txt does (its lines, gpu column included), into the lease's run folder."""
    lines = (QA / "plan_train.txt").read_text().splitlines()
    qa = (QA / "qa_train.txt").read_text().splitlines()
    assert [x for x in qa if not x.startswith("# ")] == [
        x for x in lines if x.startswith("#@common ") or x.split()[:1] in (["n_s1"], ["n_noft"])
    ]
    env = dict(x.split("=", 1) for x in (QA / "qa_lease.env").read_text().splitlines() if x and not x.startswith("#"))
    assert (
        env["TRAIN_PLANS"] == '"experiments/niah/qa_train.txt"'
        and env["EVAL_PLANS"] == '"experiments/niah/qa_eval.txt"'
    )
    assert env["RUNS"] == "runs/niah_qa"


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
