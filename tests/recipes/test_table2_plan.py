"""Table 2 on real HotpotQA / MuSiQue (experiments/table2): every plan line composes to the run it
says, and experiments/table2/report_table2.py recomputes the cells from evaluation records."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import ROOT, compose_cfg, load_script, read_plan

PLAN = ROOT / "experiments" / "table2" / "plan_train.txt"


EXPECTED = {  # run: (T, data folder, steps, envs.length)
    "h_noft": (2, "data/hotpotqa", 0, -1),
    "h_qrag_s1": (2, "data/hotpotqa", 600, -1),
    "h_gen": (2, "data/hotpotqa-generated", 600, -1),
    "m_qrag": (4, "data/musique", 600, -1),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_plan_line_composes_to_its_run(name):
    common, runs = read_plan(PLAN)
    assert sorted(runs) == sorted(EXPECTED)
    cfg = OmegaConf.to_container(compose_cfg(common + runs[name]), resolve=True)
    steps, folder, count, length = EXPECTED[name]
    assert cfg["algo"]["model"]["name"] == "offline:minilm"
    assert (cfg["envs"]["max_steps"], cfg["steps_count"], cfg["envs"]["length"]) == (steps, count, length)
    assert Path(cfg["envs"]["data_path"]).resolve() == (ROOT / folder).resolve()
    assert (cfg["batch_size"], cfg["envs_parallel"], cfg["algo"]["optimizer"]["lr"]) == (64, 16, 5e-5)


def _write(path: Path, pairs: list[tuple[list[int], list[int]]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    """Evaluation records of questions q0, q1, ... (the ids align the seeds' records)."""
    path.write_text(
        "".join(json.dumps({"id": f"q{i}", "sf_idx": g, "pred_idx": p}) + "\n" for i, (g, p) in enumerate(pairs))
    )


def _tables(text: str) -> dict[str, dict[str, list[str]]]:
    """The report's two protocol tables ("Fixed budget T", "Oracle stopping ..."): row cells by method."""
    out: dict[str, dict[str, list[str]]] = {}
    for section in text.split("\n### ")[1:]:
        rows = [line.removesuffix(" |").split(" | ") for line in section.splitlines() if line.startswith("| ")]
        out[section.splitlines()[0].split(" (")[0]] = {r[0][2:]: r[1:] for r in rows}
    return out


def test_report_recomputes_cells(tmp_path):
    """Cells by hand: w/o FT (round 5's name, one run) over two questions, F1 0.5 and 0: the bootstrap
    mean is 0, 0.25 or 0.5 with chances 1/4, 1/2, 1/4, so the 95 % interval is [0, 0.5]. Q-RAG (table2b's
    names, two seeds): seed 1 scores F1 (1, 1), seed 2 (1, 0.5); drawing seed 2 twice and question b
    twice (chance 1/16 > 2.5 %) gives the lowest mean, 0.5, and a mean of 1 has chance 7/16: [0.5, 1]."""
    report = load_script("report_table2", "experiments/table2")
    _write(tmp_path / "h_noft" / "eval_seed42.jsonl", [([0, 1], [0, 2]), ([3, 4], [5, 6])])  # F1 0.5 / 0
    _write(tmp_path / "w1_hqrag_s1" / "eval_seed42.jsonl", [([0, 1], [1, 0]), ([3, 4], [3, 4])])
    _write(tmp_path / "w1_hqrag_s2" / "eval_seed42.jsonl", [([0, 1], [1, 0]), ([3, 4], [3, 9])])
    # MuSiQue, T = 4 with 2 gold: fixed budget F1 2/3 and EM 1, oracle stop (cut after step 2) F1 1
    _write(tmp_path / "w1_hqrag_s1" / "ood_musique" / "eval_seed42.jsonl", [([0, 1], [1, 0, 5, 6])])
    # the curve at 100 questions (summary.json's train_samples): one seed scoring F1 (1, 0.5)
    _write(tmp_path / "w1_hn100_s1" / "eval_seed42.jsonl", [([0, 1], [0, 1]), ([3, 4], [9, 4])])
    (tmp_path / "w1_hn100_s1" / "summary.json").write_text(json.dumps({"train_samples": 100}))
    text = report.build(tmp_path, 42, "table2b")
    fixed, oracle = _tables(text)["Fixed budget T"], _tables(text)["Oracle stopping"]
    noft = fixed["multi-step RAG w/o FT (untrained MiniLM)"]
    assert noft[:5] == ["0.250 [0.000, 0.500]", "0.000 [0.000, 0.000]", "2", "0.73 / 0.54", "-0.480 / -0.540"]
    q = fixed["**Q-RAG** (real HotpotQA training questions)"]
    # EM: seed 1 (1, 1), seed 2 (1, 0): mean 0.75, std 0.354; the lowest mean 0 has chance 1/16
    assert q[:3] == ["0.875 ± 0.177 [0.500, 1.000]", "0.750 ± 0.354 [0.000, 1.000]", "2 × 2"]
    assert q[3:5] == ["0.93 / 0.89", "-0.055 / -0.140"]
    assert q[5:10] == ["0.667 [0.667, 0.667]", "1.000 [1.000, 1.000]", "1", "0.71 / 0.55", "-0.043 / +0.450"]
    # oracle stopping: HotpotQA unchanged (T = 2, two gold), MuSiQue cut after step 2: F1 1, EM still 1
    assert oracle["**Q-RAG** (real HotpotQA training questions)"] == [
        *q[:5],
        "1.000 [1.000, 1.000]",
        "1.000 [1.000, 1.000]",
        "1",
        q[8],
        "+0.290 / +0.450",
    ]
    assert fixed["Plan Q-RAG (beam 4 × 3)"][0] == "—" and fixed["Plan Q-RAG (beam 4 × 3)"][4] == "— / —"
    assert "): +0.625 [" in text and "], met." in text
    # the curve's difference, paired over questions: both questions drawn as b (chance 1/16) with
    # seed 1 of Q-RAG twice gives 0.5 - 1; question a, or seed 2 twice, gives 0: [-0.5, 0]
    curve = {r.split(" | ")[0][2:]: r.split(" | ")[1:] for r in text.splitlines() if r.startswith(("| 100 ", "| all "))}
    assert curve["100"] == ["0.750 [0.500, 1.000]", "0.500 [0.000, 1.000]", "2", "-0.125 [-0.500, +0.000]"] + [
        "-0.250 [-1.000, +0.000] |"
    ]
    assert curve["all"][:3] == q[:3]


OOD = ["eval_env=musique", "envs.max_steps=4"]  # experiments/table2/table2_evals.sh's MuSiQue evaluation


def test_report_reads_the_names_the_evaluation_writes(tmp_path, committed_runs):
    """The MuSiQue files table2_evals.sh writes are named by eval_stem (_musique_T4 on a HotpotQA
    run); the report reads them, and still reads the bare names of the committed round-5 records
    (tests/eval/test_results_rebuild.py: the committed table2.md rebuilds byte for byte)."""
    from rl.run.eval_config import merge_eval_config
    from rl.run.eval_records import eval_stem

    assert 'both "$run" ' + " ".join(OOD) in (ROOT / "experiments" / "table2" / "table2_evals.sh").read_text()
    base = [f"pretrained_path={committed_runs['table2'] / 'h_qrag_s1'}", "progress_bar=false", "device=cpu", *OOD]
    greedy, beam = (eval_stem(merge_eval_config(compose_cfg(base + p, "testing"))) for p in ([], ["eval.planner=beam"]))
    report = load_script("report_table2", "experiments/table2")
    _write(tmp_path / "h_qrag_s1" / "ood_musique" / f"{greedy}.jsonl", [([0, 1], [0, 1, 5, 6])])  # F1 2/3
    _write(tmp_path / "h_qrag_s1" / "ood_musique" / "eval_seed42.jsonl", [([0, 1], [5, 6, 7, 8])])  # shadowed
    _write(tmp_path / "h_qrag_s2" / "ood_musique" / "eval_seed42.jsonl", [([0, 1], [0, 1, 5, 6])])  # round 5's name
    _write(tmp_path / "h_noft" / "ood_musique" / f"{beam}.jsonl", [([0, 1], [0, 5, 6, 7])])  # F1 1/3
    rows = _tables(report.build(tmp_path, 42))["Fixed budget T"]
    assert rows["**Q-RAG** (real HotpotQA training questions)"][5] == "0.667 ± 0.000 [0.667, 0.667]"
    assert rows["Plan Q-RAG w/o FT (beam 4 × 3)"][5] == "0.333 [0.333, 0.333]"


# -- experiments/table2b: three seeds of every trained row and the learning curve (issue 44 item 7) --
T2B = ROOT / "experiments" / "table2b"
T2B_PLANS = ("rows", "curve", "noft")
T2B_EXPECTED = {  # setting: (T, data folder, steps, train_samples, training / validation questions, seeds)
    "hqrag": (2, "data/hotpotqa", 600, -1, (733, 100), 3),
    "hgen": (2, "data/hotpotqa-generated", 600, -1, (400, 100), 3),
    "mqrag": (4, "data/musique", 600, -1, (573, 100), 3),
    "hn100": (2, "data/hotpotqa", 600, 100, (100, 100), 3),
    "hn250": (2, "data/hotpotqa", 600, 250, (250, 100), 3),
    "hnoft": (2, "data/hotpotqa", 0, -1, (733, 100), 1),
}


def _t2b_runs() -> dict[str, tuple[list[str], list[str]]]:
    """{run: (common overrides, own overrides)} of every table2b training plan."""
    out = {}
    for plan in T2B_PLANS:
        common, runs = read_plan(T2B / f"{plan}_train.txt")
        out.update({name: (common, ov) for name, ov in runs.items()})
    return out


def _t2b_evals() -> list[tuple[str, int, list[str]]]:
    """(run, num_samples, overrides as bash hands them to Hydra) of every table2b evaluation line."""
    out = []
    for plan in T2B_PLANS:
        text = (T2B / f"{plan}_eval.txt").read_text()
        assert "#@length_unit none" in text.splitlines()
        for line in text.splitlines():
            if line.strip() and not line.startswith("#"):
                name, _gpu, samples, lengths, *rest = line.split(maxsplit=4)
                assert lengths == "-"
                out.append((name, int(samples), shlex.split(rest[0]) if rest else []))
    return out


def _setting(run: str) -> str:
    return run.split("_")[1]  # w1_<setting>_s<seed>


def test_table2b_plans_are_what_make_plans_writes(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, OUT=str(tmp_path / "t2b"))
    done = subprocess.run(["bash", str(T2B / "make_plans.sh")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for plan in T2B_PLANS:
        for kind in ("train", "eval"):
            made = (
                (tmp_path / f"t2b/{plan}_{kind}.txt").read_text().replace(str(tmp_path / "t2b"), "experiments/table2b")
            )
            assert made == (T2B / f"{plan}_{kind}.txt").read_text(), f"{plan}_{kind}.txt"
    lease = (T2B / "lease.env").read_text()
    for kind in ("TRAIN", "EVAL"):
        plans = " ".join(f"experiments/table2b/{p}_{kind.lower()}.txt" for p in T2B_PLANS)
        assert f'{kind}_PLANS="{plans}"' in lease
    assert "RUNS=runs/table2b" in lease and "MPS=1" in lease


def test_table2b_settings_are_what_the_readme_says():
    runs = _t2b_runs()
    seeds = {s: sorted(int(r.rsplit("_s", 1)[1]) for r in runs if _setting(r) == s) for s in T2B_EXPECTED}
    assert {s: len(k) for s, k in seeds.items()} == {s: e[5] for s, e in T2B_EXPECTED.items()}
    readme = (T2B / "README.md").read_text()
    for s, e in T2B_EXPECTED.items():
        own = " ".join(runs[f"w1_{s}_s1"][1][1:])  # after seed=<k>
        assert runs[f"w1_{s}_s1"][1][0] == "seed=1"
        assert f"| `{s}` | `{own}` | {e[5]} | " in readme, s
        for k in seeds[s]:  # the seeds of a setting differ in their seed alone
            assert runs[f"w1_{s}_s{k}"][1] == [f"seed={k}", *runs[f"w1_{s}_s1"][1][1:]]


@pytest.mark.parametrize("setting", sorted(T2B_EXPECTED))
def test_table2b_training_line_composes_to_its_run(setting):
    """Every table2b line passes the training checks and trains what README's table says, on round 5's
    recipe; model selection sees 100 validation questions (>= 50: issue 44 item 7), none trained on."""
    from envs.data.registry import build_dataset, first_samples
    from rl.run.validate import check_training

    common, own = _t2b_runs()[f"w1_{setting}_s1"]
    assert common == read_plan(PLAN)[0]  # round 5's #@common line
    cfg = compose_cfg(common + own)
    check_training(cfg)
    T, folder, steps, cap, (n_train, n_val), _ = T2B_EXPECTED[setting]
    c = OmegaConf.to_container(cfg, resolve=True)
    assert c["algo"]["model"]["name"] == "offline:minilm" and c["seed"] == 1
    assert (c["envs"]["max_steps"], c["steps_count"], c["train_samples"], c["envs"]["length"]) == (T, steps, cap, -1)
    assert Path(c["envs"]["data_path"]).resolve() == (ROOT / folder).resolve()
    assert (c["batch_size"], c["envs_parallel"], c["algo"]["optimizer"]["lr"], c["eval_episodes"]) == (
        64,
        16,
        5e-5,
        100,
    )
    vf = float(cfg.validation_fraction)
    train = first_samples(build_dataset(cfg.envs, "train", 1, vf), int(cfg.train_samples))
    val = build_dataset(cfg.envs, "validation", 1, vf)
    assert (len(train), len(val)) == (n_train, n_val) and min(n_val, c["eval_episodes"]) >= 50
    assert not {train[i]["id"] for i in range(len(train))} & {val[i]["id"] for i in range(len(val))}


def test_table2b_evaluations_write_what_the_report_reads(tmp_path):
    """Every evaluation line, composed over its run's config as eval_retriever.py composes it, scores
    every real test question at the dataset's T and writes a file the report reads for its setting;
    every file the report reads for a setting has a line writing it."""
    from rl.run.eval_config import merge_eval_config
    from rl.run.eval_records import eval_stem
    from rl.run.run_folder import write_config

    report = load_script("report_table2", "experiments/table2")
    reads: dict[str, set[tuple[str, ...]]] = {}
    for _name, setting, hqa, msq, _ref in report.ROWS:
        reads.setdefault(setting, set()).update({hqa, msq})
    reads.setdefault(report.IN_DOMAIN[1], set()).update({report.GREEDY, report.BEAM})
    for setting, _label in report.CURVE:
        reads.setdefault(setting, set()).add(report.GREEDY)
    runs, written = _t2b_runs(), {}
    for name, samples, ov in _t2b_evals():
        run = tmp_path / name
        if not run.is_dir():
            run.mkdir()
            write_config(run, compose_cfg(runs[name][0] + runs[name][1]))
        cfg = merge_eval_config(compose_cfg([f"pretrained_path={run}", f"num_samples={samples}", *ov], "testing"))
        dataset = "musique" if str(cfg.envs.name) == "musique" else "hotpotqa"
        assert samples == -1 and int(cfg.envs.max_steps) == {"hotpotqa": 2, "musique": 4}[dataset], (name, ov)
        assert Path(cfg.envs.data_path).resolve() == (ROOT / "data" / dataset).resolve(), (name, ov)
        out = Path(str(cfg.output_dir or run)) / f"{eval_stem(cfg)}.jsonl"
        written.setdefault(_setting(name), set()).add(str(out.relative_to(run)))
    assert set(written) == set(T2B_EXPECTED)
    for setting, files in written.items():
        names = {n.format(seed=42) for n in set().union(*reads[setting])}
        assert files <= names, (setting, files - names)
        assert all(files & {n.format(seed=42) for n in t} for t in reads[setting]), setting
