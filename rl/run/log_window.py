"""The training log: the effective batch at the start, and its windows: the micro-step scalars averaged over the optimiser steps since the
last log line (every ``logger.log_interval`` steps and at the last step), with the throughput and, on
CUDA, the device memory's peaks (rl/run/device_memory.py).

After a resume the first window starts at the resume step, so its means cover fewer steps than an
uninterrupted run's line there; that line says so.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from rl.run.device_memory import PEAK_ALLOCATED, PEAK_RESERVED, RESERVED

log = logging.getLogger("qrag.train")


class LogWindow:
    def __init__(self, every: int, total: int, env_steps: int, resumed_from: int | None):
        self.every, self.total = every, total
        self.resumed_from = resumed_from
        self.acc: dict[str, float] = {}
        self.n = 0
        self.t_last, self.env_last = time.perf_counter(), env_steps
        if resumed_from is not None and resumed_from < total:
            nxt = min(total, (resumed_from // every + 1) * every)
            log.info(
                "resumed at optimiser step %d: the log line at step %d averages steps %d-%d only (a fresh window)",
                resumed_from,
                nxt,
                resumed_from + 1,
                nxt,
            )

    def add(self, scalars: dict[str, float]) -> None:
        """One micro-step's scalars."""
        for k, v in scalars.items():
            self.acc[k] = self.acc.get(k, 0.0) + v
        self.n += 1

    def due(self, step: int) -> bool:
        return step % self.every == 0 or step == self.total

    def close(self, env_steps: int, world: int, truncations: int, returns: list[float]) -> dict[str, float]:
        """The window's means, ``sps`` (environment steps per second of all ``world`` ranks, from
        this rank's ``env_steps`` counter), the Q-network's state truncations so far and the mean
        return of the training episodes that ended in it (``train r_sum``); a new window starts."""
        now = time.perf_counter()
        means = {k: v / self.n for k, v in self.acc.items()}
        means["sps"] = (env_steps - self.env_last) * world / max(now - self.t_last, 1e-9)
        means["state_truncations"] = float(truncations)
        if returns:
            means["train r_sum"] = sum(returns) / len(returns)
        self.acc, self.n = {}, 0
        self.t_last, self.env_last = now, env_steps
        return means

    def report(self, means: dict[str, float], loss_name: str, step: int, env_steps: int, bar: Any) -> None:
        """The window's ``means`` on the progress bar and in one log line (``loss_name``: the
        learner's main loss; ``env_steps`` of all ranks)."""
        loss = means.get(loss_name, float("nan"))
        bar.set_postfix(
            ret=f"{means.get('train r_sum', float('nan')):.3f}", loss=f"{loss:.4f}", sps=f"{means['sps']:.1f}"
        )
        shown = {k: means[k] for k in ("q_mean", "alpha", "lr") if k in means}
        note = ""
        if self.resumed_from is not None:  # the first line after a resume
            note = f" [window since resume: steps {self.resumed_from + 1}-{step}]"
            self.resumed_from = None
        log.info(
            "step %d/%d env_steps %d %s %.4f train_return %s %s%s sps %.1f%s",
            step,
            self.total,
            env_steps,
            loss_name,
            loss,
            fmt(means.get("train r_sum")),
            " ".join(f"{k} {v:.3g}" for k, v in shown.items()),
            gpu_memory(means),
            means["sps"],
            note,
        )


def gpu_memory(means: dict[str, float]) -> str:
    """The window's device memory (rl/run/device_memory.py) for the log line; nothing off CUDA."""
    if PEAK_RESERVED not in means:
        return ""
    peak_a, peak_r, now = means[PEAK_ALLOCATED], means[PEAK_RESERVED], means[RESERVED]
    return f" gpu_GiB peak_allocated {peak_a:.2f} peak_reserved {peak_r:.2f} reserved {now:.2f}"


def log_batch(b: Any, world: int) -> None:
    """Transitions per optimiser step: world × (L × E ≥ batch_size) × accumulate_grads, from the
    learner's rl.learners.base.BatchShape ``b``."""
    per_rank = b.rollout_len * b.n_envs
    log.info(
        "effective batch: %d ranks × %d transitions (L=%d × E=%d, batch_size=%d) × accumulate_grads %d "
        "= %d transitions per optimiser step",
        world,
        per_rank,
        b.rollout_len,
        b.n_envs,
        b.batch_size,
        b.k_accum,
        world * per_rank * b.k_accum,
    )


def fmt(x: Any) -> str:
    return "n/a" if x is None else f"{x:.3f}"
