"""Self-attention over packed variable-length sequences, for the packed encoder (rl/model/fast/packed.py).

Tokens of many sequences lie end to end, ``[total_tokens, heads, head_dim]``; sequence k holds rows
``cu[k] : cu[k + 1]`` and attends only to itself (no mask, no padding). Three ways to compute it:

* ``varlen``: PyTorch's flash-attention varlen kernel (``torch.nn.attention.varlen.varlen_attn``,
  CUDA only, torch >= 2.10);
* ``nested``: SDPA over a nested jagged tensor (the same kernel family through another API);
* ``grouped``: sequences of equal length stacked and run through plain SDPA without a mask, one
  call per distinct length (exact; the CPU path, and the GPU's last resort).

On a GPU the first that runs and agrees with ``grouped`` on a small probe is used
(:func:`pick_attention`), and the choice is logged once per device.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)


@dataclass
class Packing:
    """Where each sequence of a packed slice lies: ``cu`` (int32, on the device) and the host copy
    of the lengths (the grouped backend's plan is made from it)."""

    cu: torch.Tensor
    lens: np.ndarray
    max_len: int = field(init=False)

    def __post_init__(self) -> None:
        self.max_len = int(self.lens.max())

    @cached_property
    def groups(self) -> list[tuple[int, torch.Tensor]]:
        """(length L, row indices [n_L * L]) per distinct length: the grouped backend's gathers,
        made once per slice and reused by every layer."""
        starts = np.concatenate(([0], np.cumsum(self.lens[:-1])))
        out = []
        for length in np.unique(self.lens):
            rows = (starts[self.lens == length][:, None] + np.arange(length)).ravel()
            out.append((int(length), torch.from_numpy(rows).to(self.cu.device)))
        return out


Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Packing], torch.Tensor]


def _varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, p: Packing) -> torch.Tensor:
    from torch.nn.attention.varlen import varlen_attn

    # positional arguments only: the keyword set changed between torch 2.10 and 2.13
    return varlen_attn(q, k, v, p.cu, p.cu, p.max_len, p.max_len)


def _nested(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, p: Packing) -> torch.Tensor:
    offsets = p.cu.long()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "nested tensors are a prototype"
        qkv = [torch.nested.nested_tensor_from_jagged(t.contiguous(), offsets).transpose(1, 2) for t in (q, k, v)]
        return F.scaled_dot_product_attention(*qkv).transpose(1, 2).values()


def _grouped(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, p: Packing) -> torch.Tensor:
    out = torch.empty_like(q)
    heads, dim = q.shape[1:]
    for length, rows in p.groups:
        # [n_L, heads, L, dim]: equal lengths, so no mask and no padding
        g = [t.index_select(0, rows).view(-1, length, heads, dim).transpose(1, 2) for t in (q, k, v)]
        o = F.scaled_dot_product_attention(*g)
        out.index_copy_(0, rows, o.transpose(1, 2).reshape(-1, heads, dim))
    return out


BACKENDS: dict[str, Attention] = {"varlen": _varlen, "nested": _nested, "grouped": _grouped}
_PICKED: dict[str, str] = {}


def pick_attention(device: torch.device, dtype: torch.dtype) -> str:
    """The attention backend for ``device``: ``grouped`` on a CPU; on a GPU the first of
    ``varlen``, ``nested`` that runs a small probe and agrees with ``grouped`` on it."""
    key = f"{device}:{dtype}"
    if key in _PICKED:
        return _PICKED[key]
    name = "grouped"
    if device.type == "cuda":
        for cand in ("varlen", "nested"):
            why = _probe(cand, device, dtype)
            if why is None:
                name = cand
                break
            log.info("packed encoder: attention backend %s unusable on %s (%s)", cand, device, why)
    log.info("packed encoder: attention over packed sequences on %s (%s) with %s", device, dtype, name)
    _PICKED[key] = name
    return name


def _probe(name: str, device: torch.device, dtype: torch.dtype) -> str | None:
    """Why backend ``name`` cannot serve (None: it can): an error, or a result unlike ``grouped``."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    lens = np.array([1, 7, 64, 33, 2])
    qkv = torch.randn(int(lens.sum()), 3, 4, 64, generator=gen).to(device, dtype)
    p = Packing(torch.from_numpy(np.concatenate(([0], np.cumsum(lens)))).to(device, torch.int32), lens)
    q, k, v = qkv.unbind(1)
    try:
        got = BACKENDS[name](q, k, v, p)
    except Exception as e:  # noqa: BLE001 — any failure means: use the next backend
        return f"{type(e).__name__}: {e}"
    want = _grouped(q, k, v, p)
    err = float((got.float() - want.float()).abs().max())
    return None if err < 2e-2 else f"differs from grouped SDPA by {err:.3g}"
