"""Table 2 on real HotpotQA / MuSiQue (experiments/table2): every plan line composes to the run it
says, and experiments/table2/report_table2.py recomputes the cells from evaluation records."""

from __future__ import annotations

import json
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
    path.write_text("".join(json.dumps({"sf_idx": g, "pred_idx": p}) + "\n" for g, p in pairs))


def _tables(text: str) -> dict[str, dict[str, list[str]]]:
    """The report's two protocol tables ("Fixed budget T", "Oracle stopping ..."): row cells by method."""
    out: dict[str, dict[str, list[str]]] = {}
    for section in text.split("\n### ")[1:]:
        rows = [line.removesuffix(" |").split(" | ") for line in section.splitlines() if line.startswith("| ")]
        out[section.splitlines()[0].split(" (")[0]] = {r[0][2:]: r[1:] for r in rows}
    return out


def test_report_recomputes_cells(tmp_path):
    report = load_script("report_table2", "experiments/table2")
    _write(tmp_path / "h_noft" / "eval_seed42.jsonl", [([0, 1], [0, 2]), ([3, 4], [5, 6])])  # F1 0.5 / 0
    _write(tmp_path / "h_qrag_s1" / "eval_seed42.jsonl", [([0, 1], [1, 0]), ([3, 4], [3, 4])])
    _write(tmp_path / "h_qrag_s2" / "eval_seed42.jsonl", [([0, 1], [1, 0]), ([3, 4], [3, 9])])
    # MuSiQue, T = 4 with 2 gold: fixed budget F1 2/3 and EM 1, oracle stop (cut after step 2) F1 1
    _write(tmp_path / "h_qrag_s1" / "ood_musique" / "eval_seed42.jsonl", [([0, 1], [1, 0, 5, 6])])
    text = report.build(tmp_path, 42)
    fixed, oracle = _tables(text)["Fixed budget T"], _tables(text)["Oracle stopping"]
    noft = fixed["multi-step RAG w/o FT (untrained MiniLM)"]
    assert noft[:5] == ["0.250", "0.000", "2", "0.73 / 0.54", "-0.480 / -0.540"]
    q = fixed["**Q-RAG** (real HotpotQA training questions)"]
    assert q[0] == "0.875 ± 0.177" and q[3:5] == ["0.93 / 0.89", "-0.055 / -0.140"]  # EM (1 + 0.5) / 2
    assert q[5:10] == ["0.667", "1.000", "1", "0.71 / 0.55", "-0.043 / +0.450"]  # EM: every gold, extras allowed
    # oracle stopping: HotpotQA unchanged (T = 2, two gold), MuSiQue cut after step 2: F1 1, EM still 1
    assert oracle["**Q-RAG** (real HotpotQA training questions)"] == [
        *q[:5],
        "1.000",
        "1.000",
        "1",
        q[8],
        "+0.290 / +0.450",
    ]
    assert fixed["Plan Q-RAG (beam 4 × 3)"][0] == "—" and fixed["Plan Q-RAG (beam 4 × 3)"][4] == "— / —"
    assert "+0.625, met" in text


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
    assert rows["**Q-RAG** (real HotpotQA training questions)"][5] == "0.667 ± 0.000"
    assert rows["Plan Q-RAG w/o FT (beam 4 × 3)"][5] == "0.333"
