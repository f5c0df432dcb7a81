"""The evaluations a training run makes (DESIGN §5.8): greedy episodes on the model-selection
subset at every ``eval_interval`` (a fixed subset of the validation split held out from train, or
of the test split), and on the first ``final_eval_episodes`` test samples before training and with
the best model. The run loop and its checkpoints are rl/run/train.py.
"""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import DictConfig

from envs.data.registry import build_dataset
from envs.feedback import build_feedback
from envs.legacy import Legacy
from envs.seeding import derive_rng
from rl import distributed as dist
from rl.eval.greedy import greedy_episodes, summarize
from rl.model.qnetwork import QNetwork
from rl.run.build import eval_settings
from rl.run.progress import progress

log = logging.getLogger("qrag.train")


def selection_split(cfg: DictConfig, legacy: Legacy) -> tuple[str, float]:
    """(the split models are selected on, the share of training questions held out for it)."""
    select_on_test = legacy.select_on_test or str(cfg.eval_split) == "test"
    return ("test", 0.0) if select_on_test else ("validation", float(cfg.validation_fraction))


class RunEvaluation:
    """The selection subset and the test samples of one run, and greedy evaluation on them."""

    def __init__(self, cfg: DictConfig, legacy: Legacy, split: str, vf: float):
        self.cfg, self.legacy, self.split = cfg, legacy, split
        seed, test_split = int(cfg.seed), str(cfg.envs.test_split)
        self.eval_ds = build_dataset(cfg.envs, "validation" if vf > 0 else test_split, seed, vf, legacy)
        self.test_ds = build_dataset(cfg.envs, test_split, seed, 0.0, legacy)
        self.settings = eval_settings(cfg)
        self.rng = derive_rng(seed, "eval-subset")  # also drawn from by legacy.eval_resample: checkpointed
        n_eval = min(int(cfg.eval_episodes), len(self.eval_ds))
        self.indices = sorted(int(i) for i in self.rng.choice(len(self.eval_ds), n_eval, replace=False))

    def evaluate(
        self, qnet: QNetwork, dataset: Any, indices: list[int], phase: str, what: str = "evaluation"
    ) -> tuple[dict[str, Any], list[dict]]:
        """Greedy episodes on ``indices``; a log line says how many, and a bar shows the progress."""
        cfg = self.cfg
        fb = build_feedback(cfg.feedback, cfg.envs, "test", str(cfg.envs.task), self.legacy)
        show = bool(cfg.logger.progress_bar) and dist.is_main()
        log.info("%s: %d %s samples", what, len(indices), phase)
        with progress(
            greedy_episodes(qnet, dataset, indices, fb, self.settings),
            total=len(indices),
            desc=f"{what} ({phase})",
            unit="sample",
            leave=False,
            dynamic_ncols=True,
            disable=not show,
        ) as bar:
            records = list(bar)
        summary = summarize(records)
        summary["split"] = phase
        return summary, records

    def selection(self, qnet: QNetwork) -> dict[str, Any]:
        """The in-training evaluation's summary on the selection subset."""
        indices = self.indices
        if self.legacy.eval_resample:  # ref: fresh indices with replacement each time
            indices = [int(i) for i in self.rng.integers(len(self.eval_ds), size=len(self.indices))]
        summary, _ = self.evaluate(qnet, self.eval_ds, indices, self.split, "eval")
        return summary

    def test_indices(self) -> list[int]:
        n = int(self.cfg.final_eval_episodes)
        n = len(self.test_ds) if n < 0 else min(n, len(self.test_ds))
        return list(range(n))

    def test(self, qnet: QNetwork, what: str) -> dict[str, Any]:
        """The summary on the first ``final_eval_episodes`` test samples."""
        summary, _ = self.evaluate(qnet, self.test_ds, self.test_indices(), "test", what)
        return summary
