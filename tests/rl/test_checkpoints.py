"""Checkpoint contents and sweep pruning (rl/run/checkpoints.py); the run-level check of what
model_best.pt holds is in tests/rl/test_train_run.py::test_run_folder_contract."""

import os

import pytest
from omegaconf import OmegaConf

from rl.run.checkpoints import SWEEP_MARK, prune_sweep_checkpoints, sweep_identity
from rl.run.run_folder import RunFolderError, open_run_dir
from runstore import FolderLock


def _job(sweep, name, finished_at, of_sweep=True):
    """A job folder; ``of_sweep``: finished as a job of the sweep now running in ``sweep``."""
    d = sweep / name
    d.mkdir(parents=True)
    for f in ("model_last.pt", "model_best.pt", "config.yaml"):
        (d / f).write_bytes(b"x")
    (d / "metrics.jsonl").write_text('{"step": 0}\n{"step": 4}\n')
    if finished_at is not None:
        (d / "summary.json").write_text("{}")
        os.utime(d / "summary.json", (finished_at, finished_at))
        if of_sweep:
            (d / SWEEP_MARK).write_text(sweep_identity(sweep))
    return d


def _sweep(folder):
    folder.mkdir(parents=True)
    (folder / "multirun.yaml").write_text("hydra: {}\n")  # what Hydra writes as a sweep starts
    return folder


def test_keep_last_checkpoints_prunes_older_finished_jobs(tmp_path):
    sweep = _sweep(tmp_path / "multirun")
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


def test_keep_last_checkpoints_prunes_only_this_sweeps_jobs_never_through_a_symlink(tmp_path, monkeypatch):
    """issue 36 item 4: with hydra.sweep.dir=runs the folder also holds unrelated runs and jobs of
    earlier sweeps; a symlink may lead out of it; a job that cannot be written is skipped."""
    runs = _sweep(tmp_path / "runs")
    single = _job(runs, "2026-11-27_demo", 100, of_sweep=False)  # a run of its own, not a sweep job
    outside = _job(tmp_path / "elsewhere", "0_job", 200, of_sweep=False)
    (outside / SWEEP_MARK).write_text(sweep_identity(runs))
    (runs / "0_linked").symlink_to(outside, target_is_directory=True)
    earlier = _job(runs, "0_qa1", 300)
    (earlier / SWEEP_MARK).write_text("an-earlier-sweep")
    stuck, mine = _job(runs, "1_qa1", 400), _job(runs, "2_qa1", 500)
    real_unlink = type(stuck).unlink

    def refuse(path, *a, **k):
        if path == stuck / "model_last.pt":
            raise PermissionError(13, "Permission denied", str(path))
        return real_unlink(path, *a, **k)

    monkeypatch.setattr(type(stuck), "unlink", refuse)
    assert prune_sweep_checkpoints(runs, 0, own=mine) == [mine / "model_last.pt"]
    for d in (single, outside, earlier, stuck):
        assert (d / "model_last.pt").exists(), d
    monkeypatch.undo()
    (runs / "multirun.yaml").unlink()  # not a sweep folder at all: nothing pruned
    assert prune_sweep_checkpoints(runs, 0, own=stuck) == []
