"""What a new user trips over (issue 36 items 15, 17): the scripts run the repository's .venv
interpreter without it being activated, a failed report never empties a committed summary, and the
worked example reuses the quickstart's demo run instead of training another."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def _repo_copy(tmp_path: Path, *scripts: str) -> Path:
    """A folder shaped like the repository holding only ``scripts`` (paths in the repository) and
    scripts/python.sh."""
    repo = tmp_path / "repo"
    for name in (*scripts, "scripts/python.sh"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, repo / name)
    return repo


def _stub(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)
    return path


def _env_without_python(tmp_path: Path) -> dict[str, str]:
    """PATH whose ``python`` is one without the project's packages (as outside the .venv)."""
    _stub(tmp_path / "bin" / "python", "echo \"No module named 'hydra'\" >&2; exit 1\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    env["PATH"] = f"{tmp_path / 'bin'}:{env['PATH']}"
    return env


def test_scripts_run_the_repositorys_venv_when_it_is_not_activated(tmp_path):
    repo = _repo_copy(tmp_path, "scripts/launch_plan.sh")
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / "bin" / "python").symlink_to(sys.executable)
    (tmp_path / "out").mkdir()
    env = _env_without_python(tmp_path)
    done = subprocess.run(
        ["bash", str(repo / "scripts" / "launch_plan.sh"), "--status", str(tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:2] == ["run", "step"]
    # PYTHON still chooses
    env["PYTHON"] = str(tmp_path / "bin" / "python")
    done = subprocess.run(
        ["bash", str(repo / "scripts" / "launch_plan.sh"), "--status", str(tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "No module named 'hydra'" in done.stderr


def test_a_failed_report_leaves_the_committed_summary_as_it_was(tmp_path):
    """The report itself fails (an archive that holds no run, its sha256 recorded): summary.txt stays
    as committed and nothing is left beside it."""
    import hashlib
    import json
    import tarfile

    results = tmp_path / "experiments"
    shutil.copytree(ROOT / "experiments" / "round4", results / "round4")
    summary = results / "round4" / "summary.txt"
    summary.write_text("the committed summary\n")
    (tmp_path / "empty").mkdir()
    archive = results / "round4" / "runs.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        tar.add(tmp_path / "empty", arcname="runs")
    manifest = json.loads((results / "round4" / "MANIFEST.json").read_text())
    manifest["archives"]["runs.tar.xz"]["sha256"] = hashlib.sha256(archive.read_bytes()).hexdigest()
    (results / "round4" / "MANIFEST.json").write_text(json.dumps(manifest))
    env = {**os.environ, "EXPERIMENTS": str(results)}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "make_results.sh"), "round4"], env=env, capture_output=True, text=True
    )
    assert done.returncode != 0 and "left as it was" in done.stderr
    assert summary.read_text() == "the committed summary\n"
    assert sorted(p.name for p in (results / "round4").iterdir()) == sorted(
        p.name for p in (ROOT / "experiments" / "round4").iterdir()
    )


def _demo_run(repo: Path, name: str, overrides: str, mtime: int) -> Path:
    d = repo / "runs" / name
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text(overrides)
    for f in ("model_best.pt", "summary.json"):
        (d / f).write_text("x")
    os.utime(d, (mtime, mtime))
    return d


def test_the_worked_example_uses_the_newest_demo_run(tmp_path):
    repo = _repo_copy(tmp_path, "examples/retrieve_example.sh")
    _demo_run(repo, "Nov27_06-00-00_QRAG_qa1", "- experiment=demo\n", 1000)
    _demo_run(repo, "Nov27_07-00-00_QRAG_qa1", "- experiment=demo\n- seed=2\n", 2000)
    _demo_run(repo, "Nov27_08-00-00_QRAG_qa2", "- envs.task=qa2\n", 3000)  # newest, not a demo
    calls = tmp_path / "calls"
    env = dict(os.environ, PYTHON=str(_stub(tmp_path / "py", f'echo "$*" >> {calls}\n')))
    env.pop("RUN", None)
    done = subprocess.run(
        ["bash", str(repo / "examples" / "retrieve_example.sh")], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "using the newest demo run runs/Nov27_07-00-00_QRAG_qa1" in done.stderr
    lines = calls.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("retrieve.py run=runs/Nov27_07-00-00_QRAG_qa1 ")  # no training
