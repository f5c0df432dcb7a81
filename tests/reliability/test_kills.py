"""kill -9 at named moments of the checkpoint sequence, then ``resume=true``: the finished run
equals an uninterrupted one (metrics rows, model_last.pt, model_best.pt), nothing doubled or lost.

Each evaluation writes model_best.pt, then model_last.pt (holding the metrics row), then the row
in metrics.jsonl (rl/run/train.py, Trainer.record_eval)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile

import pytest
import torch

from rl.run.build import qnet_from_cfg
from rl.run.run_folder import RunFolderError
from rl.run.train import run
from runstore import FolderInUseError, load_checkpoint
from tests.conftest import ROOT
from tests.reliability.harness import assert_same_weights, metrics, run_cfg


def kill_at(run_dir, point: str, while_stopped=None, extra: tuple[str, ...] = ()) -> None:
    """Start the killer subprocess (config: the harness's tiny run + ``extra``) and SIGKILL it once
    it announces ``point`` (after calling ``while_stopped(pid)`` while it waits there, alive and
    holding its run folder)."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.killer", str(run_dir), point, *extra],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        reached = False
        for line in proc.stdout:
            if line.strip() == f"POINT {point}":
                try:
                    if while_stopped is not None:
                        while_stopped(proc.pid)
                finally:
                    os.kill(proc.pid, signal.SIGKILL)
                reached = True
                break
        proc.stdout.close()
        proc.wait(timeout=60)
        err.seek(0)
        assert reached, f"the run never reached {point!r}:\n{err.read()[-3000:]}"
    assert proc.returncode == -signal.SIGKILL


def resume_and_compare(run_dir, reference) -> None:
    run(run_cfg(run_dir, "resume=true"))
    assert metrics(run_dir) == metrics(reference)
    assert [r["step"] for r in metrics(run_dir)] == [0, 1]
    assert_same_weights(run_dir / "model_last.pt", reference / "model_last.pt")
    assert_same_weights(run_dir / "model_best.pt", reference / "model_best.pt")
    best, want = (load_checkpoint(d / "model_best.pt") for d in (run_dir, reference))
    assert (best["step"], best["best"]) == (want["step"], want["best"]) == (1, 1.0)
    timing = "train_loop"  # wall-clock start/end of the training loop: differs between any two runs
    got, want = (json.loads((d / "summary.json").read_text()) for d in (run_dir, reference))
    assert {k: v for k, v in got.items() if k != timing} == {k: v for k, v in want.items() if k != timing}
    assert not [p.name for p in run_dir.iterdir() if ".tmp" in p.name]


def test_kill_during_first_checkpoint_restarts_from_step_0(tmp_path, reference_run, growing_eval):
    """Killed after model_best.pt, before the first model_last.pt: nothing to resume, and the
    folder must not be stuck (neither 'no checkpoint' nor 'already holds a run'). While the first
    training is alive, a second one in its folder is refused, naming it."""
    rd = tmp_path / "run"

    def second_training(pid: int) -> None:
        with pytest.raises(FolderInUseError) as e:
            run(run_cfg(rd, "resume=true"))
        assert str(e.value).startswith(f"run folder {rd} is in use by another process (pid {pid} on ")
        assert str(e.value).endswith("wait for that training to end, or choose another folder (hydra.run.dir=...)")

    kill_at(rd, "saved model_best.pt #1", second_training)
    assert (rd / "model_best.pt").exists() and not (rd / "model_last.pt").exists()
    resume_and_compare(rd, reference_run)


def test_kill_between_best_and_last(tmp_path, reference_run, growing_eval):
    """model_best.pt is newer than model_last.pt: the resumed run redoes step 1 and rewrites it.
    A stray row (older versions appended it before saving) is not doubled."""
    rd = tmp_path / "run"
    kill_at(rd, "saved model_best.pt #2")
    assert [r["step"] for r in metrics(rd)] == [0]
    with open(rd / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 1, "stray": True}) + "\n")
    resume_and_compare(rd, reference_run)


def test_kill_after_last_checkpoint_before_row(tmp_path, reference_run, growing_eval):
    """The final model_last.pt is written but its metrics row is not: resume restores the row,
    and model_best.pt already holds the final (best) model."""
    rd = tmp_path / "run"
    kill_at(rd, "saved model_last.pt #2")
    assert [r["step"] for r in metrics(rd)] == [0]
    resume_and_compare(rd, reference_run)


def test_kill_mid_write_leaves_old_checkpoint(tmp_path, reference_run, growing_eval):
    """Killed with model_last.pt's temporary file complete but not renamed: the previous
    model_last.pt is intact, the temporary file is removed on resume."""
    rd = tmp_path / "run"
    kill_at(rd, "tmp-complete model_last.pt #2")
    assert [p for p in rd.iterdir() if p.name.startswith(".model_last.pt.tmp")]
    resume_and_compare(rd, reference_run)


def test_trained_run_without_model_last_is_not_wiped(tmp_path):
    """A folder whose metrics go past step 0 lost its model_last.pt by other means: refused,
    naming what to delete, and nothing is removed."""
    rd = tmp_path / "run"
    rd.mkdir()
    (rd / "config.yaml").write_text("seed: 1\n")
    (rd / "model_best.pt").write_bytes(b"best")
    (rd / "metrics.jsonl").write_text('{"step": 0}\n{"step": 500}\n')
    with pytest.raises(RunFolderError) as e:
        run(run_cfg(rd, "resume=true"))
    assert str(e.value) == (
        f"{rd} holds a run trained past step 0 (metrics.jsonl) but no model_last.pt to continue "
        f"it from. Restore model_last.pt, or delete model_best.pt, metrics.jsonl to start again"
    )
    assert (rd / "model_best.pt").read_bytes() == b"best"


def test_the_one_step_moves_the_weights(reference_run):
    """The premise of the weight comparisons above: step 1's model is not step 0's (the untrained
    agent is the packaged MiniLM, no random part)."""
    untrained = qnet_from_cfg(run_cfg(reference_run), torch.device("cpu")).state_dict()
    trained = load_checkpoint(reference_run / "model_last.pt")["learner"]["agent"]
    assert untrained.keys() == trained.keys()
    assert [k for k in untrained if not torch.equal(untrained[k], trained[k])], "step 1 left every weight as it was"
