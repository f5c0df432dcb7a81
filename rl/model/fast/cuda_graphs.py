"""CUDA-graph replays of small gradient-free encoder calls (``speed.cuda_graphs``).

A BERT-base forward over one state is ~250 kernel launches driven by Python, which take longer to
issue than the GPU takes to run them (docs/BENCH.md); the acting loop makes one such call per
step. Here each (rows, width, dropout mode, autocast dtype)
bucket is captured once and replayed: inputs are padded up to the bucket (rows to a power of
two, width to a coarse grid) and the attention mask hides the padding, so the embeddings are
those of the unpadded call. Dropout in train mode draws fresh masks at every replay (PyTorch's
graph-safe RNG), so acting with dropout is still stochastic.

Weights are read in place, so optimiser steps, EMA updates and ``load_state_dict`` (all in-place
copies) are seen by later replays. All graphs of a Q-network share one memory pool: replays run on
one stream and every output is copied out at once, so no graph reads another's buffers.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from rl.model.fast.staging import copy_into
from rl.model.tokens.ragged import as_seq_set

log = logging.getLogger(__name__)

ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
WIDTH_BUCKETS = (16, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 448, 512)


def _bucket(x: int, grid: Sequence[int]) -> int | None:
    for b in grid:
        if x <= b:
            return b
    return None


class GraphedEncoder:
    """Replays an Embedder's forward from CUDA graphs for calls that fit a bucket."""

    def __init__(
        self,
        encoder: nn.Module,
        pad: int,
        left: bool,
        amp: torch.dtype | None,
        pool: Any,
        max_tokens: int = 1 << 15,
        max_width: int = 512,
    ):
        self.encoder, self.pad, self.left, self.amp, self.pool = encoder, pad, left, amp, pool
        self.max_tokens, self.max_width = max_tokens, max_width
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self.failed = False

    def key(self, rows: int, width: int) -> tuple | None:
        r, w = _bucket(rows, ROW_BUCKETS), _bucket(width, WIDTH_BUCKETS)
        if self.failed or r is None or w is None or w > self.max_width or r * w > self.max_tokens:
            return None
        return r, w, bool(self.encoder.training)

    def __call__(self, seqs: Any) -> torch.Tensor | None:
        """[len(seqs), d] fp32 embeddings, or None when the call fits no bucket (run it eagerly).
        ``seqs``: id lists or an IdLists/FramedIds set."""
        seqs = as_seq_set(seqs)
        n = len(seqs)
        key = self.key(n, int(seqs.lens.max()))
        if key is None:
            return None
        if key not in self.graphs:
            self._capture_row_bucket(key[0], key[2])
        entry = self.graphs.get(key)
        if entry is None:
            return None
        graph, ids, mask, out = entry
        host_ids = np.full((key[0], key[1]), self.pad, dtype=np.int64)
        host_mask = np.zeros((key[0], key[1]), dtype=np.int64)
        host_ids[:n], host_mask[:n] = seqs.rows(np.arange(n), key[1], self.pad, self.left)
        host_mask[n:, -1 if self.left else 0] = 1  # filler rows attend to one pad token (no NaN)
        copy_into(ids, host_ids)  # pageable if tiny, else the pinned pool: the host does not wait
        copy_into(mask, host_mask)
        graph.replay()
        return out[:n].clone()

    def _capture_row_bucket(self, rows: int, train: bool) -> None:
        """Capture every width of a (rows, mode) bucket at its first use: evaluation and acting
        states change width from step to step, and a capture in the middle of a timed episode
        costs more than the replays save."""
        for width in WIDTH_BUCKETS:
            key = self.key(rows, width)
            if key is not None and key not in self.graphs and not self.failed:
                self._capture(key)

    def _capture(self, key: tuple):
        rows, width, _ = key
        dev = next(self.encoder.parameters()).device
        ids = torch.full((rows, width), self.pad, dtype=torch.long, device=dev)
        mask = torch.ones((rows, width), dtype=torch.long, device=dev)
        # the autocast weight cache would freeze the bf16 weight copies inside the graph
        amp = dict(
            device_type="cuda", dtype=self.amp or torch.float32, enabled=self.amp is not None, cache_enabled=False
        )
        try:
            side = torch.cuda.Stream(dev)
            side.wait_stream(torch.cuda.current_stream(dev))
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.stream(side), torch.no_grad(), torch.autocast(**amp):
                for _ in range(2):  # warm-up outside the graph (lazy init, cuBLAS workspaces)
                    self.encoder(ids, mask, True)
                # capture_begin/end rather than the torch.cuda.graph context, which runs
                # gc.collect() and empty_cache() at every capture (tens of ms in a big process)
                graph.capture_begin(pool=self.pool)
                try:
                    out = self.encoder(ids, mask, True)
                finally:
                    graph.capture_end()
            torch.cuda.current_stream(dev).wait_stream(side)
        except RuntimeError as e:  # e.g. a backbone that syncs inside its forward
            log.warning("CUDA graph capture failed (%s); encoder calls stay eager", e)
            self.failed = True
            return None
        self.graphs[key] = (graph, ids, mask, out)
        return self.graphs[key]
