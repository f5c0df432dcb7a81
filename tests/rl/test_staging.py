"""The pinned pool of host-to-device copies (rl/model/fast/staging.py): values arrive intact, a
buffer is reused only once the copy that read it is done, the host waits only at the pool's cap."""

import numpy as np
import pytest
import torch

from rl.model.fast.staging import MIN_BUFFER, PAGEABLE_MAX, PinnedPool, copy_into, to_device

CPU = torch.device("cpu")


class Event:
    """Stands in for a CUDA event: the test says when its copy is done; waits are logged."""

    made: list["Event"] = []
    waits: list[int] = []

    def __init__(self):
        self.done = False
        self.id = len(Event.made)
        Event.made.append(self)

    def record(self, stream=None):
        self.done = False

    def query(self):
        return self.done

    def synchronize(self):
        Event.waits.append(self.id)
        self.done = True


@pytest.fixture(autouse=True)
def fresh_events():
    Event.made, Event.waits = [], []


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


def test_values_arrive_intact_and_the_host_never_waits_under_the_cap():
    pool = PinnedPool(pin=False, event=Event)
    arrays = _arrays(np.random.default_rng(0))
    outs = [pool.to_device(a, CPU) for a in arrays]  # no copy is ever done: every one needs its own buffer
    for a, o in zip(arrays, outs):
        assert o.dtype == torch.from_numpy(np.ascontiguousarray(a)).dtype and o.shape == a.shape
        np.testing.assert_array_equal(o.numpy(), a)
        assert not np.shares_memory(o.numpy(), a)  # a copy, not a view of the caller's array
    assert Event.waits == [] and len(pool.busy) == len(arrays) and not any(pool.free.values())
    assert len({id(b) for b, _ in pool.busy}) == len(arrays)  # no buffer handed out twice while busy


def test_done_copies_free_their_buffers_for_reuse():
    pool = PinnedPool(pin=False, event=Event)
    small, big = np.arange(10, dtype=np.int64), np.arange(10_000, dtype=np.int64)
    pool.to_device(small, CPU)
    pool.to_device(big, CPU)
    small_buf, big_buf = (b for b, _ in pool.busy)
    assert small_buf.numel() == MIN_BUFFER and big_buf.numel() == 1 << 17  # powers of two
    for e in Event.made:
        e.done = True
    out = pool.to_device(small[:3], CPU)
    assert pool.busy[-1][0] is small_buf  # its size class's free buffer, not the big one
    out2 = pool.to_device(big[:9000], CPU)
    assert pool.busy[-1][0] is big_buf and len(Event.made) == 2  # events reused too
    assert out.tolist() == [0, 1, 2] and out2.tolist() == list(range(9000))
    assert Event.waits == [] and pool.held_bytes == MIN_BUFFER + (1 << 17)


def test_at_the_cap_the_host_waits_for_the_oldest_copy():
    pool = PinnedPool(cap_bytes=3 * MIN_BUFFER, pin=False, event=Event)
    a = [np.full(100, k, dtype=np.int64) for k in range(5)]
    outs = [pool.to_device(x, CPU) for x in a]
    # 3 buffers fit the cap; the 4th copy waits for copy 0, the 5th for copy 1, and reuse their buffers
    assert Event.waits == [0, 1] and pool.held_bytes == 3 * MIN_BUFFER
    assert [o[0].item() for o in outs] == [0, 1, 2, 3, 4]


def test_at_the_cap_too_small_free_buffers_make_room_for_a_larger_one():
    pool = PinnedPool(cap_bytes=4 * MIN_BUFFER, pin=False, event=Event)
    for _ in range(3):
        pool.to_device(np.zeros(10, dtype=np.int64), CPU)
    for e in Event.made:
        e.done = True
    out = pool.to_device(np.arange(1000, dtype=np.int64), CPU)  # 8 000 bytes: a 2 * MIN_BUFFER buffer
    assert out.tolist() == list(range(1000)) and pool.held_bytes <= 4 * MIN_BUFFER and Event.waits == []


def test_copy_into_converts_to_the_destinations_dtype():
    pool = PinnedPool(pin=False, event=Event)
    dst = torch.zeros(6, dtype=torch.float64)
    pool.copy_into(dst, np.arange(6, dtype=np.int32))
    assert dst.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_cpu_helpers_need_no_gpu():
    a = np.arange(6).reshape(2, 3)
    t = to_device(a, CPU)
    assert np.shares_memory(t.numpy(), a)  # on the CPU: no copy, as before
    dst = torch.empty(2, 3, dtype=torch.int64)
    copy_into(dst, a)
    assert dst.tolist() == a.tolist()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cap", [4 << 20, 1 << 30])
def test_gpu_copies_survive_a_busy_queue(cap):
    """The host runs far ahead of a busy GPU: each device tensor must hold its own array, whether
    the pool waits (a cap of two buffers) or grows; small copies (pageable) too."""
    dev = torch.device("cuda")
    pool = PinnedPool(cap_bytes=cap)
    x = torch.randn(4096, 4096, device=dev)
    for _ in range(20):  # a long queue ahead of the copies
        x = x @ x
        x = x / x.norm()
    arrays = [np.full((256, 1024), k, dtype=np.int64) for k in range(32)]
    outs = [pool.to_device(a, dev) for a in arrays]
    small = [np.full(PAGEABLE_MAX // 8, k, dtype=np.int64) for k in range(32)]
    small_outs = [to_device(a, dev) for a in small]
    for a in small:
        a[:] = -1  # the caller reuses its arrays at once
    torch.cuda.synchronize()
    for k, o in enumerate(small_outs):
        assert bool((o == k).all()), k
    torch.cuda.synchronize()
    for k, o in enumerate(outs):
        assert bool((o == k).all()), k


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_copies_to_a_device_that_is_not_the_current_one():
    """A sweep job on cuda:1 keeps cuda:0 as its current device: the pool's events must follow the
    copies' own stream, or buffers are reused while their copies are still pending."""
    dev = torch.device("cuda:1")
    assert torch.cuda.current_device() == 0
    pool = PinnedPool(cap_bytes=4 << 20)
    x = torch.randn(4096, 4096, device=dev)
    for _ in range(20):
        x = x @ x
        x = x / x.norm()
    outs = [pool.to_device(np.full((256, 1024), k, dtype=np.int64), dev) for k in range(32)]
    torch.cuda.synchronize(dev)
    for k, o in enumerate(outs):
        assert o.device == dev and bool((o == k).all()), k
