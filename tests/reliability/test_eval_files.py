"""Evaluation files: a failed run's meta file binds nothing, precision is part of the settings,
a crafted checkpoint is never executed, a full disk keeps the complete records."""

from __future__ import annotations

import errno
import io
import json
from pathlib import Path

import pytest
import torch

import rl.run.evaluate
from rl.run.evaluate import EvalError, run
from runstore import CheckpointLoadError, DiskFullError
from tests.eval.conftest import eval_cfg

STEM = "eval_seed42_ns12"


def go(run_dir: Path, out: Path, *overrides: str) -> dict:
    return run(eval_cfg(run_dir, f"output_dir={out}", "envs.num_sentences=12", *overrides))


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


class Evil:
    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


def test_orphan_meta_and_crafted_checkpoint(eval_run_dir, tmp_path):
    """A crafted model_best.pt is refused without running its payload; the meta file that run
    left binds nothing, so the run with the real checkpoint proceeds."""
    crafted = tmp_path / "crafted_run"
    crafted.mkdir()
    (crafted / "config.yaml").write_text((eval_run_dir / "config.yaml").read_text())
    evil = Evil()
    evil.marker = tmp_path / "pwned"
    torch.save({"learner": {"agent": evil}}, crafted / "model_best.pt")
    out = tmp_path / "out"
    with pytest.raises(CheckpointLoadError) as e:
        go(crafted, out, "num_samples=2")
    assert not evil.marker.exists()
    assert str(e.value).startswith(f"{crafted}/model_best.pt holds objects other than tensors and plain values (")
    assert str(e.value).endswith(
        "so it is not loaded: loading it could run code from the file. It was not written "
        "by this version of Q-RAG; retrain, or load it yourself with "
        "torch.load(weights_only=False) only if you trust its source"
    )
    assert (out / f"{STEM}.jsonl.meta.json").exists() and not (out / f"{STEM}.jsonl").exists()
    summary = go(eval_run_dir, out, "num_samples=2")  # other checkpoint, no records: accepted
    assert summary["n"] == 2 and len(lines(out / f"{STEM}.jsonl")) == 2


def test_precision_is_part_of_the_settings(eval_run_dir, tmp_path):
    go(eval_run_dir, tmp_path, "num_samples=1")
    assert json.loads((tmp_path / f"{STEM}.jsonl.meta.json").read_text())["precision"] == "auto"
    with pytest.raises(EvalError, match=r"precision: 'auto' \(file\) vs 'fp32' \(now\)"):
        go(eval_run_dir, tmp_path, "num_samples=2", "++precision=fp32")
    assert len(lines(tmp_path / f"{STEM}.jsonl")) == 1


def test_disk_full_keeps_complete_records(eval_run_dir, tmp_path, monkeypatch):
    """The third record finds the disk full half-way: two complete records stay, the rerun
    drops the torn line and finishes with each sample once."""
    real_open = open

    class FullOnThird(io.TextIOWrapper):
        written = 0

        def write(self, s):
            FullOnThird.written += 1
            if FullOnThird.written == 3:
                super().write(s[: len(s) // 2])
                self.flush()
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write(s)

    def full_open(path, mode="r", *args, **kwargs):
        if mode == "a":
            return FullOnThird(real_open(path, "ab"), encoding="utf-8")
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(rl.run.evaluate, "open", full_open, raising=False)
    out = tmp_path / f"{STEM}.jsonl"
    with pytest.raises(DiskFullError) as e:
        go(eval_run_dir, tmp_path, "num_samples=4")
    assert str(e.value).startswith(f"disk full while writing {out} (")
    assert str(e.value).endswith(
        "its 2 complete records are kept. Free space on that disk, then rerun the same command"
    )
    monkeypatch.undo()
    summary = go(eval_run_dir, tmp_path, "num_samples=4")
    assert [r["index"] for r in lines(out)] == [0, 1, 2, 3] and summary["n"] == 4
