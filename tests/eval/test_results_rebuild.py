"""scripts/make_results.sh remakes the committed tables and plots of every round from its committed
raw files byte for byte (issue 47 item 10): the committed files are what the command writes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tests.conftest import ROOT

RESULTS = ROOT / "docs" / "results"


def test_make_results_rebuilds_every_committed_round(tmp_path):
    rounds = sorted(d.name for d in RESULTS.iterdir() if (d / "runs").is_dir())
    assert {"round4", "round5", "niah", "table2"} <= set(rounds)
    copy = tmp_path / "results"
    for r in rounds:
        shutil.copytree(RESULTS / r, copy / r)
    env = dict(os.environ, PYTHON=sys.executable, RESULTS=str(copy))
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "make_results.sh")], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"made the reports of {len(rounds)} round(s)" in done.stdout
    for r in rounds:
        for made in sorted((copy / r).rglob("*")):
            if made.is_dir() or "runs" in made.relative_to(copy / r).parts:
                continue
            committed = RESULTS / made.relative_to(copy)
            assert committed.is_file(), f"{made.relative_to(copy)}: made, not committed"
            data = made.read_bytes().replace(str(copy).encode(), b"docs/results")  # the folder as the text names it
            assert data == committed.read_bytes(), f"{made.relative_to(copy)} differs from the committed file"
