"""train_q_rag's Trainer with 2 CPU ranks (gloo): averaged gradients keep the ranks' weights,
target networks and α identical; rank 0 alone writes the run folder and every rank's env state."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .conftest import WORKER, torchrun

FILES = ["config.yaml", "config_resolved.yaml", "metrics.jsonl", "model_best.pt", "model_last.pt", "summary.json"]


def test_two_ranks_stay_identical(tmp_path: Path) -> None:
    run_dir, hashes, cwd = tmp_path / "run", tmp_path / "hashes", tmp_path / "cwd"
    hashes.mkdir()
    res = torchrun(
        [
            WORKER,
            "train",
            str(run_dir),
            str(hashes),
            "steps_count=3",
            "eval_interval=2",
            "final_eval_episodes=0",
            "logger.tensorboard=false",
        ],
        cwd,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    ranks = [json.loads((hashes / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0] == ranks[1] and ranks[0]["steps"] == 3  # weights (online + target), α, counters
    assert sorted(p.name for p in run_dir.iterdir()) == FILES and list(cwd.iterdir()) == []
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 2, 3]  # one writer: no duplicated rows
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["effective_batch"] == 2 * 4 * 1
    assert summary["env_steps"] == 2 * ranks[0]["env_steps"]
    state = torch.load(run_dir / "model_last.pt", map_location="cpu", weights_only=False, mmap=True)
    envs = [r["env"] for r in state["ranks"]]
    assert len(envs) == 2 and envs[0]["rng"] != envs[1]["rng"]  # each rank owns its environments
    assert envs[0]["episodes"] == state["learner"]["env"]["episodes"]


def test_two_rank_resume_equals_uninterrupted(tmp_path: Path, monkeypatch) -> None:
    """Kill both ranks after the step-2 checkpoint, resume with resume=true: every rank ends with
    the weights, α and counters of an uninterrupted 2-rank run (each rank restores its own envs)."""
    common = ["steps_count=4", "eval_interval=2", "final_eval_episodes=0", "logger.tensorboard=false"]
    full, cut = tmp_path / "full", tmp_path / "cut"
    for d in ("h_full", "h_cut"):
        (tmp_path / d).mkdir()
    res = torchrun([WORKER, "train", str(full), str(tmp_path / "h_full"), *common], tmp_path / "cwd1")
    assert res.returncode == 0, res.stderr[-3000:]
    monkeypatch.setenv("QRAG_TEST_STOP_AFTER", "2")
    res = torchrun([WORKER, "train", str(cut), str(tmp_path / "h_cut"), *common], tmp_path / "cwd2")
    assert res.returncode == 0, res.stderr[-3000:]
    assert not (cut / "summary.json").exists() and (cut / "model_last.pt").exists()
    monkeypatch.delenv("QRAG_TEST_STOP_AFTER")
    res = torchrun([WORKER, "train", str(cut), str(tmp_path / "h_cut"), *common, "resume=true"], tmp_path / "cwd3")
    assert res.returncode == 0, res.stderr[-3000:]
    for r in range(2):
        a = json.loads((tmp_path / "h_full" / f"rank{r}.json").read_text())
        b = json.loads((tmp_path / "h_cut" / f"rank{r}.json").read_text())
        assert a == b, f"rank {r}"

    def rows(d):
        return [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]

    assert rows(cut) == rows(full)
