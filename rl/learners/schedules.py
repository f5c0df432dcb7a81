"""Learning-rate schedules (DESIGN §5.7): lr(n) = lr₀·f(n), n = optimiser steps so far.

WarmupLinear keeps the reference's semantics: f(0) = 0, a ramp to (1 − ρ) just before the
warm-up ends, a jump to 1 at W, then a linear fall to ρ at S. ``smooth_warmup`` ramps to 1
instead. Cosine is a quarter cosine from 1 to ρ after a linear warm-up.
"""

from __future__ import annotations

import math

import torch

SCHEDULERS = ("WarmupLinear", "Cosine")


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


def build_scheduler(optimizer: torch.optim.Optimizer, cfg) -> torch.optim.lr_scheduler.LambdaLR:
    name = str(cfg.get("name", "WarmupLinear"))
    warmup, total = int(cfg.get("warmup", 1000)), int(cfg.get("total"))
    ratio, smooth = float(cfg.get("ratio", 0.0)), bool(cfg.get("smooth_warmup", False))
    lr_factor(name, 0, warmup, total, ratio)  # validate the name now, not at the first step
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda n: lr_factor(name, n, warmup, total, ratio, smooth))
