"""Checkpoint contents and sweep pruning (rl/run/checkpoints.py); the run-level check of what
model_best.pt holds is in tests/rl/test_train_run.py::test_run_folder_contract."""

import os

import pytest
from omegaconf import OmegaConf

from rl.run.checkpoints import prune_sweep_checkpoints
from rl.run.train import RunFolderError, open_run_dir
from runstore import FolderLock


def _job(sweep, name, finished_at):
    d = sweep / name
    d.mkdir(parents=True)
    for f in ("model_last.pt", "model_best.pt", "config.yaml"):
        (d / f).write_bytes(b"x")
    (d / "metrics.jsonl").write_text('{"step": 0}\n{"step": 4}\n')
    if finished_at is not None:
        (d / "summary.json").write_text("{}")
        os.utime(d / "summary.json", (finished_at, finished_at))
    return d


def test_keep_last_checkpoints_prunes_older_finished_jobs(tmp_path):
    sweep = tmp_path / "multirun"
    old, older, running, locked, mine = (
        _job(sweep, "1_qa1_seed1", 2000),
        _job(sweep, "0_qa1_seed0", 1000),
        _job(sweep, "4_qa1_seed4", None),  # not finished: its resume state is needed
        _job(sweep, "2_qa1_seed2", 500),  # finished earlier, now resumed by another process
        _job(sweep, "3_qa1_seed3", 3000),
    )
    with FolderLock(locked / ".lock", "run folder", ""):
        removed = prune_sweep_checkpoints(sweep, 2, own=mine)
    assert removed == [older / "model_last.pt"]
    assert (mine / "model_last.pt").exists() and (old / "model_last.pt").exists()
    assert (running / "model_last.pt").exists() and (locked / "model_last.pt").exists()
    assert (older / "model_best.pt").exists() and (older / "summary.json").exists()
    assert prune_sweep_checkpoints(sweep, 0, own=mine) == [
        mine / "model_last.pt",
        old / "model_last.pt",
        locked / "model_last.pt",
    ]
    # a pruned job is finished: resume says so instead of asking to restore model_last.pt
    cfg = OmegaConf.create({"resume": True, "run_dir": str(older)})
    with pytest.raises(
        RunFolderError, match="finished run without model_last.pt \\(removed by keep_last_checkpoints\\)"
    ):
        open_run_dir(cfg)


def test_keep_last_checkpoints_is_checked(tiny_cfg):
    from rl.run.validate import ConfigError, check_training

    with pytest.raises(ConfigError, match="keep_last_checkpoints"):
        check_training(tiny_cfg("keep_last_checkpoints=-1"))
    check_training(tiny_cfg("keep_last_checkpoints=2"))
