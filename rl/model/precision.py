"""The one interpreter of the ``precision`` key (DESIGN §2.7); its default lives in rl/run/keys.py.

``tf32`` is the reference's arithmetic: fp32 weights and activations, matmuls in tf32
(``torch.set_float32_matmul_precision("high")``). ``fp32`` makes matmuls full fp32 ("highest").
``bf16`` runs the encoders under bf16 autocast (tf32 for what stays fp32). ``auto`` is bf16 on a
GPU (shown not to change learning: docs/BENCH.md, parity) and tf32 on CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where it is used: config validation imports PRECISIONS without it
    import torch

PRECISIONS = ("auto", "tf32", "fp32", "bf16")


@dataclass(frozen=True)
class Precision:
    name: str  # as configured
    autocast: torch.dtype | None  # the encoders' autocast dtype; None = no autocast
    matmul: str  # torch.set_float32_matmul_precision value

    @classmethod
    def resolve(cls, name: str, device: torch.device) -> Precision:
        if name not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {name!r}")
        import torch

        effective = ("bf16" if device.type == "cuda" else "tf32") if name == "auto" else name
        return cls(name, torch.bfloat16 if effective == "bf16" else None, "highest" if effective == "fp32" else "high")

    def apply(self) -> None:
        """Set the process-wide matmul precision (before any model runs)."""
        import torch

        torch.set_float32_matmul_precision(self.matmul)
