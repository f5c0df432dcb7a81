"""scripts/sweep_babilong.sh: each mode runs its entry point once per length (and chunk filter) with
the arguments it is given, on the GPU it is given; bad calls stop before anything runs. The
interpreter is a stand-in that records its calls (PYTHON), so no model is loaded."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import ROOT

SWEEP = ROOT / "scripts" / "sweep_babilong.sh"


def _sweep(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run the sweep with a PYTHON that appends "<CUDA_VISIBLE_DEVICES>|<its arguments>" per call."""
    calls = tmp_path / "calls"
    py = tmp_path / "py"
    py.write_text(f'#!/usr/bin/env bash\necho "${{CUDA_VISIBLE_DEVICES}}|$*" >> {calls}\n')
    py.chmod(0o755)
    clean = {k: v for k, v in os.environ.items() if k not in ("LENGTHS", "LENGTH_UNIT", "NUM_SAMPLES", "SEED")}
    done = subprocess.run(
        ["bash", str(SWEEP), *args], env={**clean, "PYTHON": str(py), **env}, capture_output=True, text=True
    )
    return done, calls.read_text().splitlines() if calls.exists() else []


def _run_folder(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 1\n")
    return run


def test_retriever_mode_sweeps_the_official_token_budgets(tmp_path):
    run = _run_folder(tmp_path)
    done, calls = _sweep(tmp_path, "retriever", str(run), "3", "42", "+legacy.oracle_stop=true")
    assert done.returncode == 0, done.stderr
    budgets = ["1000", "4000", "32000", "128000", "1000000", "10000000"]
    assert calls == [
        f"3|{ROOT}/eval_retriever.py pretrained_path={run} seed=42 envs.length_unit=tokens envs.num_tokens={n} "
        "num_samples=-1 +legacy.oracle_stop=true"
        for n in budgets
    ]


def test_retriever_mode_counts_sentences_when_asked(tmp_path):
    run = _run_folder(tmp_path)
    done, calls = _sweep(
        tmp_path, "retriever", str(run), "0", "7", LENGTH_UNIT="sentences", LENGTHS="50 160", NUM_SAMPLES="20"
    )
    assert done.returncode == 0, done.stderr
    assert [c.split("|")[1].split()[1:] for c in calls] == [
        [f"pretrained_path={run}", "seed=7", f"envs.num_sentences={n}", "num_samples=20"] for n in (50, 160)
    ]


def test_retriever_mode_refuses_a_folder_that_is_no_run(tmp_path):
    done, calls = _sweep(tmp_path, "retriever", str(tmp_path), "0", "42")
    assert done.returncode == 2 and "not a training run folder (no config.yaml)" in done.stderr and calls == []
    done, calls = _sweep(tmp_path, "retriever", str(_run_folder(tmp_path)), "0", "42", LENGTH_UNIT="words")
    assert done.returncode == 2 and "LENGTH_UNIT must be tokens or sentences" in done.stderr and calls == []


def test_llm_mode_reads_each_log_found_with_each_filter(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    for n in (50, 1200):
        (logs / f"eval_seed0_ns{n}.jsonl").write_text("")
    done, calls = _sweep(tmp_path, "llm", str(logs), "org/Reader-1B", "qa2", "cpu", EXTRA_ARGS="--max_tokens 32")
    assert done.returncode == 0, done.stderr
    assert calls == [
        f"|{ROOT}/eval_llm_synthetics.py {logs}/eval_seed0_ns{n}.jsonl --llm_name org/Reader-1B --babi_task qa2 "
        f"--chunk_filter {f} --max_tokens 32"
        for n in (50, 1200)
        for f in ("none", "gt")
    ]
    assert f"skip N=160: {logs}/eval_seed0_ns160.jsonl not found" in done.stderr
    assert done.stdout.strip().endswith(f"results: {logs}/results_Reader-1B.json")


def test_llm_mode_takes_the_seed_filters_and_gpu_it_is_given(tmp_path):
    (tmp_path / "eval_seed3_ns160.jsonl").write_text("")
    done, calls = _sweep(tmp_path, "llm", str(tmp_path), "m", "qa1", "1", SEED="3", FILTERS="qvalue")
    assert done.returncode == 0, done.stderr
    assert calls == [
        f"1|{ROOT}/eval_llm_synthetics.py {tmp_path}/eval_seed3_ns160.jsonl --llm_name m --babi_task qa1 "
        "--chunk_filter qvalue"
    ]


def test_llm_mode_without_a_log_fails(tmp_path):
    done, calls = _sweep(tmp_path, "llm", str(tmp_path), "m", "qa1", "cpu")
    assert done.returncode == 1 and "no retriever logs eval_seed0_ns<N>.jsonl" in done.stderr and calls == []


def test_a_wrong_mode_or_argument_count_is_a_usage_error(tmp_path):
    for args in ([], ["reader", "x"], ["llm", "logs", "m", "qa1"], ["retriever", "run", "0"]):
        done, calls = _sweep(tmp_path, *args)
        assert done.returncode == 2 and "usage:" in done.stderr and calls == [], args
