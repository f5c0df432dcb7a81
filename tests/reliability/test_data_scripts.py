"""Untrusted input to the data scripts (issue 36 items 1, 3, 11, 20): an index, a book list or an
archive from a mirror never writes outside the folder it is laid out in, never replaces the shipped
data before it is verified, and a failure is one ``error:`` line with the project's status 2."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import tarfile
import zipfile

import pytest

from tests.conftest import ROOT, load_script

EVIL_BOOK = "test/../../../../x/y"


def _pg19_mirror(tmp_path, names):
    """A file:// mirror serving PG19 bucket indexes that list ``names`` (and each book's text)."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for split in ("test", "validation"):
        items = [{"name": f"{n}.txt"} for n in names if n.startswith(split)]
        (mirror / f"pg19_{split}_index.json").write_text(json.dumps({"items": items}))
    for n in names:
        (mirror / f"{n.replace('/', '__')}.txt").write_text("It was a dark night. The rain fell.\n")
    return mirror


def test_a_pg19_index_naming_a_book_outside_the_folder_is_refused_and_writes_nothing(tmp_path):
    gd = load_script("get_data")
    mirror = _pg19_mirror(tmp_path, ["test/101", EVIL_BOOK])
    root = tmp_path / "data" / "datasets"
    with pytest.raises(SystemExit, match=r"PG19 book name 'test/\.\./.*' is not split/<number>"):
        gd.main(["pg19", "--data-root", str(root), "--mirror", mirror.as_uri()])
    assert not [p for p in tmp_path.rglob("y.txt")], "a file was written where the index pointed"
    assert not (root / "pg19").exists()


@pytest.mark.parametrize("books", [EVIL_BOOK, "test/101,/etc/x", "test", "test/1/2"])
def test_a_pg19_book_list_that_is_not_split_slash_id_is_refused(tmp_path, books):
    gd = load_script("get_data")
    mirror = _pg19_mirror(tmp_path, ["test/101"])
    with pytest.raises(SystemExit, match=r"is not split/<number>"):
        gd.main(["pg19", "--data-root", str(tmp_path / "d"), "--mirror", mirror.as_uri(), "--pg19-books", books])
    assert not (tmp_path / "d").exists()


def test_a_layout_target_outside_the_staging_folder_is_refused(tmp_path):
    gd = load_script("get_data")
    (tmp_path / "dl").mkdir()
    (tmp_path / "dl" / "a.json").write_text("[]")
    b = gd.Benchmark("data_root", "x", [gd.Remote("u", "a.json")], {"a.json": "../../escaped.json"})
    with pytest.raises(gd.DataError, match="outside"):
        gd.lay_out(tmp_path / "dl", tmp_path / "stage" / "s", b)
    assert not (tmp_path / "escaped.json").exists()


@pytest.mark.parametrize("index", ["[1, 2]", '{"items": [{"nom": "x"}]}', '{"items": [{"name": 7}]}', "not json"])
def test_a_malformed_pg19_index_is_one_line(tmp_path, index):
    gd = load_script("get_data")
    mirror = _pg19_mirror(tmp_path, [])
    (mirror / "pg19_test_index.json").write_text(index)
    with pytest.raises(SystemExit, match=r"^error: .* is not a PG19 bucket index"):
        gd.main(["pg19", "--data-root", str(tmp_path / "d"), "--mirror", mirror.as_uri()])


def _run_get_data(*args):
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "get_data.py"), *args], capture_output=True, text=True, cwd=ROOT
    )


def test_offline_is_one_line_status_2_and_leaves_no_empty_download_folder(tmp_path):
    root = tmp_path / "datasets"
    p = _run_get_data("hotpotqa", "--data-root", str(root), "--mirror", (tmp_path / "nowhere").as_uri())
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("error: cannot download") and len(p.stderr.strip().splitlines()) == 1
    assert not (root / "hotpotqa").exists()


def test_an_unwritable_data_root_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")  # a data root below a file: no folder can be made there
    mirror = _pg19_mirror(tmp_path, ["test/101", "validation/202"])
    p = _run_get_data("pg19", "--data-root", str(tmp_path / "file" / "d"), "--mirror", mirror.as_uri())
    assert p.returncode == 2 and p.stderr.startswith("error: ") and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_a_damaged_zip_is_one_line(tmp_path):
    gd = load_script("get_data")
    dl = tmp_path / "dl"
    dl.mkdir()
    with zipfile.ZipFile(dl / "a.zip", "w") as z:
        z.writestr("data/train.json", "[" + ",".join(["{}"] * 5000) + "]")
    raw = bytearray((dl / "a.zip").read_bytes())
    raw[40:60] = b"\xff" * 20  # the member's compressed bytes: its CRC no longer holds
    (dl / "a.zip").write_bytes(bytes(raw))
    b = gd.Benchmark("data_root", "x", [gd.Remote("u", "a.zip")], {"train.json": "train.json"})
    with pytest.raises(gd.DataError, match="a damaged archive"):
        gd.lay_out(dl, tmp_path / "stage", b)


