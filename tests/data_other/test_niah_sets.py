"""Table 1's NIAH sets: a training file of several subtasks (generate_niah.py --task a,b; the
loader reads it as any RULER file), files made in pieces (scripts/niah_testsets.py), and the
committed 4K test files against their manifest."""

import gzip
import json
import sys

import pytest

from envs.data.common import content_sha256
from envs.data.niah import load_niah
from envs.data.niah_generator import TASKS, generate, mix, read_corpus, whitespace_counter, write_jsonl
from tests.conftest import load_script
from tests.data_other.test_generators import BOOKS

generate_niah = load_script("generate_niah")
testsets = load_script("niah_testsets")

MIXED = ("niah_multiquery", "niah_multikey_3", "niah_single_1")


def test_a_mixed_file_holds_each_task_in_turn_and_loads(tmp_path):
    corpus = tmp_path / "books.txt"
    corpus.write_text("\n\n".join(" ".join(book) for book in BOOKS[:1]))
    generate_niah.main(
        ["--task", ",".join(MIXED), "--out", str(tmp_path), "--train", "3:400", "--tokenizer", "whitespace"]
        + ["--corpus", str(corpus)]
    )
    recs = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert [r["task"] for r in recs] == list(MIXED) * 3 and [r["index"] for r in recs] == list(range(9))
    # each record is the single-task file's sample, so a mixture adds no stream of its own
    alone = generate("niah_multikey_3", 3, 400, 0, "train", whitespace_counter, read_corpus(corpus))
    assert [{k: r[k] for k in alone[0]} for r in recs[1::3]] == [{**a, "index": 3 * i + 1} for i, a in enumerate(alone)]
    samples = load_niah(tmp_path, "train")
    for r, s in zip(recs, samples):
        spec = TASKS[r["task"]]
        gold = [s["chunks"][j] for j in s["sf_idx"]]
        assert len(gold) == spec.num_queries * spec.num_values and all(g.startswith("One of the special") for g in gold)
        assert sorted(v for g in gold for v in r["outputs"] if v in g) == sorted(r["outputs"])


def test_mix_keeps_the_tasks_balanced_when_counts_differ():
    out = mix({"a": [{"index": 0}, {"index": 1}], "b": [{"index": 0}]})
    assert [(r["task"], r["index"]) for r in out] == [("a", 0), ("b", 1), ("a", 2)]


def test_a_file_made_in_pieces_equals_the_file_made_at_once():
    whole = generate("niah_multivalue", 5, 400, 0, "test4k", whitespace_counter, BOOKS)
    pieces = [
        generate("niah_multivalue", n, 400, 0, "test4k", whitespace_counter, BOOKS, start=s)
        for s, n in ((0, 2), (2, 3))
    ]
    assert pieces[0] + pieces[1] == whole


def test_the_bytes_do_not_depend_on_jobs(tmp_path, monkeypatch):
    """Issue 44 item 2: niah_testsets.py --jobs N writes the same bytes for every N, the bytes of
    the file made at once, so the manifest's sha256 hold whatever machine makes the files. A tiny
    length cut into pieces of one sample, an essay and a needle haystack, on 1 and 3 processes (GPT-2
    counting; the workers are forked, so they see the patches)."""
    monkeypatch.setitem(sys.modules, "niah_testsets", testsets)  # the pool's workers find _piece by name
    monkeypatch.setitem(testsets.LENGTHS, "tiny", 512)
    monkeypatch.setitem(testsets.SAMPLES, "tiny", 3)
    monkeypatch.setattr(testsets, "PIECE_TOKENS", 512)
    monkeypatch.setattr(testsets, "_corpus", lambda: BOOKS)  # the shipped books take a second a piece
    files = [("niah_single_2", "tiny"), ("niah_multikey_2", "tiny")]
    whole = tmp_path / "whole.jsonl.gz"  # loads the tokenizer once, before the workers fork
    write_jsonl(generate("niah_single_2", 3, 512, 0, "testtiny", testsets._counter(), BOOKS), whole)
    made = {}
    for jobs in (1, 3):
        testsets.make(files, tmp_path / str(jobs), jobs)
        made[jobs] = [(tmp_path / str(jobs) / t / f"test{n}.jsonl.gz").read_bytes() for t, n in files]
    assert made[1] == made[3]
    assert made[3][0] == whole.read_bytes()


