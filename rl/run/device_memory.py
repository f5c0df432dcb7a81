"""A CUDA run's device memory, in GiB: each training log window's peaks and each metrics.jsonl row's.

Runs share a card (CUDA MPS, several runs a GPU), so what matters is the most each run's caching
allocator held and when: the warm-up's loss pass may set it (docs/BENCH.md, "Host memory of the qa3
recipe on the CPU"). The allocator's counters are host-side (no device sync): every reading takes
the peaks since the previous reading and resets them, so a log window's peaks cover the optimiser
steps since the previous window (or evaluation), and a row's cover everything since the previous row,
its evaluation included. On the CPU there is nothing to read and no key is written, so a CPU run's
metrics.jsonl stays byte-identical to one written before this existed.
"""

from __future__ import annotations

import torch

GIB = 2**30
PEAK_ALLOCATED, PEAK_RESERVED, RESERVED = "gpu/peak_allocated_gib", "gpu/peak_reserved_gib", "gpu/reserved_gib"


class DeviceMemory:
    def __init__(self, device: torch.device):
        self.device = device if device.type == "cuda" else None
        self.since_row: dict[str, float] = {}  # the windows' peaks since the previous row

    def window(self) -> dict[str, float]:
        """At a log window: the peaks since the previous reading and the memory reserved now ({} off CUDA)."""
        if self.device is None:
            return {}
        now = self._read()
        for k in (PEAK_ALLOCATED, PEAK_RESERVED):
            self.since_row[k] = max(self.since_row.get(k, 0.0), now[k])
        return now

    def row(self) -> dict[str, float]:
        """At a metrics.jsonl row: the peaks since the previous row (its windows' and the evaluation's since
        the last window) and the memory reserved now ({} off CUDA)."""
        if self.device is None:
            return {}
        now = self._read()
        for k in (PEAK_ALLOCATED, PEAK_RESERVED):
            now[k] = max(self.since_row.get(k, 0.0), now[k])
        self.since_row = {}
        return now

    def _read(self) -> dict[str, float]:
        d = self.device
        out = {
            PEAK_ALLOCATED: torch.cuda.max_memory_allocated(d) / GIB,
            PEAK_RESERVED: torch.cuda.max_memory_reserved(d) / GIB,
            RESERVED: torch.cuda.memory_reserved(d) / GIB,
        }
        torch.cuda.reset_peak_memory_stats(d)
        return out
