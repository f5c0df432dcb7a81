"""rl.run.config.code_version: git's hash in a checkout, the .code_version file in a copy without .git."""

from __future__ import annotations

from pathlib import Path

import pytest

from rl.run import config


def test_copy_without_git_reads_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # no repository above tmp_path
    monkeypatch.setattr(config, "PROJECT_ROOT", tmp_path)
    monkeypatch.setattr(config, "CODE_VERSION_FILE", tmp_path / ".code_version")
    assert config.code_version() == "unknown"
    (tmp_path / ".code_version").write_text("0e3bf02\n")
    assert config.code_version() == "0e3bf02"


def test_checkout_gives_git_hash() -> None:
    import subprocess

    head = subprocess.run(
        ["git", "-C", str(config.PROJECT_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    assert config.code_version() == head.stdout.strip()
