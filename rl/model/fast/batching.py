"""Encoder calls over many id sequences: padding, length bucketing (``speed.length_bucketing``)
and host-to-device staging.

Bucketed, sequences are sorted by length and cut into calls by a padding + launch cost model
(:func:`plan_slices`), so each call pads only to its own longest member; without it they run in
input order, padded as the reference pads them. Both give the same embeddings
(tests/rl/test_speed.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rl.model.fast.staging import to_device
from rl.model.tokens.ragged import as_seq_set


def pad_batch(
    seqs: Any,
    pad: int,
    device: torch.device,
    left: bool = False,
    width: int | None = None,
    idx: np.ndarray | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad id lists (or an IdLists/FramedIds set; only rows ``idx`` if given) into (input_ids,
    attention_mask) tensors on ``device``, to the longest sequence or to ``width`` if larger."""
    seqs = as_seq_set(seqs)
    idx = np.arange(len(seqs)) if idx is None else idx
    ids, mask = seqs.rows(idx, max(int(seqs.lens[idx].max()), width or 0), pad, left)
    return to_device(ids, device), to_device(mask.astype(np.int64), device)


def plan_slices(
    sorted_lens: np.ndarray, max_batch: int, token_budget: int, call_cost: int = 4096
) -> list[tuple[int, int]]:
    """Cut length-sorted sequences into encoder calls [start, stop) minimising padded tokens plus
    ``call_cost`` token-equivalents per call (launch overhead), with at most ``max_batch`` rows
    and ``token_budget`` padded tokens per call. A DP over cuts between distinct lengths (optimal
    among those cuts; cutting inside a run of equal lengths can save a little when the row limit
    binds): a call padding a few short sequences up is cheaper than a call of its own, and a
    large haystack splits into equal-length calls (no mask at all)."""
    widths, counts = np.unique(sorted_lens, return_counts=True)
    ends = np.cumsum(counts)  # end (exclusive) of each length group in the sorted order
    k_groups = len(widths)
    best = np.full(k_groups + 1, np.inf)
    best[0] = 0.0
    choice = np.zeros(k_groups + 1, dtype=np.int64)
    starts = np.concatenate(([0], ends[:-1]))
    per_call = np.maximum(1, np.minimum(max_batch, token_budget // widths))  # rows per call at each width
    for k in range(1, k_groups + 1):  # groups [j, k) padded to widths[k-1]
        rows = ends[k - 1] - starts[:k]
        cost = best[:k] + np.ceil(rows / per_call[k - 1]) * call_cost + rows * int(widths[k - 1])
        choice[k] = int(np.argmin(cost))
        best[k] = cost[choice[k]]
    cuts: list[tuple[int, int]] = []
    k = k_groups
    while k > 0:
        j = choice[k]
        lo, hi = int(starts[j]), int(ends[k - 1])
        n_calls = -(-(hi - lo) // int(per_call[k - 1]))
        bounds = np.linspace(lo, hi, n_calls + 1).round().astype(int)  # even split
        cuts[:0] = list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))
        k = j
    return cuts


def embed_sequences(
    encoder: Any,
    seqs: Any,
    pad: int,
    device: torch.device,
    max_batch: int,
    autocast_dtype: torch.dtype | None = None,
    left: bool = False,
    bucket: bool = True,
    token_budget: int = 1 << 17,
    pad_to: int | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Embed many id sequences (lists, or an IdLists/FramedIds set); returns [len(seqs), d] fp32
    in input order (written into ``out`` if given).

    ``bucket``: sorted by length and cut by :func:`plan_slices`, so each call pads only to its
    own longest member and peak activation memory stays bounded whatever the haystack size;
    results land in sorted order and are put back with one scatter (no per-call sync).
    Without it (the reference's schedule): input order, ``max_batch`` rows per call, every
    sequence padded to ``pad_to`` (or the call's longest)."""
    seqs = as_seq_set(seqs)
    n = len(seqs)
    if out is None:
        out = torch.empty((n, encoder.dim), device=device, dtype=torch.float32)
    if n == 0:
        return out
    amp = dict(device_type=device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None)
    lens = seqs.lens
    if not bucket:
        for start in range(0, n, max_batch):
            idx = np.arange(start, min(n, start + max_batch))
            padded = pad_to is not None or bool((lens[idx] != lens[idx].max()).any())
            ids_t, mask_t = pad_batch(seqs, pad, device, left, width=pad_to, idx=idx)
            with torch.autocast(**amp):
                out[start : start + len(idx)] = encoder(ids_t, mask_t, padded).float()
        return out
    order = np.argsort(lens, kind="stable")
    sorted_out = torch.empty_like(out)
    calls = plan_slices(lens[order], max_batch, token_budget)
    # Calls are staged in groups of ~1M padded tokens: one pinned buffer and one copy per group
    # (pinning a buffer costs more than a small call's copy), small enough that the GPU starts early.
    group: list[tuple[int, int]] = []
    staged = 0  # padded tokens in the group
    for k, (start, stop) in enumerate(calls):
        group.append((start, stop))
        staged += (stop - start) * int(lens[order[stop - 1]])
        if staged >= 1 << 20 or k == len(calls) - 1:
            hosts = [seqs.rows(order[a:b], int(lens[order[b - 1]]), pad, left) for a, b in group]
            flat = np.concatenate([x.ravel() for ids, mask in hosts for x in (ids, mask.astype(np.int64))])
            dev = to_device(flat, device)
            pos = 0
            for (a, b), (ids, _) in zip(group, hosts):
                ids_t = dev[pos : pos + ids.size].view(ids.shape)
                mask_t = dev[pos + ids.size : pos + 2 * ids.size].view(ids.shape)
                pos += 2 * ids.size
                with torch.autocast(**amp):  # equal first and last length (sorted) = no padding
                    sorted_out[a:b] = encoder(ids_t, mask_t, bool(lens[order[a]] != lens[order[b - 1]])).float()
            group, staged = [], 0
    out.index_copy_(0, to_device(order, device), sorted_out)
    return out
