"""Table 1's NIAH sets: a training file of several subtasks (generate_niah.py --task a,b; the
loader reads it as any RULER file), files made in pieces (scripts/niah_testsets.py), and the
committed 4K test files against their manifest."""

import json
import sys

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
    assert testsets.manifest_entry(task, "4k", testsets.ROOT)["command"].startswith(
        f"python scripts/generate_niah.py --task {task} "
    )


def test_the_manifest_records_every_file_as_the_rounds_evaluated_it(tmp_path, committed_runs):
    """Issue 44 item 2: a sha256 for every file of the grid (the 128K and 1M files are made on the
    GPU machine, never committed) and for the training mixture; each equals the sha256 that every
    committed evaluation recorded of its test file (.testset.json), and the committed files match."""
    manifest = json.loads((testsets.ROOT / "MANIFEST.json").read_text())
    sha = {e["file"]: e["sha256"] for e in manifest["files"]}
    grid = {f"{t}/test{n}.jsonl.gz" for n in testsets.LENGTHS for t in TASKS}
    qa = {
        f"{t}/test{n}.jsonl.gz" for n in testsets.LENGTHS for t in testsets.QA_TASKS
    }  # tests/data_other/test_ruler_qa_sets.py
    assert grid | qa | {"mix8_4k/train.jsonl.gz", "mix8_4k/test4k.jsonl.gz"} == set(sha)
    assert None not in [sha[f] for f in sha if f not in qa]
    records = sorted(p for runs in committed_runs.values() for p in runs.glob("*/niah/*/*.testset.json"))
    assert {json.loads(p.read_text())["file"] for p in records} == grid  # round 5 evaluated the whole grid
    for p in records:
        assert sha[json.loads(p.read_text())["file"]] == json.loads(p.read_text())["sha256"], p
    for name in ("train", "test4k"):
        assert content_sha256(testsets.ROOT / "mix8_4k" / f"{name}.jsonl.gz") == sha[f"mix8_4k/{name}.jsonl.gz"]
    # --write-manifest keeps what is recorded: entries as they stand, the mixture beside the grid
    assert testsets.write_manifest(tmp_path, manifest) == manifest
