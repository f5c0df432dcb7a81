"""Ragged per-sample rows in one padded layout, so one kernel serves all E episodes or S states.

Each sample has its own chunk count N_r; acting, targets and evaluation once looped over samples,
paying ~10 small GPU kernels per sample and step (a qa3 micro-step with E = 16 ran 20 084 ops on the
CPU before and 12 128 after, docs/BENCH.md "Round 4"). Here row r of a [R, N_max] layout holds sample r's N_r entries first and pads after;
the index and masks are built on the host with numpy and copied once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from rl.model.fast.staging import to_device


def pad_index(lengths: Sequence[int], offsets: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(index [R, N_max] int64, valid [R, N_max] bool) for rows of ``lengths`` stored at ``offsets``
    of a flat tensor (default: laid end to end). Pads index entry 0 (any in-range entry: the
    caller masks them with ``valid``)."""
    lens = np.asarray(lengths, dtype=np.int64)
    if offsets is None:
        offsets = np.concatenate([[0], np.cumsum(lens)[:-1]])
    n_max = int(lens.max()) if len(lens) else 0
    cols = np.arange(n_max)
    valid = cols < lens[:, None]
    index = np.where(valid, np.asarray(offsets, dtype=np.int64)[:, None] + cols, 0)
    return index, valid


def pad_rows(rows: Sequence[torch.Tensor], fill: float | bool) -> torch.Tensor:
    """Tensors [N_r, ...] as one [R, N_max, ...], ``fill`` after each row's end: one concatenation,
    one gather and one masked fill whatever R is (rows of one length: one stack; one row: a view)."""
    if len(rows) == 1:
        return rows[0].unsqueeze(0)
    if len({len(r) for r in rows}) == 1:
        return torch.stack(list(rows))
    index, valid = pad_index([len(r) for r in rows])
    dev = rows[0].device
    flat = torch.cat(list(rows))
    index_t, valid_t = to_device(np.stack([index, valid]), dev)
    out = flat[index_t]
    pads = ~valid_t.bool().view(*valid_t.shape, *([1] * (out.dim() - 2)))
    return out.masked_fill(pads, fill)


def availability_rows(n_chunks: Sequence[int], selections: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(available, valid) [S, N_max] bool on the host: chunk j of state i's sample is available
    unless it is in ``selections[i]``; pads (j ≥ n_chunks[i]) are neither available nor valid."""
    _, valid = pad_index(n_chunks)
    avail = valid.copy()
    for row, sel in enumerate(selections):
        avail[row, list(sel)] = False
    return avail, valid


def availability(n_chunks: int, selections: Sequence[Sequence[int]], device: torch.device) -> torch.Tensor:
    """[S, N] bool: chunk j is available in state i unless it is in ``selections[i]`` (built on the
    host, one copy)."""
    avail, _ = availability_rows([n_chunks] * len(selections), selections)
    return to_device(avail, device)
