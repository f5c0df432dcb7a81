"""Speed switches (config block ``speed``, docs/BENCH.md).

Every switch changes how the work is scheduled, never what is computed: with all of them off the
code runs the reference's schedule (re-tokenise at every use, re-embed chunks at every step, one
target pass per step, chunks padded to ``max_action_length``, both encoders at evaluation,
pageable copies, eager encoders). ``precision`` (tf32 | fp32 | bf16) stays a top-level key
because it does change the arithmetic.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class SpeedSwitches:
    token_cache: bool = True  # tokenise a sample once per episode; states/actions spliced from ids
    chunk_cache: bool = True  # chunk embeddings kept until the weights change
    batched_targets: bool = True  # V(s') of a whole rollout in one pass after it
    batch_envs: bool = True  # states of all parallel envs (and their chunks) in one encoder call
    length_bucketing: bool = True  # sort by length, cut by a padding + launch cost model
    single_encoder_eval: bool = True  # evaluation embeds chunks with the online encoder only
    pinned_transfers: bool = True  # host->device copies from pinned memory, without a sync
    overlap_tokenization: bool = True  # large haystacks: tokenise on a CPU thread while the GPU embeds
    cuda_graphs: bool = True  # small gradient-free encoder calls replayed from CUDA graphs (GPU only)
    compile: bool = False  # torch.compile(dynamic=True) of the gradient-free encoder passes

    @classmethod
    def from_cfg(cls, cfg: Any) -> SpeedSwitches:
        """From a run config; keys missing in older run folders take their defaults (the old
        top-level ``compile_encoders`` is read as ``speed.compile``)."""
        block = {k: v for k, v in dict(cfg.get("speed") or {}).items() if v is not None} if cfg is not None else {}
        names = {f.name for f in fields(cls)}
        unknown = set(block) - names
        if unknown:
            raise ValueError(f"unknown speed switch(es) {sorted(unknown)}; known: {sorted(names)}")
        if cfg is not None and cfg.get("compile_encoders") is not None and "compile" not in block:
            block["compile"] = cfg.get("compile_encoders")
        return cls(**{k: bool(v) for k, v in block.items()})

    @classmethod
    def all_off(cls) -> SpeedSwitches:
        return cls(**{f.name: False for f in fields(cls)})

    def as_dict(self) -> dict[str, bool]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
