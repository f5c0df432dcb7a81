"""Damaged checkpoints and logs, and folders that cannot be written: one error line naming the
file and what to do, and nothing of the run lost (tiny real runs, harness.py)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

import runstore as storage
from runstore import CheckpointLoadError, FolderLock, NotWritableError, append_line, load_checkpoint, save_checkpoint
from tests.conftest import ROOT
from tests.reliability.harness import TINY_RUN, run_cfg

DAMAGED = "restore it from a copy, or start a new run in another folder (hydra.run.dir=...)"


def copy_run(reference: Path, to: Path, skip: tuple[str, ...] = ()) -> Path:
    """The finished reference run: checkpoints hard-linked (never written in place), the small
    files copied."""
    to.mkdir()
    for p in reference.iterdir():
        if p.is_file() and p.name not in skip:
            (os.link if p.suffix == ".pt" else shutil.copy)(p, to / p.name)
    return to


def resume(run_dir: Path) -> None:
    from rl.run.train import run

    run(run_cfg(run_dir, "resume=true"))


def flip_tensor_bytes(src: Path, dst: Path) -> None:
    """``src`` with 4 bytes inverted inside the first tensor's data (the zip's headers intact)."""
    with zipfile.ZipFile(src) as z:
        info = next(i for i in z.infolist() if "/data/" in i.filename and i.file_size > 64)
    data = bytearray(src.read_bytes())
    h = info.header_offset  # the local header's own name and extra lengths (torch pads the extra field)
    start = h + 30 + int.from_bytes(data[h + 26 : h + 28], "little") + int.from_bytes(data[h + 28 : h + 30], "little")
    start += 16
    for k in range(4):
        data[start + k] ^= 0xFF
    dst.write_bytes(bytes(data))


def test_flipped_bytes_inside_a_tensor_are_refused(reference_run, tmp_path):
    """4 bytes changed inside model_last.pt's tensors resumed silently (no checksum)."""
    run_dir = copy_run(reference_run, tmp_path / "run", skip=("model_last.pt",))
    flip_tensor_bytes(reference_run / "model_last.pt", run_dir / "model_last.pt")
    with pytest.raises(CheckpointLoadError) as e:
        resume(run_dir)
    assert str(e.value) == (
        f"{run_dir}/model_last.pt is corrupt: its contents no longer match the checksum written with it (the file "
        f"changed on disk after it was saved); restore it from a copy"
    )
    load_checkpoint(reference_run / "model_last.pt")  # the intact file passes its check


@pytest.mark.parametrize("key", ["eval_rng", "learner.counters", "rng"])
def test_a_checkpoint_missing_an_entry_is_one_line(reference_run, tmp_path, key):
    run_dir = copy_run(reference_run, tmp_path / "run", skip=("model_last.pt",))
    state = torch.load(reference_run / "model_last.pt", weights_only=True)
    *parents, leaf = key.split(".")
    node = state
    for k in parents:
        node = node[k]
    del node[leaf]
    save_checkpoint(state, run_dir / "model_last.pt")
    with pytest.raises(CheckpointLoadError) as e:
        resume(run_dir)
    assert str(e.value) == (
        f"{run_dir}/model_last.pt lacks {key} (it was not written whole by this version of Q-RAG); {DAMAGED}"
    )


def test_a_deleted_model_best_is_named_on_resume(reference_run, tmp_path):
    from rl.run.run_folder import RunFolderError

    run_dir = copy_run(reference_run, tmp_path / "run", skip=("model_best.pt",))
    with pytest.raises(RunFolderError) as e:
        resume(run_dir)
    assert str(e.value) == (
        f"{run_dir}/model_best.pt is missing, though model_last.pt records a best evaluation (return 1.000) "
        f"saved there; {DAMAGED}"
    )


def test_an_empty_model_last_is_one_line(reference_run, tmp_path):
    """A 0-byte model_last.pt raised IndexError from the error-message builder."""
    run_dir = copy_run(reference_run, tmp_path / "run", skip=("model_last.pt",))
    (run_dir / "model_last.pt").write_bytes(b"")
    with pytest.raises(CheckpointLoadError) as e:
        resume(run_dir)
    assert str(e.value) == (
        f"{run_dir}/model_last.pt is not a readable checkpoint (an empty file); it is truncated or corrupt: "
        f"restore it from a copy"
    )


def test_every_kind_of_entry_passes_its_checksum(tmp_path):
    """Empty, 0-d, bool and bf16 tensors, numpy arrays, nested tuples: saved and loaded, the
    checksum holds; any one value changed, it does not."""
    import numpy as np

    state = {
        "empty": torch.zeros(0, dtype=torch.long),
        "scalar": torch.tensor(3.5),
        "mask": torch.tensor([True, False]),
        "half": torch.ones(3, dtype=torch.bfloat16),
        "view": torch.arange(6).reshape(2, 3).t(),
        "numpy": np.arange(4, dtype=np.uint32),
        "plain": {"python": (3, (1, 2), None), "f": 0.1, "s": "x", 7: [1.5, float("inf")]},
    }
    save_checkpoint(state, tmp_path / "c.pt")
    loaded = load_checkpoint(tmp_path / "c.pt")
    assert loaded["checksum"] == storage.state_checksum(state) == storage.state_checksum(loaded)
    loaded["plain"]["f"] = 0.2
    assert storage.state_checksum(loaded) != storage.state_checksum(state)


