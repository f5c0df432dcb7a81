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
    res = torchrun([WORKER, "train", str(run_dir), str(hashes), "steps_count=3", "eval_interval=2",
                    "final_eval_episodes=0", "logger.tensorboard=false"], cwd)
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
