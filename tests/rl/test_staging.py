"""The pinned ring of host-to-device copies (rl/model/fast/staging.py): values arrive intact, a
buffer is reused only after the copy that last read it is done, buffers grow and are kept."""

import numpy as np
import pytest
import torch

from rl.model.fast.staging import PinnedRing, copy_into, to_device


class RecordingEvent:
    """Stands in for a CUDA event: logs when it is recorded and waited for."""

    log: list[tuple[str, int]] = []
    count = 0

    def __init__(self):
        RecordingEvent.count += 1
        self.id = RecordingEvent.count

    def record(self, stream=None):
        RecordingEvent.log.append(("record", self.id))

    def synchronize(self):
        RecordingEvent.log.append(("wait", self.id))


def _arrays(rng):
    """Host arrays of the kinds the model copies: ids, masks, codes, float rewards, 0-size."""
    return [
        rng.integers(0, 30000, size=(5, 7)),
        rng.integers(0, 2, size=(3, 11)).astype(bool),
        rng.integers(-5, 5, size=40).astype(np.int32),
        rng.standard_normal((2, 64)).astype(np.float32),
        np.zeros((0, 4), dtype=np.int64),
        rng.integers(0, 9, size=(4, 3)).T,  # not contiguous
        rng.integers(0, 30000, size=5000),
    ]


def test_ring_copies_values_and_waits_before_reuse():
    RecordingEvent.log, RecordingEvent.count = [], 0
    ring = PinnedRing(slots=3, pin=False, event=RecordingEvent)
    rng = np.random.default_rng(0)
    arrays = _arrays(rng)
    outs = [ring.to_device(a, torch.device("cpu")) for a in arrays]
    for a, o in zip(arrays, outs):
        assert o.dtype == torch.from_numpy(np.ascontiguousarray(a)).dtype and o.shape == a.shape
        np.testing.assert_array_equal(o.numpy(), a)
        assert not np.shares_memory(o.numpy(), a)  # a copy, not a view of the caller's array
    # copy k (k ≥ 3) reuses slot k mod 3: it first waits for that slot's event, recorded by copy k - 3
    events = [e for kind, e in RecordingEvent.log if kind == "record"]
    waits = [e for kind, e in RecordingEvent.log if kind == "wait"]
    assert events == [1, 2, 3, 1, 2, 3, 1] and waits == [1, 2, 3, 1]
    order = RecordingEvent.log
    for k in range(3, len(arrays)):  # each wait comes before the record of the copy that reuses the slot
        assert order.index(("wait", events[k])) < [i for i, x in enumerate(order) if x == ("record", events[k])][1]


def test_buffers_grow_and_are_kept():
    ring = PinnedRing(slots=1, pin=False, event=RecordingEvent)
    small = np.arange(10, dtype=np.int64)
    ring.to_device(small, torch.device("cpu"))
    first = ring.buffers[0]
    ring.to_device(small[:3], torch.device("cpu"))
    assert ring.buffers[0] is first  # a smaller copy reuses the buffer
    big = np.arange(100_000, dtype=np.int64)
    out = ring.to_device(big, torch.device("cpu"))
    assert ring.buffers[0] is not first and ring.buffers[0].numel() >= big.nbytes
    np.testing.assert_array_equal(out.numpy(), big)


def test_copy_into_converts_to_the_destinations_dtype():
    ring = PinnedRing(slots=2, pin=False, event=RecordingEvent)
    dst = torch.zeros(6, dtype=torch.float64)
    ring.copy_into(dst, np.arange(6, dtype=np.int32))
    assert dst.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_cpu_helpers_need_no_gpu():
    a = np.arange(6).reshape(2, 3)
    t = to_device(a, torch.device("cpu"))
    assert np.shares_memory(t.numpy(), a)  # on the CPU: no copy, as before
    dst = torch.empty(2, 3, dtype=torch.int64)
    copy_into(dst, a)
    assert dst.tolist() == a.tolist()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_copies_survive_a_busy_queue():
    """The host runs far ahead of a busy GPU and reuses 2 buffers for 32 copies: each device tensor
    must hold its own array (without the event wait, later arrays overwrite pending copies)."""
    dev = torch.device("cuda")
    ring = PinnedRing(slots=2)
    x = torch.randn(4096, 4096, device=dev)
    for _ in range(20):  # a long queue ahead of the copies
        x = x @ x
        x = x / x.norm()
    arrays = [np.full((256, 1024), k, dtype=np.int64) for k in range(32)]
    outs = [ring.to_device(a, dev) for a in arrays]
    torch.cuda.synchronize()
    for k, o in enumerate(outs):
        assert bool((o == k).all()), k
