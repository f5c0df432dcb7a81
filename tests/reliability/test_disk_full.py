"""ENOSPC injected through the writer every run file goes through (runstore._open_for_write)
and through the evaluation's record writer: "disk full" with the path and what to do, no
temporary file left, the previous files intact, and the rerun ends where an uninterrupted run does."""

from __future__ import annotations

import errno
import io
import json

import pytest
import torch

import runstore as storage
from rl.run.train import run
from runstore import DiskFullError
from tests.reliability.harness import assert_same_weights, metrics, run_cfg


class FullAfter(io.BufferedWriter):
    """A file on a disk that fills up after ``limit`` bytes."""

    def __init__(self, path, limit: int):
        super().__init__(io.FileIO(path, "wb"))
        self.left = limit

    def write(self, data) -> int:
        n = len(memoryview(data).cast("B"))
        if n > self.left:
            super().write(bytes(memoryview(data).cast("B")[: self.left]))
            self.left = 0
            raise OSError(errno.ENOSPC, "No space left on device")
        self.left -= n
        return super().write(data)


def fill_disk_at(monkeypatch, name: str, occurrence: int, limit: int = 2**20) -> None:
    """The ``occurrence``-th write of ``name`` finds the disk full after ``limit`` bytes."""
    seen = {"n": 0}

    def opener(path):
        if name in path.name:
            seen["n"] += 1
            if seen["n"] == occurrence:
                return FullAfter(path, limit)
        return open(path, "wb")

    monkeypatch.setattr(storage, "_open_for_write", opener)


def test_disk_full_during_checkpoint_keeps_the_previous(tmp_path, reference_run, growing_eval, monkeypatch):
    rd = tmp_path / "run"
    fill_disk_at(monkeypatch, "model_last.pt", 2)  # the step-1 checkpoint; the step-0 one exists
    with pytest.raises(DiskFullError) as e:
        run(run_cfg(rd))
    msg = str(e.value)
    assert msg.startswith(f"disk full while writing {rd}/model_last.pt (")
    assert msg.endswith(
        " MiB free); the previous model_last.pt is kept. Free space on that disk, then continue "
        "the run with resume=true"
    )
    assert not [p.name for p in rd.iterdir() if ".tmp" in p.name]  # the large temporary file is gone
    state = torch.load(rd / "model_last.pt", weights_only=True)
    assert state["learner"]["counters"]["optimizer_steps"] == 0
    assert [r["step"] for r in metrics(rd)] == [0]
    monkeypatch.undo()
    from rl.run.train import Trainer
    from tests.reliability.harness import step_return

    monkeypatch.setattr(Trainer, "in_training_eval", step_return)
    run(run_cfg(rd, "resume=true"))
    assert metrics(rd) == metrics(reference_run)
    assert_same_weights(rd / "model_best.pt", reference_run / "model_best.pt")
    assert_same_weights(rd / "model_last.pt", reference_run / "model_last.pt")


def test_disk_full_while_appending_a_row(tmp_path):
    path = tmp_path / "metrics.jsonl"
    storage.append_line(path, json.dumps({"step": 0}))

    class Full(io.FileIO):
        """Takes 5 bytes, then the disk is full."""

        def write(self, data):
            if self.tell() > len('{"step": 0}\n'):
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write(bytes(data)[:5])

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(storage, "_open_for_append", lambda p: Full(p, "a"))
        with pytest.raises(DiskFullError, match=r"the lines before it are kept\. Free space on that disk"):
            storage.append_line(path, json.dumps({"step": 1}))
    assert path.read_text() == '{"step": 0}\n'  # the torn row was cut back


@pytest.fixture
def small_fs(tmp_path):
    """A real 1 MiB filesystem (tmpfs), where this process may mount one (root); else skipped."""
    import subprocess

    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_real_full_disk(small_fs):
    """The kernel's ENOSPC, as torch.save reports it (wrapped in a RuntimeError), and a row
    appended to a full disk."""
    ckpt = small_fs / "model_last.pt"
    storage.atomic_save({"w": torch.zeros(2**16)}, ckpt)  # 256 KiB
    with pytest.raises(DiskFullError) as e:
        storage.atomic_save({"w": torch.ones(2**20)}, ckpt)  # 4 MiB
    assert str(e.value).startswith(f"disk full while writing {ckpt} (")
    assert str(e.value).endswith(
        "MiB free); the previous model_last.pt is kept. Free space on that disk, then rerun the same command"
    )
    assert sorted(p.name for p in small_fs.iterdir()) == ["model_last.pt"]
    assert torch.equal(torch.load(ckpt, weights_only=True)["w"], torch.zeros(2**16))
    rows = small_fs / "metrics.jsonl"
    storage.append_line(rows, json.dumps({"step": 0}))
    with open(small_fs / "filler", "wb", buffering=0) as f:  # fill the disk to the last byte
        with pytest.raises(OSError):
            while True:
                f.write(b"\0" * 4096)
    with pytest.raises(DiskFullError):
        storage.append_line(rows, json.dumps({"step": 1, "pad": "x" * 8192}))
    assert rows.read_text() == '{"step": 0}\n'
