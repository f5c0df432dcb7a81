"""Speed switches (config block ``speed``, docs/BENCH.md).

Every switch changes how the work is scheduled, never what is computed (tests/rl/test_speed.py
runs a learner and an evaluation with all of them on and all off). Only switches that trade
something are kept: memory (``chunk_cache``), a CPU thread (``overlap_tokenization``), start-up
time (``cuda_graphs``, ``compile``) or the reference's padding for comparisons
(``length_bucketing``). ``precision`` stays a top-level key because it changes the arithmetic.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from typing import Any

log = logging.getLogger(__name__)

# Switches of older versions whose "off" path was deleted: their fast path is the only one. Run
# folders written with them still load; the values are ignored.
REMOVED = ("token_cache", "batched_targets", "batch_envs", "single_encoder_eval", "pinned_transfers")
_warned = False


@dataclass(frozen=True)
class SpeedSwitches:
    chunk_cache: bool = True  # chunk embeddings kept until the weights change (false: re-embedded every rollout)
    length_bucketing: bool = True  # sort by length, cut by a padding + launch cost model
    overlap_tokenization: bool = True  # large haystacks: tokenise on a CPU thread while the GPU embeds
    cuda_graphs: bool = True  # small gradient-free encoder calls replayed from CUDA graphs (GPU only)
    compile: bool = False  # torch.compile(dynamic=True) of the gradient-free encoder passes

    @classmethod
    def from_cfg(cls, cfg: Any) -> SpeedSwitches:
        """From a run config; keys missing in older run folders take their defaults (the old
        top-level ``compile_encoders`` is read as ``speed.compile``); the switches of
        :data:`REMOVED` are ignored with one warning per process."""
        global _warned
        block = {k: v for k, v in dict(cfg.get("speed") or {}).items() if v is not None} if cfg is not None else {}
        removed = sorted(k for k in block if k in REMOVED)
        for k in removed:
            del block[k]
        if removed and not _warned:
            _warned = True
            log.warning(
                "speed.%s: removed switch(es), ignored (their fast path is the only one now; docs/BENCH.md)",
                ", speed.".join(removed),
            )
        names = {f.name for f in fields(cls)}
        unknown = set(block) - names
        if unknown:
            raise ValueError(f"unknown speed switch(es) {sorted(unknown)}; known: {sorted(names)}")
        if cfg is not None and cfg.get("compile_encoders") is not None and "compile" not in block:
            block["compile"] = cfg.get("compile_encoders")
        return cls(**{k: bool(v) for k, v in block.items()})

    def as_dict(self) -> dict[str, bool]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
