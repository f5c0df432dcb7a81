"""scripts/bench.py W5 (the CPU demo, docs/BENCH.md) runs the trainer and prints its timing fields."""

import json
import subprocess
import sys

from tests.conftest import ROOT, TINY, load_script


def test_step_seconds_fold_micro_steps_into_the_step_they_complete():
    bench = load_script("bench")
    # (seconds, optimiser steps after): two micro-steps fill the buffer, then one step per micro-step
    assert bench.step_seconds([(1.0, 0), (2.0, 0), (0.5, 1), (0.25, 2), (0.125, 2)]) == [3.5, 0.25]


def test_w5_prints_one_line_with_its_fields(tmp_path):
    """A tiny demo (tests/conftest.py TINY: 4 optimiser steps, 2-layer MiniLM), about 20 s on 2 cores."""
    demo = [kv for kv in TINY if not kv.startswith(("experiment=", "logger."))]
    out = subprocess.run(
        [sys.executable, "scripts/bench.py", "--workloads", "W5", "--warmup", "1", "--tree", "t"]
        + [a for kv in demo for a in ("--set", kv)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    (row,) = [json.loads(line) for line in out.splitlines()]
    assert row["workload"] == "W5 cpu-demo" and row["tree"] == "t" and row["card"] == "cpu"
    assert row["steps"] == 4 and 0 < row["s_per_step_median"] < row["wall_s"]
    # evaluations at steps 0, 2 and 4 on validation, the untrained and trained retriever on test
    assert row["eval_phases"] == {"validation": 3, "test": 2}
    assert row["saves"]["model_last.pt"] == 3 and row["s_per_save"]["model_last.pt"] > 0
    assert all(s > 0 for s in row["s_per_eval_sample"].values())
    assert row["peak_rss_gib"] > 0.1 and row["model_last_mib"] > 0
    assert row["cpu_cores"] >= 1 and row["torch_threads"] >= 1 and row["cpu_model"]
    assert row["load_1min_at_start"] >= 0 and row["encoder"] == "offline:minilm"
    assert all(isinstance(row[k], float) for k in ("untrained_fact_f1", "trained_fact_f1"))
