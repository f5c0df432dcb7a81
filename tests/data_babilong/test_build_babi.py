"""scripts/build_babi.py: the shipped real bAbI files verify against MANIFEST.json, a rebuild from a
release-shaped folder gives the same bytes (qa3's train file = 1k train + valid-10k stories, each once),
and a damaged file is named."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts/build_babi.py"
SHIPPED = REPO / "data/babilong/babi/en-10k"
QA3 = "qa3_three-supporting-facts"

sys.path.insert(0, str(REPO / "scripts"))
from build_babi import split_stories  # noqa: E402


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def _release_folder(root: Path) -> Path:
    """A folder shaped like the release, made from the shipped files: qa3's train file is split back
    into a 1k train file and a valid file that repeats 15 of its stories."""
    (root / "en-10k").mkdir(parents=True)
    for f in SHIPPED.glob("*.txt.gz"):
        (root / "en-10k" / f.name[:-3]).write_bytes(gzip.decompress(f.read_bytes()))
    stories = split_stories((root / "en-10k" / f"{QA3}_train.txt").read_text())
    assert len(stories) == 385
    (root / "en").mkdir()
    (root / "en" / f"{QA3}_train.txt").write_text("".join(stories[:200]))
    (root / "en-valid-10k").mkdir()
    (root / "en-valid-10k" / "qa3_valid.txt").write_text("".join(stories[185:200] + stories[200:]))
    return root


def test_shipped_files_verify():
    proc = _run("--verify")
    assert proc.returncode == 0, proc.stderr
    assert "verified 10 files (46925 questions)" in proc.stdout


def test_rebuild_from_a_release_folder_is_byte_identical_and_damage_is_named(tmp_path):
    out = tmp_path / "out"
    proc = _run("--snapshot", str(_release_folder(tmp_path / "release")), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert f"{QA3}_train.txt.gz: 385 stories, 1925 questions" in proc.stdout
    for f in SHIPPED.glob("*.gz"):
        assert gzip.decompress((out / "en-10k" / f.name).read_bytes()) == gzip.decompress(f.read_bytes())
    damaged = out / "en-10k" / "qa2_two-supporting-facts_test.txt.gz"
    text = gzip.decompress(damaged.read_bytes()).replace(b"bathroom", b"kitchen", 1)
    damaged.write_bytes(gzip.compress(text))
    proc = _run("--verify", "--out", str(out))
    assert proc.returncode == 1 and str(damaged) in proc.stderr and "sha256" in proc.stderr


def test_missing_release_file_is_one_clear_error(tmp_path):
    root = _release_folder(tmp_path / "release")
    (root / "en-valid-10k" / "qa3_valid.txt").unlink()
    proc = _run("--snapshot", str(root), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and "qa3_valid.txt not found" in proc.stderr


def test_paths_presets_choose_real_or_generated_files():
    from tests.conftest import compose_cfg

    real = compose_cfg(["paths=embedded", "envs.task=qa3_three-supporting-facts"]).envs
    generated = compose_cfg(["paths=generated", "envs.task=qa3_three-supporting-facts"]).envs
    assert Path(real.facts_train_path).parent == SHIPPED
    assert Path(generated.facts_test_path).parent == REPO / "data/babilong/babi-generated/en-10k"
    for path in (real.facts_train_path, generated.facts_train_path, generated.facts_test_path):
        assert Path(path + ".gz").is_file()
    assert real.noise_train_path == generated.noise_train_path  # only the bAbI files differ
