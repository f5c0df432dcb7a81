"""Two leftovers of issue 46 (items 20, 21): scripts/with_mps.sh stops when it cannot make its
private folder (it went on and started the daemon with its pipe at /pipe), and
``keep_last_checkpoints`` skips a sibling job whose folder cannot be written with a warning
instead of failing the finished job."""

from __future__ import annotations

import errno
import logging
import os

import runstore
from rl.run.checkpoints import prune_sweep_checkpoints
from tests.rl.test_checkpoints import _job, _sweep
from tests.test_with_mps import run, stub_control


def test_with_mps_stops_when_no_temporary_folder_can_be_made(tmp_path):
    log = stub_control(tmp_path)
    marker = tmp_path / "ran"
    res = run(["touch", str(marker)], f"{tmp_path}:{os.environ['PATH']}", tmp_path / "nonexistent")
    assert res.returncode == 2 and "with_mps.sh: cannot make a temporary folder" in res.stderr, res.stderr
    assert not log.exists() and not marker.exists()  # no daemon started, the command not run


def test_keep_last_checkpoints_skips_a_sibling_whose_lock_cannot_be_written(tmp_path, monkeypatch, caplog):
    sweep = _sweep(tmp_path / "multirun")
    other, mine = _job(sweep, "0_qa1", 100), _job(sweep, "1_qa1", 200)
    real = runstore.FolderLock._acquire

    def refuse(lock):  # another user's folder: its lock file cannot be created (the tests may run as root)
        if lock.path.parent == other:
            raise PermissionError(errno.EACCES, "Permission denied", str(lock.path))
        return real(lock)

    monkeypatch.setattr(runstore.FolderLock, "_acquire", refuse)
    with caplog.at_level(logging.WARNING, logger="rl.run.checkpoints"):
        assert prune_sweep_checkpoints(sweep, 0, own=mine) == [mine / "model_last.pt"]
    assert (other / "model_last.pt").exists()
    assert f"keep_last_checkpoints: {other} left as it is (cannot write" in caplog.text
