"""scripts/get_data.py: download (from a local HTTP server and a file:// mirror standing in for
the official hosts), verification by sha256 and record counts, layout where the loaders read."""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import http.server
import json
import shutil
import threading
import zipfile

import pytest

from envs.data.hotpotqa import load_2wiki, load_hotpotqa
from envs.data.ruler_qa import load_ruler_qa
from tests.conftest import ROOT, load_script

FIX = ROOT / "tests" / "fixtures" / "other"


@pytest.fixture
def served(tmp_path):
    """(folder, base URL) of a local HTTP server."""
    folder = tmp_path / "served"
    folder.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _counts_of_fixtures(monkeypatch, gd, counts: dict[str, int]):
    """The official record counts replaced by the fixtures' (the check itself is unchanged)."""
    original = gd.benchmarks

    def patched(args):
        out = original(args)
        for b in out.values():
            b.expect = [dataclasses.replace(e, count=counts.get(e.path, e.count)) for e in b.expect]
        return out

    monkeypatch.setattr(gd, "benchmarks", patched)


HOTPOT = ("hotpot_train_v1.1.json", "hotpot_dev_distractor_v1.json", "hotpot_dev_fullwiki_v1.json")


def test_hotpotqa_downloaded_verified_and_laid_out(served, tmp_path, monkeypatch, capsys):
    gd = load_script("get_data")
    folder, url = served
    for name in HOTPOT:
        shutil.copy(FIX / "hotpotqa" / name, folder / name)
    counts = {n: len(json.loads((FIX / "hotpotqa" / n).read_text())) for n in HOTPOT}
    _counts_of_fixtures(monkeypatch, gd, counts)
    root = tmp_path / "datasets"
    gd.main(["hotpotqa", "--data-root", str(root), "--mirror", url])
    out = root / "hotpotqa"
    manifest = json.loads((out / "SOURCES.json").read_text())
    assert [s["url"] for s in manifest["sources"]] == [f"http://curtis.ml.cmu.edu/datasets/hotpot/{n}" for n in HOTPOT]
    for s in manifest["sources"]:
        assert s["sha256"] == hashlib.sha256((out / s["file"]).read_bytes()).hexdigest()
    assert manifest["records"] == counts and not (out / ".download").exists()
    assert len(load_hotpotqa(out, "train")) == counts["hotpot_train_v1.1.json"]  # where the preset reads it
    assert (
        f"ok  hotpot_dev_fullwiki_v1.json: {counts['hotpot_dev_fullwiki_v1.json']} records" in capsys.readouterr().out
    )
    gd.main(["hotpotqa", "--data-root", str(root), "--verify-only"])