def _tiny_grid(tmp_path, monkeypatch):
    """A length of 512 GPT-2 tokens cut into pieces of one sample, made as the grid's files are (the
    workers are forked, so they see the patches); returns the function that makes a root's files."""
    monkeypatch.setitem(sys.modules, "niah_testsets", testsets)  # the pool's workers find _piece by name
    monkeypatch.setitem(testsets.LENGTHS, "tiny", 512)
    monkeypatch.setattr(testsets, "PIECE_TOKENS", 512)
    monkeypatch.setattr(testsets, "_corpus", lambda: BOOKS)  # the shipped books take a second a piece
    testsets._counter()  # the tokenizer loads once, before the workers fork

    def make(n: int, files: list[tuple[str, str]]):
        monkeypatch.setitem(testsets.SAMPLES, "tiny", n)
        testsets.make(files, tmp_path / str(n), 2)
        return tmp_path / str(n)

    return make


def test_the_first_n_samples_of_a_file_are_the_file_of_n_samples(tmp_path, monkeypatch):
    """Issue 44 item 1: the grid's 1M files grew from 30 samples (round 5's records) to 100. Sample i
    has its own generator, derive_rng(seed, "niah", task, split, tokens, i), so the uncompressed
    content of the 3-sample file is, byte for byte, the first 3 lines of the 8-sample one, and
    sample_hashes gives its sha256 (what the manifest keeps as a prefix); an essay and a needle haystack."""
    make = _tiny_grid(tmp_path, monkeypatch)
    files = [("niah_single_2", "tiny"), ("niah_multikey_2", "tiny")]
    short, full = make(3, files), make(8, files)
    for task, length in files:
        name = f"{task}/test{length}.jsonl.gz"
        lines = gzip.decompress((full / name).read_bytes()).splitlines(keepends=True)
        assert len(lines) == 8 and b"".join(lines[:3]) == gzip.decompress((short / name).read_bytes())
        hashes = testsets.sample_hashes(full / name)
        assert hashes[3] == content_sha256(short / name) == testsets.sample_hashes(short / name)[-1]
        assert hashes[-1] == content_sha256(full / name) and len(hashes) == 9


def test_a_file_is_recorded_only_if_it_holds_the_grids_samples_and_its_prefixes(tmp_path, monkeypatch):
    """A file whose sha256 the manifest lacks (the 1M files at 100 samples) is a mismatch, and
    --write-manifest refuses it, if it holds another number of samples (round 5's 30-sample file
    left on a disk) or its first n samples are not the recorded prefix; a good one is recorded
    with its prefixes kept."""
    make = _tiny_grid(tmp_path, monkeypatch)
    files = [("niah_single_2", "tiny")]
    name = "niah_single_2/testtiny.jsonl.gz"
    short, full = make(3, files), make(8, files)
    entry = testsets.manifest_entry("niah_single_2", "tiny", None)
    prefixes = {"3": {"sha256": content_sha256(short / name), "recorded_from": "the 3-sample file"}}
    manifest = {"files": [{**entry, "prefixes": prefixes}]}
    assert entry["samples"] == 8 and entry["sha256"] is None
    (bad,), _ = testsets.verify(files, short, manifest)
    assert bad == f"{name}: 3 samples, the grid's 8 (an older file? regenerate it: --force)"
    with pytest.raises(testsets.TestsetError, match="3 samples, the grid's 8"):
        testsets.write_manifest(short, manifest)
    assert testsets.verify(files, full, manifest) == ([], [f"{name}: sha256 {content_sha256(full / name)}"])
    recorded = {e["file"]: e for e in testsets.write_manifest(full, manifest)["files"]}[name]
    assert recorded["sha256"] == content_sha256(full / name) and recorded["prefixes"] == prefixes
    assert recorded["made_with"]  # the versions that made it
    other = {"files": [{**entry, "prefixes": {"3": {"sha256": "0" * 64}}}]}
    (bad,), _ = testsets.verify(files, full, other)
    assert bad.startswith(f"{name}: its first 3 samples have sha256 {content_sha256(short / name)}, the manifest 000")
    with pytest.raises(testsets.TestsetError, match="the generator no longer makes those samples"):
        testsets.write_manifest(full, other)


