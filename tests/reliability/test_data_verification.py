"""Checking shipped data against its manifest (issue 46 items 12, 19): scripts/niah_testsets.py and
scripts/build_real_multihop.py --verify report a damaged or missing file (one changed byte included)
as a finding naming it (exit 1), a broken manifest in one line, and a folder in a test file's place is refused before
anything is generated."""

from __future__ import annotations

import gzip
import shutil

import pytest

from tests.conftest import ROOT, load_script

testsets = load_script("niah_testsets")
multihop = load_script("build_real_multihop")
TASK = "niah_single_1"


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _not_gzip(path):
    path.write_bytes(b'{"not": "gzip"}\n')


def _folder(path):
    path.unlink()
    path.mkdir()


@pytest.fixture
def niah_root(tmp_path, monkeypatch):
    """The committed manifest and one committed 4K test file; generating anything fails the test."""
    root = tmp_path / "ruler"
    (root / TASK).mkdir(parents=True)
    shutil.copy(testsets.ROOT / "MANIFEST.json", root)
    shutil.copy(testsets.ROOT / TASK / "test4k.jsonl.gz", root / TASK)
    monkeypatch.setattr(testsets, "make", lambda *a: pytest.fail("a test file was generated"))
    return root


def niah_main(root):
    return testsets.main(["--root", str(root), "--tasks", TASK, "--lengths", "4k", "--jobs", "1"])


def test_niah_the_committed_file_matches(niah_root, capsys):
    assert niah_main(niah_root) == 0
    assert "1/1 files match" in capsys.readouterr().out


@pytest.mark.parametrize("damage", [_truncate, _not_gzip], ids=["truncated", "not-gzip"])
def test_niah_an_unreadable_test_file_is_a_mismatch(niah_root, capsys, damage):
    damage(niah_root / TASK / "test4k.jsonl.gz")
    assert niah_main(niah_root) == 1
    assert f"MISMATCH {TASK}/test4k.jsonl.gz: cannot be read (" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        (b'{"files": [', "MANIFEST.json cannot be read"),
        (b"\xff\xfe", "MANIFEST.json cannot be read"),
        (b"[]", "is not a test-set manifest"),
        (b'{"tokenizer": "gpt2"}', "is not a test-set manifest"),
        (b'{"files": [{"sha256": "0"}]}', "is not a test-set manifest"),
    ],
    ids=["torn", "not-utf8", "list", "no-files", "entry-without-file"],
)
def test_niah_a_broken_manifest_is_one_line(niah_root, capsys, manifest, message):
    (niah_root / "MANIFEST.json").write_bytes(manifest)
    for args in ([], ["--write-manifest"]):
        assert testsets.main(["--root", str(niah_root), "--tasks", TASK, "--lengths", "4k", *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and len(err.splitlines()) == 1, err
    assert (niah_root / "MANIFEST.json").read_bytes() == manifest


def test_niah_a_folder_at_a_test_files_path_is_refused_before_generating(niah_root, capsys):
    _folder(niah_root / TASK / "test4k.jsonl.gz")
    assert niah_main(niah_root) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: not a file: ") and "test4k.jsonl.gz" in err
    assert sorted(p.name for p in (niah_root / TASK).iterdir()) == ["test4k.jsonl.gz"]  # no .tmp left


def test_niah_write_manifest_over_an_unreadable_file_is_one_line(niah_root, capsys):
    _truncate(niah_root / TASK / "test4k.jsonl.gz")
    before = (niah_root / "MANIFEST.json").read_bytes()
    assert testsets.main(["--root", str(niah_root), "--write-manifest"]) == 2
    assert "test4k.jsonl.gz cannot be read" in capsys.readouterr().err
    assert (niah_root / "MANIFEST.json").read_bytes() == before


# -- scripts/build_real_multihop.py --verify --------------------------------------------------


@pytest.fixture
def shipped(tmp_path):
    out = tmp_path / "data"
    for dataset in multihop.DATASETS:
        shutil.copytree(ROOT / "data" / dataset, out / dataset)
    return out


def _delete(path):
    path.unlink()


def _write(text):
    return lambda path: path.write_bytes(text)


def _one_byte_changed(path):
    """One character of the content changed (same length, same lines), gzipped again: readable, and
    only its sha256 tells."""
    raw = bytearray(gzip.decompress(path.read_bytes()))
    k = raw.index(b'"question": "') + len(b'"question": "')
    raw[k] = ord("X") if raw[k] != ord("X") else ord("Y")
    path.write_bytes(gzip.compress(bytes(raw)))


@pytest.mark.parametrize(
    ("name", "damage", "finding"),
    [
        ("subset_test.jsonl.gz", _one_byte_changed, "subset_test.jsonl.gz: sha256 differs from MANIFEST.json"),
        (
            "subset_validation.jsonl.gz",
            _one_byte_changed,
            "subset_validation.jsonl.gz: sha256 differs from MANIFEST.json",
        ),
        ("subset_test.jsonl.gz", _truncate, "subset_test.jsonl.gz: cannot be read ("),
        ("subset_test.jsonl.gz", _not_gzip, "subset_test.jsonl.gz: cannot be read ("),
        ("subset_test.jsonl.gz", _delete, "subset_test.jsonl.gz: missing"),
        ("subset_test.jsonl.gz", _folder, "subset_test.jsonl.gz: cannot be read ("),
        ("MANIFEST.json", _delete, "MANIFEST.json: missing"),
        ("MANIFEST.json", _write(b'{"files": ['), "MANIFEST.json: cannot be read ("),
        ("MANIFEST.json", _write(b'{"files": [{"file": "x"}]}'), "MANIFEST.json: not a manifest of this script"),
        ("MANIFEST.json", _write(b"[1]"), "MANIFEST.json: not a manifest of this script"),
    ],
    ids=[
        "byte",
        "validation-byte",
        "truncated",
        "not-gzip",
        "missing",
        "folder",
        "no-manifest",
        "torn-manifest",
        "entry",
        "list",
    ],
)
def test_multihop_verify_reports_a_damaged_file(shipped, capsys, name, damage, finding):
    assert multihop.main(["--verify", "--out", str(shipped)]) == 0  # the copy matches before the damage
    damage(shipped / "musique" / name)
    capsys.readouterr()
    assert multihop.main(["--verify", "--out", str(shipped)]) == 1
    expected = f"{shipped / 'musique' / name}{finding.removeprefix(name)}"
    assert [line[: len(expected)] for line in capsys.readouterr().out.splitlines()] == [expected]


def test_multihop_verify_of_a_wrong_out_names_what_is_missing(tmp_path, capsys):
    assert multihop.main(["--verify", "--out", str(tmp_path / "nowhere")]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{tmp_path / 'nowhere' / d / 'MANIFEST.json'}: missing" for d in ("hotpotqa", "musique", "2wikimultihopqa")
    ]