def test_random_bytes_are_not_called_pickled_code(tmp_path):
    path = tmp_path / "model_last.pt"
    path.write_bytes(bytes(range(256)) * 40)
    with pytest.raises(CheckpointLoadError) as e:
        load_checkpoint(path)
    assert str(e.value).startswith(f"{path} is not a readable checkpoint (")
    assert str(e.value).endswith("); it is truncated or corrupt: restore it from a copy")
    assert "\n" not in str(e.value)


def test_a_torn_metrics_line_is_cut_back_on_resume(reference_run, tmp_path):
    """A torn last line stayed, and the next row was appended onto it and lost to every reader."""
    run_dir = copy_run(reference_run, tmp_path / "run")
    whole = (reference_run / "metrics.jsonl").read_bytes()
    (run_dir / "metrics.jsonl").write_bytes(whole + b'{"step": 2, "env_st')
    resume(run_dir)
    assert (run_dir / "metrics.jsonl").read_bytes() == whole


def test_a_row_is_never_glued_onto_a_torn_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 0}\n{"step": 1, "ev')
    append_line(path, '{"step": 2}')
    assert path.read_bytes() == b'{"step": 0}\n{"step": 2}\n'


def test_a_run_folder_that_becomes_read_only_mid_run(tmp_path, monkeypatch, growing_eval):
    """The third checkpoint write (model_best.pt of step 1) meets a read-only folder: one line,
    and the step-0 checkpoints stay whole for a resume once the folder is writable again."""
    from rl.run.train import run

    calls: list[Path] = []
    real = storage._open_for_write

    def flaky(path):
        calls.extend([path] if ".pt.tmp" in path.name else [])
        if len(calls) >= 3:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(storage, "_open_for_write", flaky)
    run_dir = tmp_path / "run"
    with pytest.raises(NotWritableError) as e:
        run(run_cfg(run_dir))
    assert str(e.value) == (
        f"cannot write {run_dir}/model_best.pt (permission denied); make {run_dir} writable "
        f"(e.g. chmod u+w {run_dir}), then continue the run with resume=true"
    )
    assert load_checkpoint(run_dir / "model_last.pt")["learner"]["counters"]["optimizer_steps"] == 0
    assert not [p for p in run_dir.iterdir() if ".tmp" in p.name]


def test_resume_in_a_read_only_folder(reference_run, tmp_path, monkeypatch):
    """``resume=true`` in a read-only run folder ended in a PermissionError traceback."""
    from rl.run.callbacks import check_output_folder
    from rl.run.validate import ConfigError
    from tests.conftest import compose_cfg

    run_dir = copy_run(reference_run, tmp_path / "run")
    real_open = os.open

    def read_only(path, flags, *args):
        if Path(path).parent == run_dir and flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR):
            raise PermissionError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", read_only)
    before = sorted(p.name for p in run_dir.iterdir())
    with pytest.raises(NotWritableError) as e:
        resume(run_dir)
    assert str(e.value) == (
        f"cannot write {run_dir}/.lock (read-only file system); make {run_dir} writable (e.g. chmod u+w {run_dir}), "
        f"then rerun the same command"
    )
    assert sorted(p.name for p in run_dir.iterdir()) == before
    # from the command line the same folder is refused before Hydra writes .hydra/ into it
    cfg = compose_cfg(TINY_RUN + ["resume=true", f"hydra.run.dir={run_dir}"], return_hydra_config=True)
    with pytest.raises(ConfigError) as e:
        check_output_folder(cfg, "training")
    assert e.value.lines == [
        f"cannot write in {run_dir} (read-only file system); make it writable, or choose another folder "
        f"(hydra.run.dir=...)"
    ]


def test_a_refused_second_training_leaves_the_running_ones_files(tmp_path):
    """The second training into a running folder rewrote that run's .hydra/config.yaml and
    overrides.yaml with the refused values before the run folder's lock refused it."""
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    for name in ("config.yaml", "overrides.yaml", "hydra.yaml"):
        (run_dir / ".hydra" / name).write_text(f"the running training's {name}\n")
    with FolderLock(run_dir / ".lock", "run folder", "wait"):  # the running training
        out = subprocess.run(
            [sys.executable, "train_q_rag.py", *TINY_RUN, "seed=999", f"hydra.run.dir={run_dir}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.startswith(f"error: run folder {run_dir} is in use by another process (pid {os.getpid()} on ")
    assert out.stderr.rstrip().endswith("wait for that training to end, or choose another folder (hydra.run.dir=...)")
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    for name in ("config.yaml", "overrides.yaml", "hydra.yaml"):
        assert (run_dir / ".hydra" / name).read_text() == f"the running training's {name}\n"
