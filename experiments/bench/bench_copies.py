"""Host cost of one host-to-device copy, by size and way, with the GPU idle and busy (GPU only).

    python experiments/bench/bench_copies.py [--copies 200] [--tree LABEL]

Three ways: ``pageable`` (``torch.from_numpy(a).to(dev, non_blocking=True)``), ``pin`` (a fresh
pinned block per copy, ``pin_memory()``, what rl/model/fast/batching.py did before the pool) and
``pool`` (rl/model/fast/staging.py: reused pinned buffers), and ``to_device``, what the project
calls (pageable up to ``PAGEABLE_MAX`` bytes, the pool above). "busy" queues about 0.3 s of matmuls
first: a way whose copies wait for the GPU's queue shows a host time near that (it blocks), a way
that does not shows its own cost. One JSON line per (way, size, GPU state): host microseconds per
copy; ``blocked`` when the host spent more than half the queued GPU time in the copies.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch

from rl.model.fast.staging import PinnedPool, to_device
from rl.run.config import code_version

SIZES = (1536, 16 << 10, 128 << 10, 1 << 20, 4 << 20)  # bytes: a state's ids ... a haystack slice


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=200)
    ap.add_argument("--tree", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_copies.py needs a CUDA GPU")
        return 2
    dev = torch.device("cuda")
    tree = args.tree or code_version()
    meta = dict(card=torch.cuda.get_device_name(dev), torch=torch.__version__, tree=tree)
    pool = PinnedPool()
    x = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)

    def queue_work() -> None:
        """Queue a few hundred milliseconds of matmuls (timed once below)."""
        for _ in range(250):
            torch.mm(x, x)

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    queue_work()
    torch.cuda.synchronize()
    busy_s = time.perf_counter() - t0
    ways = {
        "pageable": lambda a: torch.from_numpy(a).to(dev, non_blocking=True),
        "pin": lambda a: torch.from_numpy(a).pin_memory().to(dev, non_blocking=True),
        "pool": lambda a: pool.to_device(a, dev),
        "to_device": lambda a: to_device(a, dev),
    }
    for size in SIZES:
        arrays = [np.full(size // 8, k, dtype=np.int64) for k in range(args.copies)]
        for way, copy in ways.items():
            for state in ("idle", "busy"):
                copy(arrays[0])  # warm-up (first pinned allocation, the pool's buffers)
                torch.cuda.synchronize()
                if state == "busy":
                    queue_work()
                t0 = time.perf_counter()
                outs = [copy(a) for a in arrays]
                host = time.perf_counter() - t0
                torch.cuda.synchronize()
                ok = all(bool((o == k).all()) for k, o in enumerate(outs))
                row = dict(
                    workload="copies",
                    way=way,
                    bytes=size,
                    gpu=state,
                    us_per_copy=host / args.copies * 1e6,
                    blocked=bool(state == "busy" and host > busy_s / 2),
                    values_ok=ok,
                    busy_s=busy_s,
                    **meta,
                )
                print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