def test_count_mismatch_and_corrupt_file_are_refused_and_not_laid_out(served, tmp_path, monkeypatch):
    gd = load_script("get_data")
    folder, url = served
    for name in HOTPOT:
        shutil.copy(FIX / "hotpotqa" / name, folder / name)
    root = tmp_path / "datasets"
    # the official counts (90 447 training questions): three fixture records are not the dataset
    with pytest.raises(SystemExit, match=r"hotpot_train_v1.1.json holds 3 records, the official file 90447"):
        gd.main(["hotpotqa", "--data-root", str(root), "--mirror", url])
    assert not (root / "hotpotqa" / "hotpot_train_v1.1.json").exists()
    counts = {n: len(json.loads((FIX / "hotpotqa" / n).read_text())) for n in HOTPOT}
    _counts_of_fixtures(monkeypatch, gd, counts)
    text = (FIX / "hotpotqa" / HOTPOT[1]).read_text()
    (folder / HOTPOT[1]).write_text(text[: len(text) // 2])  # a truncated transfer
    with pytest.raises(SystemExit, match=r"hotpot_dev_distractor_v1.json: not readable as json"):
        gd.main(["hotpotqa", "--data-root", str(root), "--mirror", url])
    assert not list((root / "hotpotqa").glob("*.json"))
    with pytest.raises(
        SystemExit, match=r"cannot download http://127.0.0.1:\d+/nowhere/hotpot_train_v1.1.json \(HTTP Error 404"
    ):
        gd.main(["hotpotqa", "--data-root", str(tmp_path / "other"), "--mirror", url + "/nowhere"])


def test_2wiki_zip_from_a_file_mirror_keeps_the_alias_file(tmp_path, monkeypatch):
    gd = load_script("get_data")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    with zipfile.ZipFile(mirror / "data_ids_april7.zip", "w") as z:  # the official archive's layout
        for name in ("dev.json", "test.json", "id_aliases.json"):
            z.write(FIX / "2wiki_ids" / name, f"data_ids_april7/{name}")
        z.write(FIX / "2wiki" / "train.json", "data_ids_april7/train.json")
    counts = {
        n: len(json.loads(p.read_text()))
        for n, p in (
            ("train.json", FIX / "2wiki" / "train.json"),
            ("dev.json", FIX / "2wiki_ids" / "dev.json"),
            ("test.json", FIX / "2wiki_ids" / "test.json"),
        )
    }
    _counts_of_fixtures(monkeypatch, gd, counts)
    root = tmp_path / "datasets"
    gd.main(["2wikimultihopqa", "--data-root", str(root), "--mirror", mirror.as_uri()])
    out = root / "2wikimultihopqa"
    assert sorted(p.name for p in out.iterdir()) == [
        "SOURCES.json",
        "dev.json",
        "id_aliases.json",
        "test.json",
        "train.json",
    ]
    assert load_2wiki(out, "dev")[0]["answer_aliases"]  # the aliases reach the loader


def test_default_roots_are_the_presets(monkeypatch):
    gd = load_script("get_data")
    roots = gd.default_roots()
    assert roots["data_root"] == (ROOT / ".." / "datasets").resolve()
    assert roots["ruler_root"] == (ROOT / ".." / "RULER").resolve()


def test_ruler_qa_from_the_real_dev_set_format(served, tmp_path, monkeypatch):
    gd = load_script("get_data")
    folder, url = served
    # real-format records, renamed apart so that there are distractor paragraphs to borrow
    base = json.loads((FIX / "hotpotqa" / "hotpot_train_v1.1.json").read_text())
    recs = []
    for k in range(4):
        for r in base:
            ren = {t: f"{t} ({k})" for t, _ in r["context"]}
            recs.append(
                {
                    **r,
                    "_id": f"{r['_id']}-{k}",
                    "context": [[ren[t], s] for t, s in r["context"]],
                    "supporting_facts": [[ren.get(t, t), i] for t, i in r["supporting_facts"]],
                }
            )
    (folder / "hotpot_dev_distractor_v1.json").write_text(json.dumps(recs))
    _counts_of_fixtures(monkeypatch, gd, {"sources/hotpot_dev_distractor_v1.json": len(recs)})
    root, ruler = tmp_path / "datasets", tmp_path / "RULER"
    args = ["ruler", "--data-root", str(root), "--ruler-root", str(ruler), "--mirror", url]
    gd.main([*args, "--niah-train", "", "--niah-test", ""])
    samples = load_ruler_qa(root / "ruler_qa" / "qa_2.jsonl")
    assert len(samples) == 12 and all(s["sf_known"] and len(s["sf_idx"]) == 2 for s in samples)
    assert json.loads((ruler / "SOURCES.json").read_text())["records"] == {"sources/hotpot_dev_distractor_v1.json": 12}


def test_pg19_books_become_the_noise_corpus(served, tmp_path):
    gd = load_script("get_data")
    folder, url = served
    book = "*** START OF THIS PROJECT GUTENBERG EBOOK X ***\nIt was a dark night. The rain fell.\n\nMr. Smith left.\n"
    (folder / "test__101.txt").write_text(book)
    (folder / "validation__202.txt").write_text(book.replace("dark", "bright"))
    root = tmp_path / "datasets"
    gd.main(["pg19", "--data-root", str(root), "--mirror", url, "--pg19-books", "test/101,validation/202"])
    out = root / "babilong" / "pg19-with-sentences"
    with gzip.open(out / "test.jsonl.gz", "rt") as f:
        test = [json.loads(line) for line in f]
    with gzip.open(out / "train.jsonl.gz", "rt") as f:
        train = [json.loads(line) for line in f]
    assert test == [{"title": "PG19 101", "sentences": ["It was a dark night.", "The rain fell.", "Mr. Smith left."]}]
    assert train[0]["sentences"][0] == "It was a bright night."
