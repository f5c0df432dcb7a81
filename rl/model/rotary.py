"""Rotary position embedding of action embeddings (DESIGN §3.3).

Only the action embedding is rotated, each half of width D_h = d/2 separately with the same
integer code, interleaved pairs, θ = 10000 (the default frequencies of rotary-embedding-torch
at dim D_h). Angles are computed directly from the code, so there is no table to overflow
(the reference's 1000/5000-entry tables, DESIGN §11 #21). Rotation runs in fp32.
"""

from __future__ import annotations

import torch


class HalfRotary(torch.nn.Module):
    def __init__(self, dim: int, theta: float = 10000.0, interpolate_factor: float = 1.0):
        super().__init__()
        if dim % 4:
            raise ValueError(f"embedding width {dim} must be divisible by 4 (two halves of even width)")
        half = dim // 2
        freqs = theta ** (-torch.arange(0, half, 2, dtype=torch.float64) / half)
        self.register_buffer("freqs", freqs.float(), persistent=False)
        self.interpolate_factor = interpolate_factor

    def codes(self, positions: torch.Tensor) -> torch.Tensor:
        """p̂ = int(p / interpolate_factor) (positions are ≥ 0, so a floor)."""
        if self.interpolate_factor == 1:
            return positions.long()
        return torch.floor(positions.double() / self.interpolate_factor).long()

    def forward(self, emb: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """Rotate ``emb`` [..., d] by the lookup codes p̂ of the integer position ``codes`` [...];
        returns fp32."""
        emb = emb.float()
        phi = self.codes(codes).to(emb.device, torch.float32).unsqueeze(-1) * self.freqs  # [..., D_h/2]
        cos, sin = torch.cos(phi), torch.sin(phi)
        d = emb.shape[-1]
        x = emb.reshape(*emb.shape[:-1], 2, d // 4, 2)  # halves × pairs × (even, odd)
        cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)  # broadcast over the two halves
        even, odd = x[..., 0], x[..., 1]
        out = torch.stack((even * cos - odd * sin, odd * cos + even * sin), dim=-1)
        return out.reshape(emb.shape)
