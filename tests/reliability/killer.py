"""Subprocess of the kill -9 tests: a real tiny training run that announces every moment of its
checkpoint sequence on stdout (``POINT <event> <file> #<n>``) and, at the moment named on its
command line, waits there until the test kills it with SIGKILL.

    python -m tests.reliability.killer RUN_DIR "saved model_best.pt #2" [override ...]

Events: ``save-start`` (before torch.save), ``tmp-complete`` (temporary file written and closed,
not yet renamed), ``saved`` (renamed into place), ``appended`` (metrics row written). Only test
code is patched; the product runs unchanged.
"""

from __future__ import annotations

import io
import re
import sys
import time
from pathlib import Path

import torch

import rl.run.train
import runstore
from tests.reliability.harness import THREADS, run_cfg, step_return

counts: dict[str, int] = {}
target = ""


def announce(event: str, path: Path) -> None:
    name = f"{event} {Path(path).name}"
    counts[name] = counts.get(name, 0) + 1
    point = f"{name} #{counts[name]}"
    print(f"POINT {point}", flush=True)
    if point == target:
        time.sleep(600)  # the test kills the process here


class AnnouncingWriter(io.BufferedWriter):
    """The temporary file of an atomic write; announces when it is complete on disk."""

    def __init__(self, path: Path):
        super().__init__(io.FileIO(path, "wb"))
        self.final = re.sub(r"^\.(.*)\.tmp\d+$", r"\1", Path(path).name)

    def close(self) -> None:
        if not self.closed:
            super().close()
            announce("tmp-complete", Path(self.final))


def main() -> None:
    global target
    run_dir, target, *extra = sys.argv[1:]
    save, append = rl.run.train.save_checkpoint, rl.run.train.append_line

    def announcing_save(obj, path, *args):
        announce("save-start", path)
        save(obj, path, *args)
        announce("saved", path)

    def announcing_append(path, line, *args):
        append(path, line, *args)
        announce("appended", path)

    rl.run.train.save_checkpoint = announcing_save
    rl.run.train.append_line = announcing_append
    runstore._open_for_write = AnnouncingWriter
    rl.run.train.Trainer.in_training_eval = step_return
    torch.set_num_threads(THREADS)
    rl.run.train.run(run_cfg(Path(run_dir), *extra))
    print("FINISHED", flush=True)


if __name__ == "__main__":
    main()
