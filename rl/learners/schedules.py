"""Learning-rate schedules (DESIGN §5.7): lr(n) = lr₀·f(n), n = optimiser steps so far.

WarmupLinear keeps the reference's semantics: f(0) = 0, a ramp to (1 − ρ) just before the
warm-up ends, a jump to 1 at W, then a linear fall to ρ at S. ``smooth_warmup`` ramps to 1
instead. Cosine is a quarter cosine from 1 to ρ after a linear warm-up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rl.schema import Schema, param

SCHEDULERS = ("WarmupLinear", "Cosine")


@dataclass
class Scheduler(Schema):
    """``algo.scheduler``, shared by every learner."""

    name: str = param("WarmupLinear", "WarmupLinear | Cosine", choices=SCHEDULERS)
    warmup: int = param(1000, "W: optimiser steps of warm-up", low=0)
    total: int = param("${steps_count}", "S: the schedule's length in optimiser steps", low=0)  # type: ignore[assignment]
    # lr falls to ratio·lr₀; a ratio above 1 makes the warm-up's lr negative
    ratio: float = param(0.0, "ρ: lr falls linearly (or by a quarter cosine) to ρ·lr₀ at S", low=0.0, high=1.0)
    smooth_warmup: bool = param(False, "true: plain linear warm-up to lr₀ (no jump at the end of warm-up)")


def lr_factor(name: str, n: int, warmup: int, total: int, ratio: float, smooth_warmup: bool = False) -> float:
    if name == "WarmupLinear":
        if n < warmup:
            ramp = n / max(1, warmup)
            return ramp if smooth_warmup else (1.0 - ratio) * ramp
        return max(0.0, 1.0 + (ratio - 1.0) * (n - warmup) / max(1, total - warmup))
    if name == "Cosine":
        if n < warmup:
            return n / max(1, warmup)
        progress = min(1.0, (n - warmup) / max(1, total - warmup))
        return ratio + (1.0 - ratio) * math.cos(math.pi / 2 * progress)
    raise ValueError(f"unknown scheduler {name!r}; use {' or '.join(SCHEDULERS)}")


def build_scheduler(optimizer: torch.optim.Optimizer, s: Scheduler) -> torch.optim.lr_scheduler.LambdaLR:
    lr_factor(s.name, 0, s.warmup, s.total, s.ratio)  # validate the name now, not at the first step
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda n: lr_factor(s.name, n, s.warmup, s.total, s.ratio, s.smooth_warmup)
    )
