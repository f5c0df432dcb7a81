"""The top-level keys of a training config, each stated once (rl/schema.py): default, one-line doc
and check. rl/run/config.py registers their defaults with Hydra's ConfigStore (``training_keys``,
listed first in configs/training.yaml, which keeps only its defaults list and Hydra's settings).

:class:`RunKeys` holds the keys evaluation also reads (from a run's config.yaml or testing.yaml), so
the validator checks them for both; :class:`TrainingKeys` those only training reads, and the
``speed`` block (:class:`rl.model.fast.switches.SpeedSwitches`). Kept light: the Hydra callback
imports it through rl/run/validate.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rl.model.fast.switches import SpeedSwitches
from rl.model.precision import PRECISIONS
from rl.schema import Schema, param

EVAL_SPLITS = ("validation", "test")
MAX_SEED = 2**64 - 1  # torch.manual_seed's limit


def _device_ok(v: Any) -> bool:
    import torch

    if v in ("auto", "cpu"):
        return True
    m = re.fullmatch(r"cuda(?::(\d+))?", str(v))
    return m is not None and torch.cuda.is_available() and int(m.group(1) or 0) < torch.cuda.device_count()


def _check_device(checker: Any, key: str, prefix: str) -> None:
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    checker.check(key, _device_ok, "auto or cpu" + (f" or cuda:N with N < {n}" if n else " (no CUDA device here)"))


def _speed_checked_with_common(checker: Any, key: str, prefix: str) -> None:
    """The ``speed`` block is checked with the evaluation keys (rl/run/validate.py
    ``_check_common``: null keeps the run's value there, and old run folders' removed switches)."""


@dataclass
class EnvPositions(Schema):
    """The ``envs`` keys of the position codes (DESIGN §3) every environment shares; each env config
    (configs/envs/*.yaml) states only ``positions_processor`` and what else differs."""

    step_size: int = param(20, "δ of the relative encoding; ℓ = int(0.9·δ) (unused with processor none)", low=1)
    relative_formula: str = param("linspace", "linspace (ref) | paper (Eq. 6)", choices=("linspace", "paper"))
    max_chunks_count: int = param(2000, "random processor only: codes are drawn below this", low=1)


@dataclass
class RunKeys(Schema):
    """Top-level keys that training and evaluation both read."""

    seed: int = param(
        42, "seeds python/numpy/torch/CUDA and every sampler (derived per component)", low=0, high=MAX_SEED
    )
    device: str = param("auto", "auto (cuda:0 if present, else cpu) | cpu | cuda:N", check=_check_device)
    precision: str = param(
        "auto",
        "auto (bf16 autocast on GPU, tf32 on CPU) | tf32 (ref) | fp32 | bf16 (rl/model/precision.py)",
        choices=PRECISIONS,
    )
    max_action_length: int = param(256, "token cap per chunk for action embeddings (specials included)", low=1)
    max_action_length_in_memory: int = param(64, "token cap per state segment in rollouts and the loss", low=1)
    eval_max_action_length_in_memory: int | None = param(
        None, "the same cap in greedy evaluation (null = max_action_length_in_memory)", low=1
    )
    max_state_length: int | None = param(
        None, "whole-state token cap (null = the encoder's positions, e.g. 512)", low=1
    )
    embed_batch_size: int = param(10000, "chunks per encoder call when embedding a haystack", low=1)
    eval_group_size: int = param(8, "evaluation samples stepped together", low=1)


def _sizes_ok(v: Any) -> bool:
    """A sentence-mode haystack size: an integer >= 1, a non-empty list of them, or null."""
    values = v if isinstance(v, list) else [v]
    return v is None or (
        bool(values) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in values)
    )


@dataclass
class LateHaystacks(Schema):
    """Training haystacks that change at a step (experiments/qa3_late): from optimiser step `from_step` on,
    every training episode that starts draws its haystack with `envs.num_sentences` = `num_sentences`
    (BabiLong's sentence mode), before it with the run's own. Model selection uses the late haystacks
    for the whole run, so that validation returns stay comparable across steps. Off (null) by default."""

    from_step: int | None = param(
        None,
        "once this many optimiser steps are done, every training episode that starts draws a late haystack (null = off)",
        low=1,
    )
    num_sentences: Any = param(
        None,
        "envs.num_sentences of the late haystacks and of every in-training evaluation (an int or a list to draw "
        "from per question)",
        ok=(_sizes_ok, "an integer >= 1, a list of them, or null"),
    )

    @classmethod
    def check_more(cls, checker: Any, prefix: str) -> None:
        """Both keys or neither; a switch some training step sees; BabiLong's sentence mode; a learner
        that acts on its own episodes (DQN replays transitions by sample index, which would rebuild an
        early episode's sample in the late haystack)."""
        start, sizes = (checker.value(f"{prefix}.{k}")[1] for k in ("from_step", "num_sentences"))
        if {f"{prefix}.from_step", f"{prefix}.num_sentences"} & checker.failed or (start is None and sizes is None):
            return
        errors = []
        if start is None or sizes is None:
            errors.append(f"{prefix}: set from_step and num_sentences together (both null: off)")
        steps = checker.value("steps_count")[1]
        if start is not None and isinstance(steps, int) and start >= steps:
            errors.append(
                f"{prefix}.from_step={start}: expected < steps_count ({steps}); no training step would draw a "
                f"late haystack"
            )
        unit = checker.value("envs.length_unit")[1]
        if unit != "sentences":  # only BabiLong has the key; its token mode drops stories by budget
            errors.append(
                f"{prefix}: needs haystacks sized in sentences (BabiLong, envs.length_unit=sentences); this run's "
                f"envs are {checker.value('envs.name')[1]} with length_unit {unit}"
            )
        if checker.value("algo.objective")[1] == "dqn":
            errors.append(f"{prefix}: not with algo.objective=dqn (its replay rebuilds samples by index)")
        checker.errors.extend(errors)


@dataclass
class TrainingKeys(Schema):
    """Top-level keys only training reads."""

    learning_start: int = param(200, "uniform random acting while env steps < 2 × learning_start", low=0)
    steps_count: int = param(50000, "optimiser steps (the scheduler's total)", low=0)
    batch_size: int = param(64, "B: minimum transitions per rollout; L = ceil(B / envs_parallel)", low=1)
    accumulate_grads: int = param(2, "K: micro-steps (rollout + backward) per optimiser step", low=1)
    eval_interval: int = param(500, "optimiser steps between in-training evaluations", low=1)
    eval_episodes: int = param(300, "greedy episodes per evaluation (one fixed subset of distinct samples)", low=1)
    envs_parallel: int = param(4, "E: persistent training environments", low=1)
    final_eval_episodes: int = param(
        0, ">0: test samples scored before training and with the best model (summary.json)", low=-1
    )
    jobs_per_gpu: int = param(
        1, "-m sweeps with hydra/launcher=parallel: runs at once per visible GPU (CPU: processes)", low=1
    )
    keep_last_checkpoints: int | None = param(
        None,
        "-m sweeps: when a job ends, only the N most recently finished jobs keep model_last.pt (null = all)",
        low=0,
    )
    resume: bool = param(False, "true: continue the run in hydra.run.dir from its model_last.pt")
    eval_split: str = param(
        "validation", "validation (held out from train) | test (the reference's selection)", choices=EVAL_SPLITS
    )
    validation_fraction: float = param(
        0.05,
        "share of training questions held out for model selection",
        ok=(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1, "a number >= 0 and < 1"),
    )
    train_samples: int = param(
        -1,
        "train on the first N training samples only (after validation is set apart; -1 = all): a learning "
        "curve over training-set size; validation and test keep all theirs",
        ok=(lambda v: isinstance(v, int) and not isinstance(v, bool) and (v == -1 or v >= 1), "-1, or an integer >= 1"),
    )
    late_haystacks: LateHaystacks = param(LateHaystacks, "training haystacks that change at a step (off by default)")
    speed: SpeedSwitches = param(
        SpeedSwitches, "speed switches: scheduling only, never what is computed", check=_speed_checked_with_common
    )
