"""A torchrun worker for the distributed tests (not a test module itself).

``worker.py train <run_dir> <hash_dir> [override ...]``: a tiny training run; every rank writes
the sha256 of its final agent state (online and target encoders) and α to <hash_dir>. With the
environment variable QRAG_TEST_STOP_AFTER=N every rank stops (KeyboardInterrupt) once N optimiser
steps are done, like a killed job: the run folder then holds the step-N checkpoint.
``worker.py eval <out_dir> <fail_after> [override ...]``: eval_retriever's run(cfg); with
fail_after >= 0 the last rank raises after writing that many records (an interrupted run).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import torch
from omegaconf import open_dict

from rl import distributed as dist
from tests.conftest import TINY, compose_cfg


def state_hash(qnet: torch.nn.Module, alpha: float) -> str:
    h = hashlib.sha256(repr(alpha).encode())
    for k, v in sorted(qnet.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def train(run_dir: str, hash_dir: str, overrides: list[str]) -> None:
    from rl.run.train import Trainer

    cfg = compose_cfg(TINY + overrides)
    with open_dict(cfg):
        cfg.run_dir = run_dir
    trainer = Trainer(cfg)
    stop_after = int(os.environ.get("QRAG_TEST_STOP_AFTER", "-1"))
    if stop_after >= 0:
        original = trainer.learner.micro_step

        def interrupted():
            if trainer.learner.counters.optimizer_steps >= stop_after:
                raise KeyboardInterrupt("simulated kill")
            return original()

        trainer.learner.micro_step = interrupted
        try:
            trainer.train()
        except KeyboardInterrupt:
            return
    trainer.train()
    out = {
        "hash": state_hash(trainer.qnet, trainer.learner.alpha),
        "alpha": trainer.learner.alpha,
        "steps": trainer.learner.counters.optimizer_steps,
        "env_steps": trainer.learner.counters.env_steps,
    }
    Path(hash_dir, f"rank{dist.rank()}.json").write_text(json.dumps(out))


def evaluate(out_dir: str, fail_after: int, overrides: list[str]) -> None:
    import rl.run.evaluate as eval_run

    if fail_after >= 0 and dist.requested_world() - 1 == int(os.environ["RANK"]):
        original = eval_run.greedy_episodes

        def interrupted(*args, **kwargs):
            for i, rec in enumerate(original(*args, **kwargs)):
                if i == fail_after:
                    raise KeyboardInterrupt("simulated crash")
                yield rec

        eval_run.greedy_episodes = interrupted
    cfg = compose_cfg(["progress_bar=false", "device=cpu", f"output_dir={out_dir}", *overrides], "testing")
    eval_run.run(cfg)


if __name__ == "__main__":
    mode, a, b, *rest = sys.argv[1:]
    if mode == "train":
        train(a, b, rest)
    else:
        evaluate(a, int(b), rest)
