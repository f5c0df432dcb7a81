"""Host-to-device copies: small ones from pageable memory, the rest through a pool of reused pinned
buffers.

A copy from pageable host memory waits for the GPU's queue once it is larger than a few KB (the
driver stages it through its own pinned memory), which stalls a host that runs ahead of the GPU; so
larger host-built tensors go over from pinned memory. Pinning a fresh buffer per copy
(``Tensor.pin_memory()``) allocates whenever the earlier blocks are still being read by queued
copies (0.57 ms per call in a qa3 step, ~2.7 ms per haystack slice on an H200; docs/BENCH.md, Round
5). Here pinned buffers are kept and reused: a buffer is free again once the copy that read it is done
(its CUDA event; events of one stream complete in order, so the oldest copies are checked first).
The host never waits while the pool is under ``cap_bytes``: with no free buffer of the size class,
it pins a new one. Only a pool at its cap waits for the oldest copies, which bounds how far ahead of
the GPU the host can stage.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

CAP_BYTES = 256 << 20  # pinned host memory one pool may hold (a W4 haystack stages ~450 MB in all)
MIN_BUFFER = 1 << 12
# Copies up to this size go from pageable memory: 10-30 µs each and never waited for a busy GPU on an
# H200, where a pinned copy costs 25-90 µs of host time; from 128 KB on, pageable copies waited for the
# GPU's queue (experiments/bench/bench_copies.py, docs/BENCH.md "Round 6").
PAGEABLE_MAX = 1 << 12


class PinnedPool:
    """Reused host buffers in power-of-two size classes, each busy until the event of the copy that
    last read it has completed.

    ``pin`` and ``event`` are the buffers' memory kind and the event factory: pinned memory and CUDA
    events on a GPU; tests pass plain memory and a stand-in whose completion they control."""

    def __init__(self, cap_bytes: int = CAP_BYTES, pin: bool = True, event: Callable[[], Any] | None = None):
        self.cap_bytes, self.pin = cap_bytes, pin
        self.event = event or torch.cuda.Event
        self.free: dict[int, list[torch.Tensor]] = {}  # size class -> free buffers
        self.busy: deque[tuple[torch.Tensor, Any]] = deque()  # oldest copy first
        self.spare_events: list[Any] = []
        self.held_bytes = 0
        self.lock = threading.Lock()  # the tokenising worker thread never copies, but be safe

    def copy_into(self, dst: torch.Tensor, src: np.ndarray | torch.Tensor) -> torch.Tensor:
        """``dst`` (on the device) ← ``src`` (host), without waiting for the device's queue."""
        src = src.numpy() if isinstance(src, torch.Tensor) else np.asarray(src)
        with self.lock:
            buf = self._take(src.nbytes)
            host = buf[: src.nbytes].view(_torch_dtype(src.dtype)).view(src.shape)
            np.copyto(host.numpy(), src, casting="no")
            dst.copy_(host, non_blocking=True)
            ev = self.spare_events.pop() if self.spare_events else self.event()
            # on the copy's own stream: a sweep job on cuda:1 keeps cuda:0 as its current device
            ev.record(torch.cuda.current_stream(dst.device) if dst.is_cuda else None)
            self.busy.append((buf, ev))
        return dst

    def to_device(self, src: np.ndarray | torch.Tensor, device: torch.device) -> torch.Tensor:
        """A new device tensor holding ``src``."""
        arr = src.numpy() if isinstance(src, torch.Tensor) else np.asarray(src)
        return self.copy_into(torch.empty(arr.shape, dtype=_torch_dtype(arr.dtype), device=device), arr)

    def _take(self, nbytes: int) -> torch.Tensor:
        """A free buffer of ``nbytes``' size class, else a new one, else (at the cap) one freed by
        waiting for the oldest copies."""
        size = max(MIN_BUFFER, 1 << (max(nbytes, 1) - 1).bit_length())
        self._release(wait=False)
        while True:
            if self.free.get(size):
                return self.free[size].pop()
            others = [k for k, bufs in self.free.items() if bufs]
            if self.held_bytes + size <= self.cap_bytes or not (self.busy or others):
                self.held_bytes += size
                return torch.empty(size, dtype=torch.uint8, pin_memory=self.pin)
            if others:  # free buffers of other sizes: give one's memory back for this size
                self.held_bytes -= self.free[max(others)].pop().numel()
            else:
                self._release(wait=True)

    def _release(self, wait: bool) -> None:
        """Move buffers whose copies are done to the free lists (oldest first); with ``wait``, wait
        for the oldest copy in flight first."""
        if wait and self.busy:
            self.busy[0][1].synchronize()
        while self.busy and self.busy[0][1].query():
            buf, ev = self.busy.popleft()
            self.free.setdefault(buf.numel(), []).append(buf)
            self.spare_events.append(ev)


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


_POOLS: dict[torch.device, PinnedPool] = {}


def pool_for(device: torch.device) -> PinnedPool:
    """The process's pool for copies to ``device`` (a CUDA device)."""
    if device not in _POOLS:
        _POOLS[device] = PinnedPool()
    return _POOLS[device]


def to_device(t: np.ndarray | torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host array or tensor on ``device``: to a GPU through the pinned pool (the copy does not
    wait for the GPU's queue); on the CPU the tensor itself (a numpy array: a tensor sharing it)."""
    device = torch.device(device)
    if device.type != "cuda":
        return torch.from_numpy(t) if isinstance(t, np.ndarray) else t
    if isinstance(t, np.ndarray):
        t = torch.from_numpy(t)
    if t.nbytes <= PAGEABLE_MAX:
        return t.to(device, non_blocking=True)
    return pool_for(device).to_device(t.contiguous(), device)


def copy_into(dst: torch.Tensor, src: np.ndarray) -> torch.Tensor:
    """``dst`` ← ``src``: through the pinned pool on a GPU, a plain copy on the CPU."""
    if dst.device.type != "cuda" or src.nbytes <= PAGEABLE_MAX:
        return dst.copy_(torch.from_numpy(np.ascontiguousarray(src)), non_blocking=True)
    return pool_for(dst.device).copy_into(dst, src)
