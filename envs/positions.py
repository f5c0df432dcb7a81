"""Chunk position codes (DESIGN §3): the integer code p̂ each chunk carries into the rotation.

Relative codes have one definition and one fast path, side by side: :func:`relative_codes_by_gap`
writes DESIGN §3.2 out gap by gap on the host, from the selected indices (a slice per gap, so one
small state costs microseconds); :func:`relative_codes` gives the same integers as a handful of tensor
operations over a mask, for one state or many at once, on the mask's device (a 400k-chunk haystack
costs a handful of ops per step). :meth:`envs.env.Episode.codes` chooses between them, in one place;
tests/rl/test_positions.py compares the fast path with the definition.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch

PROCESSORS = ("none", "absolute", "random", "relative")
FORMULAS = ("linspace", "paper")


def _check_formula(formula: str) -> None:
    if formula not in FORMULAS:
        raise ValueError(f"relative_formula must be 'linspace' or 'paper', got {formula!r}")


def relative_codes_by_gap(
    n_chunks: int, selected: Iterable[int], step_size: int, formula: str = "linspace"
) -> np.ndarray:
    """The definition: relative position codes p̂_t(i) [N] int64 of every chunk of one state holding
    the chunks ``selected`` (in any order).

    Gaps: G_0 = [0, s_1) and G_j = [s_j, s_{j+1}) (each starts at a selected index, inclusive),
    s_1 < … < s_m the selected indices, s_{m+1} = N. For chunk i in G_j with offset r and gap
    length n:
      linspace: δ·j + ⌊ℓ·r/(n−1)⌋ (0 when n = 1);  paper (Eq. 6): δ·j + ⌊ℓ·r/n⌋,
    with ℓ = int(0.9·δ). The integer form equals the reference's float32 linspace path exactly
    (tests/rl/test_positions.py checks it against a float emulation).
    """
    _check_formula(formula)
    ell = int(0.9 * step_size)
    bounds = [0, *sorted(selected), n_chunks]
    codes = np.empty(n_chunks, dtype=np.int64)
    for j in range(len(bounds) - 1):
        start, end = bounds[j], bounds[j + 1]
        n = end - start  # 0 for G_0 when s_1 = 0: it still counts in j
        divisor = n - 1 if formula == "linspace" else n  # linspace, n = 1: r = 0, code δ·j
        codes[start:end] = step_size * j + ell * np.arange(n) // max(divisor, 1)
    return codes


def relative_codes(selected: torch.Tensor, step_size: int, formula: str = "linspace") -> torch.Tensor:
    """The fast path: :func:`relative_codes_by_gap` of every chunk, from the bool mask of selected
    chunks ([N], or [S, N] for S states of one sample at once), as tensor operations on the mask's
    device. Per chunk i: j = the selected chunks at or left of i, the gap's start = the last selected
    index ≤ i (else 0) and its end = the first selected index > i (else N)."""
    _check_formula(formula)
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
    else:
        within = (ell * r) // n
    return step_size * j + within


def random_codes(n_chunks: int, rng: np.random.Generator, max_chunks_count: int = 2000) -> np.ndarray:
    """DESIGN §3.5: 5 contiguous segments, each shifted by a sorted random indent."""
    if n_chunks < 6 or n_chunks >= max_chunks_count:
        raise ValueError(f"random positions need 6 <= N < max_chunks_count={max_chunks_count}, got N={n_chunks}")
    cuts = np.sort(rng.choice(np.arange(1, n_chunks), size=4, replace=False))
    indents = np.sort(rng.integers(0, max_chunks_count - n_chunks, size=5))
    segment = np.searchsorted(cuts, np.arange(n_chunks), side="right")
    return np.arange(n_chunks) + indents[segment]
