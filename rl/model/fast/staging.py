"""Host-to-device copies through a ring of reused pinned buffers.

A copy from pageable host memory may wait for the GPU's queue (the driver stages it through its own
pinned memory), which stalls a host that runs ahead of the GPU; so every host-built tensor goes over
from pinned memory. Pinning a fresh buffer per copy (``Tensor.pin_memory()``) cost 0.57 ms per call
in a qa3 step and ~2.7 ms per haystack slice on an H200 (docs/BENCH.md, Round 5): PyTorch's caching
host allocator reuses a block only once the copy that last read it has finished, and a host far ahead
of the GPU finds none finished, so it allocates. Here a few buffers are kept and reused in turn; before
one is overwritten the host waits for the copy that last read it (a CUDA event), which only happens
when the host is already that many copies ahead. A buffer grows to the largest copy it has carried.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

SLOTS = 4  # copies in flight before the host waits for the oldest


class PinnedRing:
    """Reused host buffers, each guarded by the event of the last copy that read it.

    ``pin`` and ``event`` are the buffer's memory kind and the event factory: pinned memory and CUDA
    events on a GPU; tests pass plain memory and a recording stand-in."""

    def __init__(self, slots: int = SLOTS, pin: bool = True, event: Callable[[], Any] | None = None):
        self.pin = pin
        self.event = event or torch.cuda.Event
        self.buffers: list[torch.Tensor | None] = [None] * slots
        self.events: list[Any] = [None] * slots
        self.next = 0
        self.lock = threading.Lock()  # the tokenising worker thread never copies, but be safe

    def copy_into(self, dst: torch.Tensor, src: np.ndarray | torch.Tensor) -> torch.Tensor:
        """``dst`` (on the device) ← ``src`` (host), without waiting for the device's queue."""
        src = src.numpy() if isinstance(src, torch.Tensor) else np.asarray(src)
        with self.lock:
            k = self.next
            self.next = (k + 1) % len(self.buffers)
            if self.events[k] is not None:
                self.events[k].synchronize()  # the copy that last read this buffer is done
            buf = self.buffers[k]
            if buf is None or buf.numel() < src.nbytes:
                size = max(src.nbytes, 2 * (0 if buf is None else buf.numel()), 1 << 12)
                buf = self.buffers[k] = torch.empty(size, dtype=torch.uint8, pin_memory=self.pin)
            host = buf[: src.nbytes].view(_torch_dtype(src.dtype)).view(src.shape)
            np.copyto(host.numpy(), src, casting="no")
            dst.copy_(host, non_blocking=True)
            if self.events[k] is None:
                self.events[k] = self.event()
            if dst.is_cuda:
                self.events[k].record(torch.cuda.current_stream(dst.device))
            else:
                self.events[k].record()
        return dst

    def to_device(self, src: np.ndarray | torch.Tensor, device: torch.device) -> torch.Tensor:
        """A new device tensor holding ``src``."""
        arr = src.numpy() if isinstance(src, torch.Tensor) else np.asarray(src)
        return self.copy_into(torch.empty(arr.shape, dtype=_torch_dtype(arr.dtype), device=device), arr)


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


_RINGS: dict[torch.device, PinnedRing] = {}


def ring_for(device: torch.device) -> PinnedRing:
    """The process's ring for copies to ``device`` (a CUDA device)."""
    device = torch.device(device)
    if device not in _RINGS:
        _RINGS[device] = PinnedRing()
    return _RINGS[device]


def to_device(t: np.ndarray | torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host array or tensor on ``device``: to a GPU through the pinned ring (the copy does not
    wait for the GPU's queue); on the CPU the tensor itself (a numpy array: a tensor sharing it)."""
    device = torch.device(device)
    if device.type != "cuda":
        return torch.from_numpy(t) if isinstance(t, np.ndarray) else t
    if isinstance(t, torch.Tensor):
        t = t.contiguous()
    return ring_for(device).to_device(t, device)


def copy_into(dst: torch.Tensor, src: np.ndarray) -> torch.Tensor:
    """``dst`` ← ``src``: through the pinned ring on a GPU, a plain copy on the CPU."""
    if dst.device.type != "cuda":
        return dst.copy_(torch.from_numpy(np.ascontiguousarray(src)))
    return ring_for(dst.device).copy_into(dst, np.ascontiguousarray(src))
