"""experiments/bench/encoder_floor.py runs end to end (on the CPU: only that it runs; its figures are GPU figures)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def test_every_part_is_measured_and_consistent():
    out = subprocess.run(
        [
            sys.executable,
            "experiments/bench/encoder_floor.py",
            "--device",
            "cpu",
            "--tokens",
            "600",
            "--repeats",
            "1",
            "--steps",
            "1",
            "--tree",
            "t",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["part"] for r in rows] == ["gemm", "attention", "embed", "layer_tail", "packed", "bandwidth", "acting"]
    for r in rows:
        assert r["s"] > 0 and r["tree"] == "t" and r["card"] == "cpu"
        assert r["s_per_1m_tokens"] == pytest.approx(r["s"] / r["tokens"] * 1e6)
    gemm = rows[0]
    flops = 2 * gemm["tokens"] * 12 * (4 * 768 * 768 + 2 * 768 * 3072)
    assert gemm["tflops"] == pytest.approx(flops / gemm["s"] / 1e12)
    assert 500 <= gemm["tokens"] <= 600 and rows[4]["sequences"] == rows[1]["sequences"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a GPU")
def test_refuses_cuda_without_a_gpu():
    r = subprocess.run([sys.executable, "experiments/bench/encoder_floor.py"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and "needs a CUDA GPU" in r.stdout
