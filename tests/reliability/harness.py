"""Fault-injection harness: tiny real training runs killed, starved of disk or run twice at named moments.

``TINY_RUN`` keeps a run to one optimiser step and two evaluations (steps 0 and 1) of a 1-layer
MiniLM (each checkpoint still weighs ~0.4 GB: the embedding table and its AdamW moments). The in-training
evaluation is replaced by one whose return grows with the step (``step_return``), in every process
of a test alike: every evaluation is then a new best, so each checkpoint sequence writes
``model_best.pt`` and ``model_last.pt``, and the tests reach every moment of it deterministically.
The one optimiser step moves the weights (no warm-up), so a checkpoint of step 0 never passes for step 1's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from omegaconf import open_dict

from tests.conftest import TINY, compose_cfg

TINY_RUN = [
    a
    for a in TINY
    if not a.startswith(
        (
            "steps_count",
            "eval_interval",
            "final_eval_episodes",
            "algo.model.predictor.num_layers",
            "algo.scheduler.warmup",
        )
    )
] + [
    "steps_count=1",
    "eval_interval=1",
    "final_eval_episodes=0",
    "logger.tensorboard=false",
    "algo.model.predictor.num_layers=1",
    # no warm-up: WarmupLinear's first step has lr = 0, which would leave the step-1 weights equal
    # to the step-0 ones and blind every weight comparison of a one-step run
    "algo.scheduler.warmup=0",
]


# Every process of a test computes with this many threads: results of a run continued in another
# process are bit-equal only at equal thread counts (other tests change the pytest process's).
THREADS = 1


def step_return(trainer: Any) -> dict[str, Any]:
    """Stand-in for Trainer.in_training_eval: a return that grows with the optimiser step."""
    step = trainer.learner.counters.optimizer_steps
    return {"return": float(step), "fact_em": step / 10, "fact_f1": step / 10, "split": trainer.eval_split}


def run_cfg(run_dir: Path, *extra: str):
    cfg = compose_cfg(TINY_RUN + list(extra))
    with open_dict(cfg):
        cfg.run_dir = str(run_dir)
    return cfg


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["learner"]["agent"]


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=0, rtol=0, msg=f"{a} vs {b}: {k}")