def test_a_record_of_n_samples_is_checked_against_the_first_n(tmp_path):
    """recorded_sha256 (what niah_report.py checks a record against): a 1M entry answers round 5's
    30-sample records with the prefix, its 100 once recorded, any other n with an error naming
    the file, n and what the manifest holds."""
    manifest = json.loads((testsets.ROOT / "MANIFEST.json").read_text())
    entry = next(e for e in manifest["files"] if e["file"] == "niah_single_1/test1m.jsonl.gz")
    assert testsets.SAMPLES["1m"] == entry["samples"] == 100
    assert testsets.recorded_sha256(entry, 30) == entry["prefixes"]["30"]["sha256"]
    with pytest.raises(testsets.TestsetError, match="no sha256 of its first 100 samples .*first 100: not recorded"):
        testsets.recorded_sha256(entry, 100)
    with pytest.raises(testsets.TestsetError) as e:
        testsets.recorded_sha256(entry, 50)
    assert str(e.value) == (
        "niah_single_1/test1m.jsonl.gz: the manifest has no sha256 of its first 50 samples (first 30: "
        f"{entry['prefixes']['30']['sha256']}; first 100: not recorded yet (--write-manifest))"
    )
    assert testsets.recorded_sha256({**entry, "sha256": "a" * 64}, 100) == "a" * 64


def test_the_committed_4k_test_files_match_their_manifest(tmp_path):
    manifest = json.loads((testsets.ROOT / "MANIFEST.json").read_text())
    files = [(t, "4k") for t in TASKS]
    assert testsets.verify(files, testsets.ROOT, manifest) == ([], [])
    for task in TASKS:
        assert len(load_niah(testsets.ROOT / task, "test4k")) == testsets.SAMPLES["4k"] == 100
    # a changed file is named, with both hashes
    task = "niah_single_2"
    write_jsonl(generate(task, 1, 400, 0, "test4k", whitespace_counter, BOOKS), tmp_path / task / "test4k.jsonl.gz")
    (bad,), _ = testsets.verify([(task, "4k")], tmp_path, manifest)
    assert bad.startswith(f"{task}/test4k.jsonl.gz: sha256 {content_sha256(tmp_path / task / 'test4k.jsonl.gz')}")
    assert testsets.manifest_entry(task, "4k", None)["command"].startswith(
        f"python scripts/generate_niah.py --task {task} "
    )


def test_the_manifest_records_every_file_as_the_rounds_evaluated_it(tmp_path, committed_runs):
    """Issue 44 item 2: a sha256 for every file of the grid (the 128K and 1M files are made on the
    GPU machine, never committed) and for the training mixture, except the 1M files at 100 samples,
    not made yet, which keep round 5's 30-sample sha256 as their first 30 samples'; each committed
    evaluation's test file (.testset.json) has the manifest's sha256 of the first n samples, n its
    records (niah_report.py's check), and the committed files match."""
    manifest = json.loads((testsets.ROOT / "MANIFEST.json").read_text())
    sha = {e["file"]: e["sha256"] for e in manifest["files"]}
    grid = {f"{t}/test{n}.jsonl.gz" for n in testsets.LENGTHS for t in TASKS}
    qa = {
        f"{t}/test{n}.jsonl.gz" for n in testsets.LENGTHS for t in testsets.QA_TASKS
    }  # tests/data_other/test_ruler_qa_sets.py
    assert grid | qa | {"mix8_4k/train.jsonl.gz", "mix8_4k/test4k.jsonl.gz"} == set(sha)
    entries = {e["file"]: e for e in manifest["files"]}
    one_m = {f for f in grid if f.endswith("test1m.jsonl.gz")}
    assert {f for f in sha if sha[f] is None} - qa == one_m
    assert {entries[f]["samples"] for f in one_m} == {100} and {tuple(entries[f]["prefixes"]) for f in one_m} == {
        ("30",)
    }
    records = sorted(p for runs in committed_runs.values() for p in runs.glob("*/niah/*/*.testset.json"))
    assert {json.loads(p.read_text())["file"] for p in records} == grid  # round 5 evaluated the whole grid
    for p in records:
        side, n = (
            json.loads(p.read_text()),
            json.loads(p.with_name(p.name.replace(".testset", ".summary")).read_text())["n"],
        )
        assert n == (30 if side["file"] in one_m else 100), p
        assert testsets.recorded_sha256(entries[side["file"]], n) == side["sha256"], p
    for name in ("train", "test4k"):
        assert content_sha256(testsets.ROOT / "mix8_4k" / f"{name}.jsonl.gz") == sha[f"mix8_4k/{name}.jsonl.gz"]
    # --write-manifest keeps what is recorded: entries as they stand, the mixture beside the grid
    assert testsets.write_manifest(tmp_path, manifest) == manifest
