"""Where a qa3 recipe step's transient host memory goes, by learner phase (docs/BENCH.md, "Host memory").

    MALLOC_MMAP_THRESHOLD_=131072 STEPS=3 python experiments/bench/qa3_cpu_rss/phases.py [key=value ...]

Built as probe.py builds it. One JSON line a step: for each phase (acting, the target values, the loss's forward
and backward, AdamW) the peak RSS within it above the RSS at its start, and the longest and the mean state (token
ids) of the loss's 64 transitions. Run it with a fixed mmap threshold, so that freed large blocks go back to the
system and a phase's peak is what it allocates, not what glibc kept from the step before.
"""

import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from envs.data.registry import build_dataset, first_samples  # noqa: E402
from envs.feedback import build_feedback  # noqa: E402
from rl.run.build import build_learner, qnet_from_cfg, train_env  # noqa: E402
from rl.run.config import compose_config, seed_everything  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe import reset_peak, status_gib  # noqa: E402


def main() -> None:
    cfg = compose_config("training", ["experiment=offline_babilong_qa3", "seed=1", "device=cpu", *sys.argv[1:]])
    seed_everything(int(cfg.seed))
    device = torch.device("cpu")
    qnet = qnet_from_cfg(cfg, device)
    ds = first_samples(build_dataset(cfg.envs, "train", 1, float(cfg.validation_fraction)), int(cfg.train_samples))
    env = train_env(cfg, ds, build_feedback(cfg.feedback, cfg.envs, "train"), device, 1)
    learner = build_learner(qnet, env, cfg)
    row: dict = {}

    def wrap(name: str, label: str) -> None:
        fn = getattr(learner, name)

        def peaked(*a, **kw):
            reset_peak()
            start = status_gib("VmRSS")
            try:
                return fn(*a, **kw)
            finally:
                row[label] = max(row.get(label, 0), round(status_gib("VmHWM") - start, 2))

        setattr(learner, name, peaked)

    for label, name in (
        ("act", "_act"),
        ("targets", "_target_values"),
        ("loss", "regress_on"),
        ("adamw", "optimizer_step"),
    ):
        wrap(name, label)
    measured = learner.regress_on

    def regress_on(transitions, g):
        lens = [len(tr.state) for tr in transitions]
        row["state_len_max"], row["state_len_mean"] = max(lens), round(sum(lens) / len(lens), 1)
        return measured(transitions, g)

    learner.regress_on = regress_on
    learner.start_slots()
    for s in range(1, int(os.environ.get("STEPS", "3")) + 1):
        row.clear()
        t0 = time.time()
        learner.micro_step()
        out = {"step": s, "s": round(time.time() - t0, 1), "warm": learner.warming_up, "rss": status_gib("VmRSS")}
        print(json.dumps({**out, "phase_peak_above_start_gib": dict(row)}), flush=True)


if __name__ == "__main__":
    main()
