"""Chunk position codes (DESIGN §3): the integer code p̂ each chunk carries into the rotation.

All functions are vectorised over the N chunks of one sample and run on the mask's device,
so a 400k-chunk haystack costs a handful of tensor ops per step.
"""

from __future__ import annotations

import numpy as np
import torch

PROCESSORS = ("none", "absolute", "random", "relative")


def relative_codes(selected: torch.Tensor, step_size: int, formula: str = "linspace") -> torch.Tensor:
    """Relative position codes p̂_t(i) for all chunks, given the bool mask of selected chunks
    ([N], or [S, N] for S states of one sample at once).

    Gaps: G_0 = [0, s_1) and G_j = [s_j, s_{j+1}) (each starts at a selected index, inclusive),
    s_{m+1} = N. For chunk i in G_j with offset r and gap length n:
      linspace: δ·j + ⌊ℓ·r/(n−1)⌋ (0 when n = 1);  paper (Eq. 6): δ·j + ⌊ℓ·r/n⌋,
    with ℓ = int(0.9·δ). The integer form equals the reference's float32 linspace path exactly
    (tests/rl/test_positions.py checks it against a float emulation).
    """
    n_chunks = selected.shape[-1]  # any leading dims are a batch of masks
    ell = int(0.9 * step_size)
    idx = torch.arange(n_chunks, device=selected.device).expand_as(selected)
    j = torch.cumsum(selected.long(), -1)  # selected chunks at or left of i
    start = torch.cummax(torch.where(selected, idx, torch.zeros_like(idx)), -1).values
    # next selected index strictly right of i, else N
    nxt = torch.where(selected, idx, torch.full_like(idx, n_chunks))
    nxt = torch.cat([nxt[..., 1:], nxt.new_full((*nxt.shape[:-1], 1), n_chunks)], -1)
    end = torch.flip(torch.cummin(torch.flip(nxt, (-1,)), -1).values, (-1,))
    r = idx - start
    n = end - start
    if formula == "linspace":
        within = torch.where(n > 1, (ell * r) // torch.clamp(n - 1, min=1), torch.zeros_like(r))
    elif formula == "paper":
        within = (ell * r) // n
    else:
        raise ValueError(f"relative_formula must be 'linspace' or 'paper', got {formula!r}")
    return step_size * j + within


def relative_codes_host(n_chunks: int, selected: list[int], step_size: int, formula: str = "linspace") -> np.ndarray:
    """:func:`relative_codes` for one state, computed with numpy from the selected indices:
    a small sample's codes cost ~20 µs here against ~20 kernel launches on a GPU."""
    sel = np.zeros(n_chunks, dtype=bool)
    sel[list(selected)] = True
    ell = int(0.9 * step_size)
    idx = np.arange(n_chunks)
    j = np.cumsum(sel)
    start = np.maximum.accumulate(np.where(sel, idx, 0))
    nxt = np.append(np.where(sel, idx, n_chunks)[1:], n_chunks)
    end = np.minimum.accumulate(nxt[::-1])[::-1]
    r, n = idx - start, end - start
    if formula == "linspace":
        within = np.where(n > 1, (ell * r) // np.maximum(n - 1, 1), 0)
    elif formula == "paper":
        within = (ell * r) // n
    else:
        raise ValueError(f"relative_formula must be 'linspace' or 'paper', got {formula!r}")
    return step_size * j + within


def relative_code(n_chunks: int, selected: list[int], chunk: int, step_size: int, formula: str = "linspace") -> int:
    """:func:`relative_codes` of one chunk in one state, from the selected indices alone (the code
    acting keeps with a transition): O(|selected|) on the host."""
    ell = int(0.9 * step_size)
    j = sum(1 for s in selected if s <= chunk)
    start = max((s for s in selected if s <= chunk), default=0)
    end = min((s for s in selected if s > chunk), default=n_chunks)
    r, n = chunk - start, end - start
    if formula == "linspace":
        within = (ell * r) // (n - 1) if n > 1 else 0
    elif formula == "paper":
        within = (ell * r) // n
    else:
        raise ValueError(f"relative_formula must be 'linspace' or 'paper', got {formula!r}")
    return step_size * j + within


def random_codes(n_chunks: int, rng: np.random.Generator, max_chunks_count: int = 2000) -> np.ndarray:
    """DESIGN §3.5: 5 contiguous segments, each shifted by a sorted random indent."""
    if n_chunks < 6 or n_chunks >= max_chunks_count:
        raise ValueError(f"random positions need 6 <= N < max_chunks_count={max_chunks_count}, got N={n_chunks}")
    cuts = np.sort(rng.choice(np.arange(1, n_chunks), size=4, replace=False))
    indents = np.sort(rng.integers(0, max_chunks_count - n_chunks, size=5))
    segment = np.searchsorted(cuts, np.arange(n_chunks), side="right")
    return np.arange(n_chunks) + indents[segment]
