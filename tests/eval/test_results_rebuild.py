"""scripts/make_results.sh remakes the committed tables and plots of every round from its committed
raw archive byte for byte (issue 47 item 10, issue 45 item 3): the committed files are what the
command writes, and each archive is the one its MANIFEST.json names."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tests.conftest import EXPERIMENTS, ROOT


def _rounds() -> list[str]:
    return sorted(
        d.name for d in EXPERIMENTS.iterdir() if (d / "MANIFEST.json").is_file() and (d / "runs.tgz").is_file()
    )


def test_make_results_rebuilds_every_committed_round(tmp_path):
    rounds = [r for r in _rounds() if '"report"' in (EXPERIMENTS / r / "MANIFEST.json").read_text()]
    assert {"round4", "round5", "niah", "table2"} <= set(rounds)
    copy = tmp_path / "experiments"
    for r in rounds:
        shutil.copytree(EXPERIMENTS / r, copy / r)
    env = dict(os.environ, PYTHON=sys.executable, EXPERIMENTS=str(copy))
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "make_results.sh")], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"made the reports of {len(rounds)} round(s)" in done.stdout
    for r in rounds:
        for made in sorted((copy / r).rglob("*")):
            if made.is_dir():
                continue
            committed = EXPERIMENTS / made.relative_to(copy)
            assert committed.is_file(), f"{made.relative_to(copy)}: made, not committed"
            data = made.read_bytes().replace(str(copy).encode(), b"experiments")  # the folder as the text names it
            assert data == committed.read_bytes(), f"{made.relative_to(copy)} differs from the committed file"


def test_every_archive_is_small_and_its_manifest_names_its_sha256(tmp_path):
    import hashlib
    import json

    assert len(_rounds()) >= 5
    for r in _rounds():
        data = (EXPERIMENTS / r / "runs.tgz").read_bytes()
        entry = json.loads((EXPERIMENTS / r / "MANIFEST.json").read_text())["archives"]["runs.tgz"]
        assert len(data) <= 16 * 2**20 and entry["bytes"] == len(data), r
        assert entry["sha256"] == hashlib.sha256(data).hexdigest(), r


def test_a_changed_archive_is_refused_before_any_table_is_written(tmp_path):
    shutil.copytree(EXPERIMENTS / "round4", tmp_path / "round4")
    with open(tmp_path / "round4" / "runs.tgz", "ab") as f:
        f.write(b"\0")
    before = {p.name: p.read_bytes() for p in (tmp_path / "round4").iterdir()}
    env = dict(os.environ, PYTHON=sys.executable, EXPERIMENTS=str(tmp_path))
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "make_results.sh"), "round4"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 1 and done.stderr.startswith("error: ") and "its MANIFEST.json says" in done.stderr
    assert {p.name: p.read_bytes() for p in (tmp_path / "round4").iterdir()} == before
