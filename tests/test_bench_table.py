"""experiments/bench/bench_table.py: the reference harness's files as JSON lines, the ratio table, and the
lease lines it makes (tag, program)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import load_script

bt = load_script("bench_table", "experiments/bench")


@pytest.fixture
def peer_dir(tmp_path):
    (tmp_path / "peer_train.json").write_text(
        json.dumps({"iterations": 120, "warm": 10, "total_s": 240.0, "steady_mean_s": 1.5, "steady_median_s": 1.4})
    )
    (tmp_path / "peer_eval_40000.json").write_text(
        json.dumps({"num_sentences": 40000, "episodes": 3, "mean_s": 6.0, "max_mem_gib": 22.5})
    )
    return tmp_path


def test_peer_lines_carry_the_reference_figures(peer_dir):
    lines = {x["workload"]: x for x in bt.peer_lines(peer_dir, "H200", "2.11")}
    assert lines["W1 train-babilong-100"]["s_per_iter_mean"] == 1.5
    assert lines["W1 train-babilong-100"]["iters"] == 110
    assert lines["train-program"]["s_per_step_wall"] == pytest.approx(2.0)  # 240 s / 120 iterations
    assert lines["W3 eval-40000"]["s_per_episode_mean"] == 6.0
    assert lines["W3 eval-40000"]["peak_gib"] == 22.5
    assert {x["tree"] for x in lines.values()} == {"reference"}


def test_table_divides_the_baseline_by_each_tree(peer_dir, tmp_path):
    call = tmp_path / "call.jsonl"
    ours = [
        {"workload": "W1 train-babilong-100", "tree": "abc1234", "card": "H200", "s_per_iter_mean": 0.3},
        {"workload": "W3 eval-40000", "tree": "abc1234", "card": "H200", "s_per_episode_mean": 0.5, "peak_gib": 5.0},
    ]
    text = "\n".join(json.dumps(x) for x in [*bt.peer_lines(peer_dir, "H200", "2.11"), *ours])
    call.write_text("a log line between the JSON lines\n" + text + "\n")
    out = bt.table(bt.read_lines([call]), "reference")
    rows = {r.split(" | ")[0].strip("| "): r for r in out.splitlines() if r.startswith("| W")}
    assert "5.00×" in rows["W1 train-babilong-100"]  # 1.5 / 0.3
    assert "12.00×" in rows["W3 eval-40000"]  # 6.0 / 0.5
    assert "0.500 s, 5.0 GiB" in rows["W3 eval-40000"]
    assert out.startswith("Card: H200")
    # a workload only the reference ran: a dash for the tree and for the ratio
    program = next(r for r in out.splitlines() if r.startswith("| train-program"))
    assert program.endswith("| 2.000 s | – | – |")


def test_a_run_with_overrides_is_a_row_of_its_own():
    """An ablation line of a tree (``run`` = "as configured + key=value") does not replace the tree's
    as-configured line of the same workload."""
    lines = [
        {
            "workload": "W1 train-babilong-100",
            "tree": "old",
            "card": "H200",
            "s_per_iter_mean": 0.45,
            "run": "as configured",
        },
        {
            "workload": "W1 train-babilong-100",
            "tree": "new",
            "card": "H200",
            "s_per_iter_mean": 0.40,
            "run": "as configured",
        },
        {
            "workload": "W1 train-babilong-100",
            "tree": "new",
            "card": "H200",
            "s_per_iter_mean": 0.44,
            "run": "as configured + speed.fused_adamw=false",
        },
    ]
    rows = {r.split(" | ")[0].strip("| "): r for r in bt.table(lines, "old").splitlines() if r.startswith("| W")}
    assert rows["W1 train-babilong-100"].endswith("| 0.450 s | 0.400 s | 1.12× |")
    assert rows["W1 train-babilong-100 [speed.fused_adamw=false]"].endswith("| – | 0.440 s | – |")


def test_table_refuses_two_cards(tmp_path):
    lines = [
        {"workload": "W2 eval-1200", "tree": "reference", "card": "H100", "s_per_episode_mean": 0.2},
        {"workload": "W2 eval-1200", "tree": "new", "card": "H200", "s_per_episode_mean": 0.05},
    ]
    with pytest.raises(SystemExit, match="2 cards"):
        bt.table(lines, "reference")


def test_a_broken_json_line_names_file_and_line(tmp_path):
    bad = tmp_path / "call.jsonl"
    bad.write_text('{"workload": "W2"}\n{"workload": \n')
    with pytest.raises(SystemExit, match="call.jsonl:2"):
        bt.read_lines([bad])


def test_throughput_rows_and_sync_counts():
    """Training-throughput lines become one row per tree and runs per card (per-run range and the
    aggregate); a W1 line that counted host-device syncs shows them."""
    lines = [
        {
            "workload": "W1 train-babilong-100",
            "tree": "new",
            "card": "H200",
            "s_per_iter_mean": 0.18,
            "syncs_per_iter": 70.4,
        },
        {
            "workload": "train-concurrent",
            "tree": "new",
            "card": "H200",
            "runs_per_gpu": 4,
            "per_run_steps_per_s": [3.6, 3.9, 3.7, 3.8],
            "aggregate_steps_per_s": 15.0,
            "window_steps_per_s_per_gpu": 13.2,
        },
        {
            "workload": "train-concurrent",
            "tree": "new+mps",
            "card": "H200",
            "runs_per_gpu": 8,
            "per_run_steps_per_s": [3.7, 3.8],
            "aggregate_steps_per_s": 30.093,
            "window_steps_per_s_per_gpu": 25.6,
        },
    ]
    out = bt.table(lines, "new")
    assert "0.180 s, 70 syncs" in out
    assert "| new | 4 | 3.60-3.90 | 15.00 | 13.20 |" in out
    assert "| new+mps | 8 | 3.70-3.80 | 30.09 | 25.60 |" in out
    assert bt.throughput(lines[:1]) is None


# what `bench_table.py tag <tree> --workload floor --card <card>` adds to each line of encoder_floor.py (lease.env's call floor)
FLOOR_LINE = {"workload": "floor", "tree": "new", "card": "H200"}


def test_floor_rows():
    """experiments/bench/encoder_floor.py's lines (tagged workload "floor") become one row per part, with the
    matmul rate, the elementwise share of the layer tail and the acting path."""
    lines = [
        {**FLOOR_LINE, "part": "gemm", "tokens": 131000, "s": 0.0393, "s_per_1m_tokens": 0.3, "tflops": 566.4},
        {
            **FLOOR_LINE,
            "part": "layer_tail",
            "tokens": 131000,
            "s": 0.03,
            "s_per_1m_tokens": 0.229,
            "elementwise_s_per_1m_tokens": 0.061,
        },
        {
            **FLOOR_LINE,
            "part": "acting",
            "tokens": 12288,
            "s": 0.0712,
            "s_per_1m_tokens": 5.79,
            "path": "cuda_graph",
            "steps": 64,
        },
    ]
    out = bt.table(lines, "new")
    assert "| gemm | 0.0393 | 0.300 s | tflops 566 |" in out
    assert "| layer_tail | 0.0300 | 0.229 s | elementwise (tail minus its matmuls) 0.061 s per 1 M tokens |" in out
    assert "| acting | 0.0712 | 5.790 s | path cuda_graph, steps 64 |" in out
    assert bt.floors(lines[:0]) is None


def test_a_call_without_timed_workloads_prints_no_empty_table():
    lines = [{**FLOOR_LINE, "part": "gemm", "tokens": 10, "s": 1.0, "s_per_1m_tokens": 1e5}]
    out = bt.table(lines, "new")
    assert "| workload |" not in out and out.startswith("Card: H200\n\n| part |")


def test_tag_labels_json_lines_and_passes_the_rest():
    """A JSON line gets the tree; with a workload, workload and card come first unless the line has its own."""
    assert bt.tag("loading...\n", "abc") == "loading...\n"
    assert json.loads(bt.tag('{"s": 1, "tree": "project"}\n', "abc")) == {"s": 1, "tree": "abc"}
    line = bt.tag('{"part": "gemm", "card": "own"}\n', "abc", "floor", "H200")
    assert list(json.loads(line)) == ["workload", "card", "part", "tree"]
    assert json.loads(line)["card"] == "own" and json.loads(line)["workload"] == "floor"


def test_program_times_the_command_and_prints_only_its_line(tmp_path):
    """`program` runs the command with its output on stderr: stdout is the one train-program line."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    cmd = [sys.executable, str(ROOT / "experiments" / "bench" / "bench_table.py"), "program"]
    cmd += ["--tree", "abc", "--card", "cpu", "--torch", "2.0", "--steps", "4", "--"]
    done = subprocess.run(
        [*cmd, sys.executable, "-c", "import time; print('progress'); time.sleep(0.2); raise SystemExit(3)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "progress" in done.stderr
    line = json.loads(done.stdout)
    assert line["workload"] == "train-program" and line["tree"] == "abc" and line["rc"] == 3
    assert line["total_s"] >= 0.2 and line["s_per_step_wall"] == pytest.approx(line["total_s"] / 4)
    assert bt.seconds(line) == line["s_per_step_wall"]  # the table reads it as the reference's program line
