"""Host-to-device copies through a pool of reused pinned buffers.

A copy from pageable host memory may wait for the GPU's queue (the driver stages it through its own
pinned memory), which stalls a host that runs ahead of the GPU; so host-built tensors go over from
pinned memory. Pinning a fresh buffer per copy (``Tensor.pin_memory()``) cost 0.57 ms per call in a
qa3 step and ~2.7 ms per haystack slice on an H200 (docs/BENCH.md, Round 5). Here pinned buffers are
kept and reused: a buffer is free again once the copy that read it is done (its CUDA event; events of
one stream complete in order, so the oldest copies are checked first). The host never waits while
the pool is under ``cap_bytes``: with no free buffer that fits, it pins a new one. Only a pool at its
cap waits for the oldest copies, which bounds how far ahead of the GPU the host can stage.
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


class PinnedPool:
    """Reused host buffers, each busy until the event of the copy that last read it has completed.

    ``pin`` and ``event`` are the buffers' memory kind and the event factory: pinned memory and CUDA
    events on a GPU; tests pass plain memory and a stand-in whose completion they control."""

    def __init__(self, cap_bytes: int = CAP_BYTES, pin: bool = True, event: Callable[[], Any] | None = None):
        self.cap_bytes, self.pin = cap_bytes, pin
        self.event = event or torch.cuda.Event
        self.free: list[torch.Tensor] = []
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
            ev.record()
            self.busy.append((buf, ev))
        return dst

    def to_device(self, src: np.ndarray | torch.Tensor, device: torch.device) -> torch.Tensor:
        """A new device tensor holding ``src``."""
        arr = src.numpy() if isinstance(src, torch.Tensor) else np.asarray(src)
        return self.copy_into(torch.empty(arr.shape, dtype=_torch_dtype(arr.dtype), device=device), arr)

    def _take(self, nbytes: int) -> torch.Tensor:
        """A free buffer of at least ``nbytes``: the smallest that fits, else a new one, else (at the
        cap) one freed by waiting for the oldest copies."""
        self._release(wait=False)
        size = max(MIN_BUFFER, 1 << (max(nbytes, 1) - 1).bit_length())  # powers of two: few sizes, reused
        while True:
            fits = [i for i, b in enumerate(self.free) if b.numel() >= nbytes]
            if fits:
                return self.free.pop(min(fits, key=lambda i: self.free[i].numel()))
            if self.held_bytes + size <= self.cap_bytes or not (self.busy or self.free):
                self.held_bytes += size
                return torch.empty(size, dtype=torch.uint8, pin_memory=self.pin)
            if self.free:  # all too small for this copy: give one's memory back for a larger buffer
                self.held_bytes -= self.free.pop().numel()
            else:
                self._release(wait=True)

    def _release(self, wait: bool) -> None:
        """Move buffers whose copies are done to the free list (oldest first); with ``wait``, wait for
        the oldest copy in flight first."""
        if wait and self.busy:
            self.busy[0][1].synchronize()
        while self.busy and self.busy[0][1].query():
            buf, ev = self.busy.popleft()
            self.free.append(buf)
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
    if isinstance(t, torch.Tensor):
        t = t.contiguous()
    return pool_for(device).to_device(t, device)


def copy_into(dst: torch.Tensor, src: np.ndarray) -> torch.Tensor:
    """``dst`` ← ``src``: through the pinned pool on a GPU, a plain copy on the CPU."""
    if dst.device.type != "cuda":
        return dst.copy_(torch.from_numpy(np.ascontiguousarray(src)))
    return pool_for(dst.device).copy_into(dst, src)
