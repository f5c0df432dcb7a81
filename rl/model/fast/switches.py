"""Speed switches (config block ``speed``, docs/BENCH.md).

Every switch changes how the work is scheduled, never what is computed (tests/rl/test_speed.py
runs a learner and an evaluation with all of them on and all off). Only switches that trade
something are kept: memory (``chunk_cache``), a CPU thread (``overlap_tokenization``), start-up
time (``cuda_graphs``, ``compile``, ``packed_compile``), the reference's padding for comparisons
(``length_bucketing``) or the Hugging Face module's own forward (``packed_encoder``, which reorders
the arithmetic within rounding: tests/rl/test_packed.py; ``fused_adamw``, the optimiser's update
in one kernel, rounds differently from the multi-tensor loop). ``precision`` stays a top-level key because it changes the arithmetic.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from typing import Any

from rl.schema import Schema, param

log = logging.getLogger(__name__)

# Switches of older versions whose "off" path was deleted: their fast path is the only one. Run
# folders written with them still load; the values are ignored.
REMOVED = ("token_cache", "batched_targets", "batch_envs", "single_encoder_eval", "pinned_transfers")
_warned = False


@dataclass(frozen=True)
class SpeedSwitches(Schema):
    """The ``speed`` block: each switch's default and doc (rl/schema.py); each one's measured effect
    is in docs/BENCH.md."""

    chunk_cache: bool = param(True, "keep chunk embeddings until the weights change (false: re-embed every rollout)")
    length_bucketing: bool = param(
        True, "sort by length, cut calls by padding + launch cost (false: pad chunks to max_action_length)"
    )
    overlap_tokenization: bool = param(
        True, "haystacks of >= 8192 chunks: tokenise on a CPU thread while the GPU embeds (GPU only)"
    )
    cuda_graphs: bool = param(True, "replay small gradient-free encoder calls from CUDA graphs (GPU only)")
    compile: bool = param(False, "torch.compile(dynamic=True) of the gradient-free passes (replaces cuda_graphs)")
    packed_encoder: bool = param(
        True, "gradient-free calls the CUDA graphs do not take: BERT/XLM-R over packed sequences, no padding (GPU only)"
    )
    packed_compile: bool = param(
        True, "torch.compile the packed encoder's per-layer elementwise work at bucketed static shapes (GPU only)"
    )
    fused_adamw: bool = param(True, "AdamW as one fused kernel per step (GPU only; rounds within fp32 of foreach)")

    @classmethod
    def from_run_cfg(cls, cfg: Any) -> SpeedSwitches:
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
