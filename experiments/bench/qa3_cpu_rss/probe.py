"""Host memory of the qa3 recipe's training steps on the CPU, step by step (docs/BENCH.md, "Host memory").

    python experiments/bench/qa3_cpu_rss/probe.py [key=value ...]      # STEPS=8, TRIM=1 (malloc_trim after each step)

Builds the learner as rl/run/train.py does (``experiment=offline_babilong_qa3 seed=1 device=cpu`` and the
arguments; no evaluations) and prints one JSON line a step: its seconds, the RSS at its end (``rss_gib``), the
process's peak within it (``peak_gib``: VmHWM, reset before each step, so ``/usr/bin/time -v`` then reports only
the last step's peak), with TRIM=1 the RSS after glibc's ``malloc_trim(0)``, and what is alive: episodes, tensors
and their bytes (parameters aside), the chunk-cache and token-cache entries, the objects the garbage collector
tracks.
"""

import ctypes
import gc
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from envs.data.registry import build_dataset, first_samples  # noqa: E402
from envs.env import Episode  # noqa: E402
from envs.feedback import build_feedback  # noqa: E402
from rl.run.build import build_learner, qnet_from_cfg, train_env  # noqa: E402
from rl.run.config import compose_config, seed_everything  # noqa: E402


def status_gib(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return round(int(line.split()[1]) / 2**20, 3)
    raise KeyError(key)


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)


def alive(qnet) -> dict:
    gc.collect()
    objs = gc.get_objects()
    tensors = [o for o in objs if isinstance(o, torch.Tensor)]
    nbytes = sum(t.untyped_storage().nbytes() for t in tensors if not isinstance(t, torch.nn.Parameter))
    return {
        "episodes": sum(isinstance(o, Episode) for o in objs),
        "tensors": len(tensors),
        "tensor_gib": round(nbytes / 2**30, 3),
        **qnet.caches.sizes(),
        "tokens": len(qnet.inputs.tokens),
        "gc_objs": len(objs),
    }


def cpu_learner(overrides: list[str]):
    """(Q-network, learner) of the qa3 recipe at seed 1 on the CPU with ``overrides``, built as rl/run/train.py
    builds them, without its evaluations."""
    cfg = compose_config("training", ["experiment=offline_babilong_qa3", "seed=1", "device=cpu", *overrides])
    seed_everything(int(cfg.seed))
    device = torch.device("cpu")
    qnet = qnet_from_cfg(cfg, device)
    ds = first_samples(build_dataset(cfg.envs, "train", 1, float(cfg.validation_fraction)), int(cfg.train_samples))
    env = train_env(cfg, ds, build_feedback(cfg.feedback, cfg.envs, "train"), device, 1)
    return qnet, build_learner(qnet, env, cfg)


def main() -> None:
    steps, trim = int(os.environ.get("STEPS", "8")), os.environ.get("TRIM") == "1"
    qnet, learner = cpu_learner(sys.argv[1:])
    libc = ctypes.CDLL("libc.so.6")
    learner.start_slots()
    print(json.dumps({"step": 0, "rss_gib": status_gib("VmRSS"), **alive(qnet)}), flush=True)
    for s in range(1, steps + 1):
        reset_peak()
        t0 = time.time()
        learner.micro_step()
        row = {
            "step": s,
            "s": round(time.time() - t0, 1),
            "rss_gib": status_gib("VmRSS"),
            "warm": learner.warming_up,
            "peak_gib": status_gib("VmHWM"),
        }
        if trim:
            libc.malloc_trim(0)
            row["rss_after_trim"] = status_gib("VmRSS")
        print(json.dumps({**row, **alive(qnet)}), flush=True)


if __name__ == "__main__":
    main()