def test_a_zip_whose_member_does_not_inflate_is_one_line(tmp_path):
    """issue 46 item 21: a damaged deflate stream is zlib.error, not BadZipFile."""
    gd = load_script("get_data")
    dl = tmp_path / "dl"
    dl.mkdir()
    with zipfile.ZipFile(dl / "a.zip", "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("data/train.json", "[" + ",".join(f'{{"a": {i}}}' for i in range(5000)) + "]")
    raw = bytearray((dl / "a.zip").read_bytes())
    raw[131:135] = b"\x00\xff\x13\x37"  # inside the member's deflate stream
    (dl / "a.zip").write_bytes(bytes(raw))
    b = gd.Benchmark("data_root", "x", [gd.Remote("u", "a.zip")], {"train.json": "train.json"})
    with pytest.raises(gd.DataError, match="a damaged archive"):
        gd.lay_out(dl, tmp_path / "stage", b)


# -- scripts/build_babi.py ------------------------------------------------------------------
BABI = ROOT / "data" / "babilong" / "babi"
QA1_TEST = "qa1_single-supporting-fact_test.txt"


def _tarball(tmp_path, change=None, cut=False, link=None):
    """A tasks_1-20_v1-2.tar.gz made from the shipped files (qa3's train file as both of its parts),
    ``change`` applied to the bytes of qa1's test file; ``link``: qa1's test file is a symlink there."""
    path = tmp_path / "tasks.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for f in sorted((BABI / "en-10k").glob("*.txt.gz")):
            data = gzip.decompress(f.read_bytes())
            name = f.name[:-3]
            if name == QA1_TEST and change:
                data = change(data)
            members = {f"en-10k/{name}": data}
            if name.startswith("qa3") and name.endswith("train.txt"):
                members = {f"en/{name}": data, "en-valid-10k/qa3_valid.txt": data}
            for rel, blob in members.items():
                info = tarfile.TarInfo(f"tasks_1-20_v1-2/{rel}")
                if link and name == QA1_TEST:
                    info.type, info.linkname = tarfile.SYMTYPE, link
                    tar.addfile(info)
                    continue
                info.size = len(blob)
                tar.addfile(info, io.BytesIO(blob))
    if cut:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


def _shipped_copy(tmp_path):
    out = tmp_path / "babi"
    (out / "en-10k").mkdir(parents=True)
    for f in (BABI / "en-10k").glob("*.gz"):
        (out / "en-10k" / f.name).write_bytes(f.read_bytes())
    return out, {f.name: f.read_bytes() for f in (out / "en-10k").iterdir()}


def _build_babi(*args):
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_babi.py"), *map(str, args)], capture_output=True, text=True
    )


@pytest.mark.parametrize(
    "damage",
    [
        {"change": lambda b: b.replace(b"bathroom", b"kitchen", 1)},  # a different qa1 test file
        {"change": lambda b: b.replace(b"Mary", b"M\xe9ry", 1)},  # a Latin-1 member
        {"cut": True},  # a truncated archive
        {"link": "/etc/hostname"},  # issue 46 item 21: a symlink member, out of the archive
        {"link": "qa1_single-supporting-fact_train.txt"},  # ... and to another member
    ],
    ids=["different", "latin1", "truncated", "symlink-out", "symlink-in"],
)
def test_a_bad_tarball_replaces_nothing(tmp_path, damage):
    out, before = _shipped_copy(tmp_path)
    p = _build_babi("--tarball", _tarball(tmp_path, **damage), "--out", out)
    assert p.returncode in (1, 2) and p.stderr.startswith("error: ") and "Traceback" not in p.stderr, p.stderr
    assert {f.name: f.read_bytes() for f in (out / "en-10k").iterdir()} == before
    assert sorted(q.name for q in out.parent.iterdir()) == sorted(["babi", "tasks.tar.gz"])  # no build folder left


def test_a_good_tarball_rebuilds_the_shipped_bytes_and_a_failed_download_leaves_nothing(tmp_path):
    out, before = _shipped_copy(tmp_path)
    p = _build_babi("--tarball", _tarball(tmp_path), "--out", out)
    assert p.returncode == 0, p.stderr
    assert {f.name: gzip.decompress(f.read_bytes()) for f in (out / "en-10k").iterdir()} == {
        n: gzip.decompress(b) for n, b in before.items()
    }
    p = _build_babi("--url", (tmp_path / "nowhere.tar.gz").as_uri(), "--out", out)
    assert p.returncode == 2 and p.stderr.startswith("error: ") and len(p.stderr.strip().splitlines()) == 1
    assert sorted(q.name for q in out.iterdir()) == ["en-10k"]  # no partial tarball in the data folder
    assert sorted(q.name for q in out.parent.iterdir()) == sorted(["babi", "tasks.tar.gz"])
