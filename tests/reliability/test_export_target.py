"""The export's target (issue 46 items 9 and 16, issue 47 item 10): checked before the long write
(a link to an empty folder is exported into, a dangling link, `.`, a mount point and a target another
export is writing are refused in one line), a full disk is one line with nothing left behind, work
folders of killed exports are removed by the next export to that target, and the exported folder
gets the umask's permissions, not mode 700."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors import SafetensorError

from rl.tool import export
from rl.tool.retriever import QRAGRetriever, RetrieverError
from runstore import DiskFullError, FolderInUseError
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def qrag(eval_run_dir: Path) -> QRAGRetriever:
    return QRAGRetriever.from_run(eval_run_dir, device="cpu")


@pytest.fixture
def quick(monkeypatch):
    """The export's writer replaced by one file (the target's handling is under test, not the
    encoders' bytes); ``quick.fail`` set to an exception makes it fail after that file."""

    class Writer:
        fail: BaseException | None = None

        def __call__(self, qnet, cfg, checkpoint, folder: Path) -> dict:
            (folder / "qrag_retriever.json").write_text("{}\n")
            if self.fail is not None:
                raise self.fail
            return {"sentence_transformer": False}

    writer = Writer()
    monkeypatch.setattr(export, "_write_export", writer)
    return writer


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "retrieve.py"), "device=cpu", "progress_bar=false", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)


def refused_before_load(done: subprocess.CompletedProcess, message: str) -> None:
    assert done.returncode == 2, done.stderr
    errors = [x for x in done.stderr.splitlines() if x.startswith("error")]
    assert len(errors) == 1 and message in errors[0], done.stderr
    assert "[retrieve]" not in done.stderr and "Traceback" not in done.stderr


def test_a_link_to_an_empty_folder_is_exported_into_with_normal_permissions(qrag, tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    before = os.umask(0o022)
    try:
        qrag.export(tmp_path / "link")
    finally:
        os.umask(before)
    assert (tmp_path / "link").is_symlink() and (tmp_path / "real" / "qrag_retriever.json").is_file()
    assert stat.S_IMODE((tmp_path / "real").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "real" / "state_encoder").stat().st_mode) == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]  # no work folder, no lock file


def test_unusable_targets_are_refused_before_writing(qrag, tmp_path, quick, monkeypatch):
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    with pytest.raises(RetrieverError, match=r"dangling: is a link to .*gone, which does not exist"):
        qrag.export(tmp_path / "dangling")
    empty = tmp_path / "here"
    empty.mkdir()
    monkeypatch.chdir(empty)
    for name in (".", str(empty)):
        with pytest.raises(RetrieverError, match="is the current folder, which the export cannot replace"):
            qrag.export(name)
    monkeypatch.chdir(tmp_path)
    mount = tmp_path / "mnt"
    mount.mkdir()
    real_ismount = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == mount or real_ismount(p))
    with pytest.raises(RetrieverError, match="mnt: is a mount point, which the export cannot replace"):
        qrag.export(mount)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "here", "mnt"]  # nothing written


def test_the_command_refuses_them_before_the_model_loads(eval_run_dir, tmp_path):
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    refused_before_load(cli(tmp_path, f"run={eval_run_dir}", "export=dangling"), "which does not exist")
    empty = tmp_path / "empty"
    empty.mkdir()
    refused_before_load(cli(empty, f"run={eval_run_dir}", "export=."), "export=.: is the current folder")
    with export.export_lock(tmp_path / "exp", tmp_path / "exp"):  # another export is writing exp
        refused_before_load(
            cli(tmp_path, f"run={eval_run_dir}", "export=exp"), "export=exp is in use by another process (pid"
        )


def test_two_exports_to_one_target_at_once(qrag, tmp_path, quick):
    target = tmp_path / "exp"
    with export.export_lock(target, target):
        with pytest.raises(FolderInUseError, match=r"is in use by another process \(pid .*\); wait for that export"):
            qrag.export(target)
        assert not target.exists()
    qrag.export(target)  # once the other is done
    assert (target / "qrag_retriever.json").is_file()
    with pytest.raises(RetrieverError, match="exists and is not empty"):  # the later one: before it writes
        qrag.export(target)


def test_work_folders_of_killed_exports_are_removed_by_the_next(qrag, tmp_path, quick):
    left = tmp_path / ".exp.export-4242"
    (left / "state_encoder").mkdir(parents=True)
    (left / "state_encoder" / "model.safetensors").write_bytes(b"\0" * 4096)
    outside = tmp_path / "keep.txt"
    outside.write_text("mine")
    (tmp_path / ".exp.export-link").symlink_to(outside)
    (tmp_path / ".other.export-7").mkdir()  # other targets' (`other`, `exp.export-2`): not this export's to remove
    (tmp_path / ".exp.export-2.export-7").mkdir()
    qrag.export(tmp_path / "exp")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".exp.export-2.export-7",
        ".other.export-7",
        "exp",
        "keep.txt",
    ]
    assert outside.read_text() == "mine"


@pytest.mark.parametrize(
    "fault",
    [
        SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)"),
        OSError(errno.ENOSPC, "No space left on device"),
    ],
)
def test_a_full_disk_is_one_line_and_leaves_nothing(qrag, tmp_path, quick, fault):
    quick.fail = fault
    with pytest.raises(DiskFullError) as caught:
        qrag.export(tmp_path / "exp")
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"disk full while writing {tmp_path / 'exp'} (")
    assert "nothing was exported. Free space on that disk, then export again" in message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_real_mount_point_and_a_real_full_disk(qrag, tmp_path):
    mount = tmp_path / "mnt"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        with pytest.raises(RetrieverError, match="is a mount point"):
            qrag.export(mount)
        with pytest.raises(DiskFullError, match="nothing was exported"):
            qrag.export(mount / "exp")
        assert list(mount.iterdir()) == []
    finally:
        subprocess.run(["umount", str(mount)], check=True)
