"""scripts/with_mps.sh: the MPS daemon is started around a command and always stopped.

The NVIDIA driver's ``nvidia-cuda-mps-control`` is replaced on PATH by a small script that records
how it was called, so the wrapper's logic runs on a machine without a GPU."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

WRAPPER = ROOT / "scripts" / "with_mps.sh"


def stub_control(folder: Path, start_status: int = 0) -> Path:
    """A stand-in control binary: logs its arguments (and a quit read from stdin) to calls.txt."""
    log = folder / "calls.txt"
    exe = folder / "nvidia-cuda-mps-control"
    exe.write_text(
        "#!/usr/bin/env bash\n"
        f'if [ "${{1:-}}" = -d ]; then echo "start $CUDA_MPS_PIPE_DIRECTORY" >> {log}; exit {start_status}; fi\n'
        f'read -r line; echo "$line" >> {log}\n'
    )
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return log


def run(args: list[str], path: str, tmp: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": path, "TMPDIR": str(tmp)}
    return subprocess.run(["bash", str(WRAPPER), *args], capture_output=True, text=True, env=env, timeout=60)


def test_the_daemon_runs_around_the_command_and_is_stopped_even_when_it_fails(tmp_path):
    log = stub_control(tmp_path)
    out = tmp_path / "seen.txt"
    res = run(
        ["bash", "-c", f'echo "$CUDA_MPS_PIPE_DIRECTORY" > {out}; exit 3'], f"{tmp_path}:{os.environ['PATH']}", tmp_path
    )
    assert res.returncode == 3  # the command's own status
    pipe = out.read_text().strip()
    calls = log.read_text().splitlines()
    assert calls == [f"start {pipe}", "quit"]  # started with the command's pipe folder, then stopped
    assert pipe.startswith(str(tmp_path)) and not Path(pipe).parent.exists()  # the private folder is gone


@pytest.mark.skipif(
    any(Path(d, "nvidia-cuda-mps-control").exists() for d in ("/usr/bin", "/bin")), reason="MPS is installed here"
)
def test_no_mps_here_is_a_clear_error_and_the_command_does_not_run(tmp_path):
    marker = tmp_path / "ran"
    res = run(["touch", str(marker)], "/usr/bin:/bin", tmp_path)
    assert res.returncode == 2 and "nvidia-cuda-mps-control not found" in res.stderr
    assert not marker.exists()


def test_a_daemon_that_does_not_start_stops_the_wrapper(tmp_path):
    stub_control(tmp_path, start_status=1)
    marker = tmp_path / "ran"
    res = run(["touch", str(marker)], f"{tmp_path}:{os.environ['PATH']}", tmp_path)
    assert res.returncode == 2 and "did not start" in res.stderr
    assert not marker.exists() and not list(tmp_path.glob("qrag_mps.*"))
