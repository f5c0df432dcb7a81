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

sys.path.insert(0, str(Path(__file__).resolve().parent))  # probe.py puts the repository root on the path
from probe import cpu_learner, reset_peak, status_gib  # noqa: E402


def main() -> None:
    _, learner = cpu_learner(sys.argv[1:])
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
