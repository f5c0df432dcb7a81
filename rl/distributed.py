"""Process-group helpers for data-parallel training and sharded evaluation (docs/DISTRIBUTED.md).

One script serves 1 or N processes. ``torchrun`` and ``accelerate launch`` set RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR and MASTER_PORT; :func:`setup` joins the group from them (NCCL for CUDA
tensors and gloo for CPU ones when CUDA is present, gloo alone otherwise). Without WORLD_SIZE
(or with WORLD_SIZE=1) every helper is a no-op that costs one boolean check, so the 1-process
path is exactly the plain code.
"""

from __future__ import annotations

import atexit
import datetime
import logging
import os
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from envs.seeding import derive_seed

log = logging.getLogger("qrag.dist")
T = TypeVar("T")

# Rank 0 evaluates while the others wait at a barrier, so the default 10-30 min timeout is too short.
TIMEOUT_ENV = "QRAG_DIST_TIMEOUT_MIN"
DEFAULT_TIMEOUT_MIN = 180


def requested_world() -> int:
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def setup() -> bool:
    """Join the process group described by the launcher's env vars (idempotent). True if N > 1."""
    if dist.is_initialized():
        return True
    if requested_world() <= 1:
        return False
    timeout = datetime.timedelta(minutes=float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_MIN)))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank())
        backend = "cpu:gloo,cuda:nccl"  # CUDA grads through NCCL, CPU tensors/objects through gloo
    else:
        backend = "gloo"
    dist.init_process_group(backend=backend, init_method="env://", timeout=timeout)
    atexit.register(_teardown)
    log.info("process group: rank %d of %d (%s)", rank(), world(), backend)
    return True


def _teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def enabled() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if enabled() else 0


def world() -> int:
    return dist.get_world_size() if enabled() else 1


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0") or 0)


def is_main() -> bool:
    return rank() == 0


def barrier() -> None:
    if enabled():
        dist.barrier()


def sweep_job_num() -> int | None:
    """This process's job number in a Hydra multirun (``-m``), else None."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
    except (ImportError, ValueError):  # not inside a Hydra app (tests, scripts)
        return None
    return int(hc.job.num) if hc.mode == RunMode.MULTIRUN else None


def pick_device(name: str, job_num: int | None = None) -> torch.device:
    """``auto``: a GPU if there is one, else the CPU. Inside a multirun (``job_num``, default
    :func:`sweep_job_num`) ``auto`` and a bare ``cuda`` spread the jobs over the visible GPUs by
    job number, job k on ``cuda:(k mod GPUs)``: a launcher running ``jobs_per_gpu`` x GPUs jobs
    at once (hydra/launcher=parallel) then keeps ``jobs_per_gpu`` of them on each GPU."""
    if job_num is None:
        job_num = sweep_job_num()
    if name in ("auto", None) or (name == "cuda" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            return torch.device("cpu")
        return torch.device(f"cuda:{0 if job_num is None else job_num % torch.cuda.device_count()}")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device={name} but CUDA is not available here; pass device=cpu or device=auto")
    return dev


def device(name: str) -> torch.device:
    """``pick_device`` where ``auto``/``cuda`` mean this process's own GPU (cuda:LOCAL_RANK)."""
    if enabled() and name in ("auto", "cuda", None) and torch.cuda.is_available():
        return torch.device(f"cuda:{local_rank()}")
    return pick_device(name)


def rank_seed(seed: int) -> int:
    """Seed of this rank's environments and behaviour policy: rank 0 keeps the run seed (a
    1-process run is rank 0), rank r > 0 derives its own from (seed, rank)."""
    r = rank() if enabled() else 0
    return int(seed) if r == 0 else derive_seed(int(seed), "rank", r) % 2**31


def all_reduce_mean(tensors: Iterable[torch.Tensor]) -> None:
    """Average tensors over ranks in place, one flat all-reduce per (device, dtype)."""
    if not enabled():
        return
    buckets: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for t in tensors:
        buckets.setdefault((t.device, t.dtype), []).append(t)
    n = world()
    for group in buckets.values():
        flat = torch.cat([t.reshape(-1) for t in group])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat /= n
        offset = 0
        for t in group:
            t.copy_(flat[offset : offset + t.numel()].view_as(t))
            offset += t.numel()


@torch.no_grad()
def average_gradients(params: Iterable[torch.nn.Parameter]) -> None:
    """Mean gradient over ranks. A parameter without a gradient on some rank (unused in its
    forward) counts as zero there; one without a gradient on every rank keeps ``grad = None``."""
    if not enabled():
        return
    params = list(params)
    has = torch.tensor([p.grad is not None for p in params], dtype=torch.uint8)
    dist.all_reduce(has, op=dist.ReduceOp.MAX)
    grads = []
    for p, h in zip(params, has.tolist()):
        if h:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
    all_reduce_mean(grads)


@torch.no_grad()
def broadcast_tensors(tensors: Iterable[torch.Tensor], src: int = 0) -> None:
    """Overwrite floating-point tensors with rank ``src``'s values (start from identical weights)."""
    if not enabled():
        return
    for t in tensors:
        if t.is_floating_point():
            dist.broadcast(t, src=src)


def gather_object(obj: T) -> list[T] | None:
    """Every rank's ``obj`` as a list on rank 0 (None elsewhere); ``[obj]`` without a group."""
    if not enabled():
        return [obj]
    out: list[Any] | None = [None] * world() if is_main() else None
    dist.gather_object(obj, out, dst=0)
    return out


def broadcast_object(obj: T) -> T:
    """Rank 0's ``obj`` on every rank."""
    if not enabled():
        return obj
    box = [obj if is_main() else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]  # type: ignore[return-value]


def run_on_main(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn`` on rank 0 only and hand its result (or its exception) to every rank, so a
    refusal on rank 0 stops all ranks with the same message instead of leaving them waiting."""
    if not enabled():
        return fn(*args, **kwargs)
    result: Any = None
    error: BaseException | None = None
    if is_main():
        try:
            result = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 (re-raised on every rank below)
            error = e
    result, error = broadcast_object((result, error))
    if error is not None:
        raise error
    return result


def check_in_sync(tensors: Iterable[torch.Tensor], what: str) -> None:
    """Raise if ranks hold different values (a cheap float64 checksum per rank)."""
    if not enabled():
        return
    total = sum(float(t.detach().double().sum()) + 1e-3 * float(t.detach().double().abs().sum()) for t in tensors)
    sums = gather_object(total)
    bad = is_main() and len(set(sums)) > 1  # type: ignore[arg-type]
    bad = broadcast_object(bad)
    if bad:
        raise RuntimeError(
            f"{what} differ across ranks (checksums {sums if is_main() else '...'}); "
            f"the data-parallel ranks have diverged"
        )


# -- Hydra under torchrun -----------------------------------------------------------------------
WORKER_HYDRA = ("hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=none", "hydra/hydra_logging=none")


def hydra_worker_argv(argv: list[str]) -> list[str]:
    """Command-line overrides for ranks > 0: no Hydra run folder (its ``${now:}`` name can differ
    by a second between ranks), no .hydra/ copy and no log file; warnings still reach stderr.
    Rank 0 owns the run folder and hands its path to the others."""
    if requested_world() <= 1 or int(os.environ.get("RANK", "0") or 0) == 0:
        return argv
    keys = {o.split("=", 1)[0] for o in WORKER_HYDRA}
    kept = [a for a in argv[1:] if a.lstrip("+~").split("=", 1)[0] not in keys]
    return [argv[0], *kept, *WORKER_HYDRA]
