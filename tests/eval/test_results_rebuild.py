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
        d.name for d in EXPERIMENTS.iterdir() if (d / "MANIFEST.json").is_file() and (d / "runs.tar.xz").is_file()
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
        data = (EXPERIMENTS / r / "runs.tar.xz").read_bytes()
        entry = json.loads((EXPERIMENTS / r / "MANIFEST.json").read_text())["archives"]["runs.tar.xz"]
        assert len(data) <= 16 * 2**20 and entry["bytes"] == len(data), r
        assert entry["sha256"] == hashlib.sha256(data).hexdigest(), r


def test_every_committed_archive_is_xz_with_plain_records():
    """One format in the tree: a round packed before it (runs.tgz, gzipped records inside) is converted
    with scripts/repack_round.py, so that the device calls, which carry the tree, carry 3x less."""
    import tarfile

    assert not sorted(EXPERIMENTS.glob("*/*.tgz")), "convert with scripts/repack_round.py"
    for r in _rounds():
        with tarfile.open(EXPERIMENTS / r / "runs.tar.xz") as tar:
            assert not [n for n in tar.getnames() if n.endswith(".gz")], r


def test_a_round_of_an_older_clone_still_rebuilds_and_converts_to_the_committed_bytes(tmp_path):
    """A runs.tgz of gzipped records (how rounds were committed before runs.tar.xz) makes the same
    tables, and scripts/repack_round.py turns it into the committed runs.tar.xz byte for byte (file
    times, modes and gzip settings of the old archive leave no trace)."""
    import gzip
    import hashlib
    import json
    import tarfile

    shutil.copytree(EXPERIMENTS / "round5", tmp_path / "round5")
    unpacked = tmp_path / "unpacked"
    with tarfile.open(tmp_path / "round5" / "runs.tar.xz") as tar:
        tar.extractall(unpacked, filter="data")
    for f in sorted(unpacked.rglob("*.jsonl")):
        if f.name.startswith("eval_"):
            f.with_name(f.name + ".gz").write_bytes(gzip.compress(f.read_bytes(), mtime=0))
            f.unlink()
    (tmp_path / "round5" / "runs.tar.xz").unlink()
    with tarfile.open(tmp_path / "round5" / "runs.tgz", "w:gz") as tar:
        for run in sorted(unpacked.iterdir()):
            tar.add(run, run.name)
    manifest_path = tmp_path / "round5" / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text())
    data = (tmp_path / "round5" / "runs.tgz").read_bytes()
    manifest["archives"] = {"runs.tgz": {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}}
    manifest_path.write_text(json.dumps(manifest))
    env = dict(os.environ, PYTHON=sys.executable, EXPERIMENTS=str(tmp_path))
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "make_results.sh"), "round5"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for name in ("table3.md", "lengths.md", "curves.md", "generated.md", "summary.txt"):
        made = (tmp_path / "round5" / name).read_bytes().replace(str(tmp_path).encode(), b"experiments")
        assert made == (EXPERIMENTS / "round5" / name).read_bytes(), name

    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "repack_round.py"), str(tmp_path / "round5" / "runs.tgz")], check=True
    )
    assert not (tmp_path / "round5" / "runs.tgz").exists()
    converted = (tmp_path / "round5" / "runs.tar.xz").read_bytes()
    assert converted == (EXPERIMENTS / "round5" / "runs.tar.xz").read_bytes()
    entry = json.loads(manifest_path.read_text())["archives"]
    assert entry == {"runs.tar.xz": {"sha256": hashlib.sha256(converted).hexdigest(), "bytes": len(converted)}}


def test_a_changed_archive_is_refused_before_any_table_is_written(tmp_path):
    shutil.copytree(EXPERIMENTS / "round4", tmp_path / "round4")
    with open(tmp_path / "round4" / "runs.tar.xz", "ab") as f:
        f.write(b"\0")
    before = {p.name: p.read_bytes() for p in (tmp_path / "round4").iterdir()}
    env = dict(os.environ, PYTHON=sys.executable, EXPERIMENTS=str(tmp_path))
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "make_results.sh"), "round4"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 1 and done.stderr.startswith("error: ") and "its MANIFEST.json says" in done.stderr
    assert {p.name: p.read_bytes() for p in (tmp_path / "round4").iterdir()} == before
