"""RULER's QA test sets (envs/data/ruler_qa_generator.py, scripts/niah_testsets.py --tasks qa): the
layout of a sample on tiny hand-made HotpotQA / SQuAD sources (whitespace counting, so every length is
countable by hand), RULER's distractor order, the pools' fallback, pieces and --jobs, the manifest's
record of the inputs, and the committed 4K files and SQuAD subset against their manifests."""

import gzip
import json
import shutil
import sys

import pytest

from envs.data.niah_generator import whitespace_counter, write_jsonl
from envs.data.ruler_qa import load_ruler_qa
from envs.data.ruler_qa_generator import Pools, generate_qa, load_hotpot, load_squad, squad_subset
from tests.conftest import load_script

testsets = load_script("niah_testsets")

INSTRUCTION = (
    "Answer the question based on the given documents. Only give me the answer and do not output any other words."
)


def para(title: str) -> list[str]:
    """A 6-word paragraph: with its 2-word title 8 words, and as a document ("Document n:") 10."""
    return ["This is one.", " It has two."]


def hotpot_record(k: int) -> dict:
    titles = [f"T{k}{c} X" for c in "abcd"]  # two-word titles
    return {
        "_id": f"h{k}",
        "question": f"Which thing {k}?",
        "answer": f"A{k}",
        "supporting_facts": [[titles[0], 0], [titles[2], 1]],
        "context": [[t, para(t)] for t in titles],
        "type": "bridge",
        "level": "hard",
    }


def ircot_record(k: int, titles: list[str]) -> dict:
    contexts = [
        {"title": t, "paragraph_text": "  ".join(s.strip() for s in para(t)), "is_supporting": False} for t in titles
    ]
    return {"question_id": f"i{k}", "question_text": "?", "answers_objects": [], "contexts": contexts}


def write_gz_lines(path, records):
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


@pytest.fixture
def hotpot_dir(tmp_path):
    d = tmp_path / "hotpotqa"
    d.mkdir()
    write_gz_lines(d / "subset_test.jsonl.gz", [hotpot_record(k) for k in range(3)])
    # an IRCoT copy of a test paragraph (its text spaced otherwise) and two new paragraphs
    write_gz_lines(d / "subset_train.jsonl.gz", [ircot_record(0, ["T0a X", "N1 X", "N2 X"])])
    return d


SQUAD = {
    "version": "v2.0",
    "data": [
        {
            "title": "A",
            "paragraphs": [
                {
                    "context": f"Article A paragraph {j} says six.",
                    "qas": [
                        {
                            "id": f"a{j}",
                            "question": f"What does A{j} say?",
                            "answers": [{"text": "six"}, {"text": "six."}],
                        },
                        {"id": f"a{j}x", "question": "Unanswerable?", "answers": [], "is_impossible": True},
                    ]
                    if j < 2
                    else [],
                }
                for j in range(4)
            ],
        },
        {
            "title": "B",
            "paragraphs": [{"context": f"Article B paragraph {j} says six.", "qas": []} for j in range(3)],
        },
    ],
}


@pytest.fixture
def squad_file(tmp_path):
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(SQUAD))
    return path


@pytest.fixture
def pools(hotpot_dir, squad_file):
    return Pools({"hotpotqa": load_hotpot(hotpot_dir), "squad": load_squad(squad_file)}, whitespace_counter)


def frame_words(question: str) -> int:
    """By hand: the instruction twice (20 words each), "The following are given documents." (5),
    "Question:", the question, "Answer:" (the answer prefix)."""
    return 20 + 5 + 20 + 1 + len(question.split()) + 1


def as_samples(records, tmp_path, name="t"):
    folder = tmp_path / name
    write_jsonl(records, folder / "test.jsonl.gz")
    return load_ruler_qa(folder, split="test")


def test_the_hotpot_pool_keeps_one_text_per_title_the_original_layouts(hotpot_dir):
    source = load_hotpot(hotpot_dir)
    assert len(source.docs) == 14  # 3 x 4 test paragraphs, and the IRCoT file's two new ones
    assert "T0a X\nThis is one. It has two." in source.docs and "T0a X\nThis is one.  It has two." not in source.docs
    assert [(q.qid, len(q.own), len(q.gold)) for q in source.questions] == [("h0", 4, 2), ("h1", 4, 2), ("h2", 4, 2)]


def test_hotpot_sample_layout_and_length(pools, tmp_path):
    target = 200
    recs = generate_qa("qa_hotpot", 3, target, 0, "t", pools)
    assert sorted(r["question_id"] for r in recs) == ["h0", "h1", "h2"]
    for rec, s in zip(recs, as_samples(recs, tmp_path)):
        k = int(rec["question_id"][1:])
        q = hotpot_record(k)
        # RULER's prompt: instruction, documents, instruction again, "Question: ..."; " Answer:" kept apart
        assert rec["input"].startswith(INSTRUCTION + "\n\nThe following are given documents.\n\nDocument 1:\n")
        assert rec["input"].endswith(f"{INSTRUCTION}\n\nQuestion: {q['question']}")
        assert rec["answer_prefix"] == " Answer:" and rec["outputs"] == [q["answer"]]
        # every document is 10 words: as many as fit 200 - 32 answer tokens after the frame (11 of the 14)
        docs = (target - 32 - frame_words(q["question"])) // 10
        assert docs == 11 and rec["length"] == frame_words(q["question"]) + 10 * docs + 32 <= target
        assert s["chunks"][0] == INSTRUCTION + "\n\nThe following are given documents."
        documents = s["chunks"][1:]
        assert len(documents) == len(set(documents)) == docs
        own = [f"{t}\n{''.join(sents)}" for t, sents in q["context"]]
        assert set(own) <= set(documents)  # all ten (here four) of its own paragraphs
        assert [s["chunks"][j] for j in s["sf_idx"]] == [d for d in documents if d in (own[0], own[2])]
        assert len(s["sf_idx"]) == 2 and s["sf_known"] and s["question"] == q["question"]
        assert INSTRUCTION not in documents[-1]  # the template's repeat is no part of the last document


def test_squad_draws_its_article_first_and_never_asks_an_unanswerable_question(pools, tmp_path):
    frame = frame_words("What does A0 say?")
    # room for its paragraph and two more (each document 8 words): both from article A
    two = generate_qa("qa_squad", 2, frame + 3 * 8 + 32, 0, "t", pools)
    # room for seven: the whole of article A (4), then three of B's
    seven = generate_qa("qa_squad", 2, frame + 7 * 8 + 32, 0, "t", pools)
    assert sorted(r["question_id"] for r in two) == ["a0", "a1"]  # the impossible ones are never asked
    for small, big in zip(as_samples(two, tmp_path, "two"), as_samples(seven, tmp_path, "seven")):
        assert [c.split()[1] for c in small["chunks"][1:]] == ["A"] * 3
        assert sorted(c.split()[1] for c in big["chunks"][1:]) == ["A"] * 4 + ["B"] * 3
        assert small["answer"] == "six" and small["answer_aliases"] == ["six."]  # every answer text, as RULER
        gold = f"Article A paragraph {small['question'][11]} says six."
        assert [small["chunks"][j] for j in small["sf_idx"]] == [gold]
        assert [big["chunks"][j] for j in big["sf_idx"]] == [gold]


def test_a_used_up_pool_is_filled_from_the_other_never_repeated(pools, tmp_path):
    frame = frame_words("What does A0 say?")
    (rec,) = generate_qa("qa_squad", 1, frame + 12 * 9 + 32, 0, "t", pools)  # room for more than SQuAD's 7
    (s,) = as_samples([rec], tmp_path)
    documents = s["chunks"][1:]
    squad = [d for d in documents if d.startswith("Article")]
    assert len(squad) == 7 and len(documents) == len(set(documents)) > 7  # HotpotQA paragraphs fill the rest
    assert len(s["sf_idx"]) == 1


def test_too_short_a_length_is_an_error_naming_the_question(pools):
    with pytest.raises(ValueError, match=r"qa_hotpot: 80 tokens cannot hold question h\d's own 4 paragraph"):
        generate_qa("qa_hotpot", 1, 80, 0, "t", pools)


def test_pieces_join_to_the_whole_and_every_length_asks_the_same_questions(pools):
    whole = generate_qa("qa_hotpot", 3, 300, 0, "t", pools)
    assert generate_qa("qa_hotpot", 1, 300, 0, "t", pools) + generate_qa("qa_hotpot", 2, 300, 0, "t", pools, 1) == whole
    longer = generate_qa("qa_hotpot", 3, 400, 0, "t2", pools)
    assert [r["question_id"] for r in longer] == [r["question_id"] for r in whole]
    assert [r["input"] for r in generate_qa("qa_hotpot", 3, 300, 1, "t", pools)] != [r["input"] for r in whole]
    with pytest.raises(ValueError, match="4 samples asked, the source has 3 questions"):
        generate_qa("qa_hotpot", 4, 300, 0, "t", pools)


def test_a_question_whose_paragraph_has_two_texts_is_refused(hotpot_dir):
    other = hotpot_record(5)
    other["context"][0] = ["T0a X", ["Another text."]]  # the title of h0's paragraph, another text
    write_gz_lines(hotpot_dir / "subset_test.jsonl.gz", [hotpot_record(0), other])
    with pytest.raises(ValueError, match="h5: a paragraph title has two texts"):
        load_hotpot(hotpot_dir)


def test_the_squad_subset_joins_both_halves_and_drops_the_courses_article():
    dev = {"version": "v2.0", "data": [SQUAD["data"][0], {"title": "Misc", "paragraphs": []}]}
    test = {
        "version": "v2.0",
        "data": [{"title": "B", "paragraphs": [{"context": "c", "qas": [{"id": "x", "answers": []}]}]}],
    }
    out = squad_subset(dev, test, ["Misc"])
    assert [a["title"] for a in out["data"]] == ["A", "B"]
    assert out["data"][0] == SQUAD["data"][0] and out["data"][1]["paragraphs"] == [{"context": "c", "qas": []}]


def test_the_bytes_do_not_depend_on_jobs(tmp_path, monkeypatch, pools):
    """niah_testsets.py --jobs N writes the same QA bytes for every N (pieces of one sample on 3
    processes; the workers are forked, so they see the patched pools)."""
    monkeypatch.setitem(sys.modules, "niah_testsets", testsets)
    monkeypatch.setitem(testsets.LENGTHS, "tiny", 300)
    monkeypatch.setattr(testsets, "QA_SAMPLES", 2)
    monkeypatch.setattr(testsets, "PIECE_TOKENS", 300)
    monkeypatch.setattr(testsets, "_pools", lambda: pools)
    files = [("qa_hotpot", "tiny"), ("qa_squad", "tiny")]
    made = {}
    for jobs in (1, 3):
        testsets.make(files, tmp_path / str(jobs), jobs)
        made[jobs] = [(tmp_path / str(jobs) / t / f"test{n}.jsonl.gz").read_bytes() for t, n in files]
    assert made[1] == made[3]
    whole = tmp_path / "whole.jsonl.gz"
    write_jsonl(generate_qa("qa_hotpot", 2, 300, testsets.SEED, "testtiny", pools), whole)
    assert made[3][0] == whole.read_bytes()


# ---------------------------------------------------------------- the manifest and the committed files


def test_the_committed_4k_files_match_their_manifest_and_load():
    manifest = json.loads((testsets.ROOT / "MANIFEST.json").read_text())
    assert testsets.verify([(t, "4k") for t in ("qa_hotpot", "qa_squad")], testsets.ROOT, manifest) == ([], [])
    entries = {e["file"]: e for e in manifest["files"]}
    lengths = testsets.LENGTHS
    assert {entries[f"{t}/test{n}.jsonl.gz"]["samples"] for t in testsets.QA_TASKS for n in lengths} == {100}
    assert {testsets.samples(t, n) for t in testsets.QA_TASKS for n in lengths} == {testsets.QA_SAMPLES}
    for task, gold in (("qa_hotpot", 2), ("qa_squad", 1)):
        assert entries[f"{task}/test4k.jsonl.gz"]["inputs"] == testsets.qa_inputs()
        samples = load_ruler_qa(testsets.ROOT / task, split="test4k")
        assert len(samples) == testsets.QA_SAMPLES == 100
        assert all(len(s["sf_idx"]) == gold and s["sf_known"] for s in samples)


def test_the_committed_squad_subset_matches_its_manifest():
    assert testsets.verify_squad(testsets.SQUAD) == []
    squad = load_squad(testsets.SQUAD / testsets.SQUAD_FILE)
    assert (len(squad.docs), len(squad.questions)) == (1204, 2910)  # SQuAD v2.0 dev's paragraphs; one half's questions


def test_a_damaged_squad_subset_is_a_finding(tmp_path):
    shutil.copytree(testsets.SQUAD, tmp_path / "squad")
    path = tmp_path / "squad" / testsets.SQUAD_FILE
    write_gz_lines(path, [SQUAD])  # readable, other content
    (finding,) = testsets.verify_squad(tmp_path / "squad")
    assert finding.startswith(f"{path}: sha256 ") and finding.endswith(
        ", manifest b4f0c68447b59068a3f1bf262a0a19e1b03bc75f906eba72bac921c1e6640cbd"
    )
    path.write_bytes((testsets.SQUAD / testsets.SQUAD_FILE).read_bytes()[:1000])  # truncated
    assert testsets.verify_squad(tmp_path / "squad") == [
        f"{path}: cannot be read (Compressed file ended before the end-of-stream marker was reached)"
    ]
    (tmp_path / "squad" / "MANIFEST.json").write_text("[]")
    assert testsets.verify_squad(tmp_path / "squad")[0].endswith(
        "cannot be read as this script's manifest (list indices must be integers or slices, not str)"
    )


@pytest.fixture
def qa_root(tmp_path, monkeypatch):
    """The committed manifest and 4K QA files; generating anything fails the test."""
    root = tmp_path / "ruler"
    root.mkdir()
    shutil.copy(testsets.ROOT / "MANIFEST.json", root)
    for task in ("qa_hotpot", "qa_squad"):
        (root / task).mkdir()
        shutil.copy(testsets.ROOT / task / "test4k.jsonl.gz", root / task)
    monkeypatch.setattr(testsets, "make", lambda *a: pytest.fail("a test file was generated"))
    return root


def test_verify_checks_without_generating(qa_root, capsys, monkeypatch):
    assert testsets.main(["--root", str(qa_root), "--tasks", "qa", "--verify"]) == 1  # 16K..1M are not here
    out = capsys.readouterr().out
    assert "MISMATCH qa_hotpot/test1m.jsonl.gz: missing" in out and "qa_squad/test4k" not in out
    assert testsets.main(["--root", str(qa_root), "--tasks", "qa", "--lengths", "4k", "--verify"]) == 0
    # the QA files' input, data/squad, is checked with them
    shutil.copytree(testsets.SQUAD, qa_root / "squad")
    (qa_root / "squad" / testsets.SQUAD_FILE).write_bytes(b"")
    recorded = testsets.qa_inputs()
    monkeypatch.setattr(testsets, "qa_inputs", lambda: recorded)
    monkeypatch.setattr(testsets, "SQUAD", qa_root / "squad")
    capsys.readouterr()
    assert testsets.main(["--root", str(qa_root), "--tasks", "qa", "--lengths", "4k", "--verify"]) == 1
    assert f"MISMATCH {qa_root / 'squad' / testsets.SQUAD_FILE}: sha256 " in capsys.readouterr().out


def test_a_changed_input_is_named_and_the_entry_recorded_anew(qa_root, capsys, monkeypatch):
    inputs = testsets.qa_inputs()
    changed = {**inputs, "data/hotpotqa/subset_train.jsonl.gz": "0" * 64}
    monkeypatch.setattr(testsets, "qa_inputs", lambda: changed)
    path = qa_root / "qa_hotpot" / "test4k.jsonl.gz"
    records = [json.loads(line) for line in gzip.decompress(path.read_bytes()).splitlines()]
    write_jsonl(records[::-1], path)  # what the changed data would make: as many samples (recorded only so), others
    assert testsets.main(["--root", str(qa_root), "--tasks", "qa_hotpot", "--lengths", "4k", "--verify"]) == 1
    out = capsys.readouterr().out
    assert "(made from other data: data/hotpotqa/subset_train.jsonl.gz changed since it was recorded;" in out
    remade = []
    monkeypatch.setattr(testsets, "make", lambda files, root, jobs: remade.extend(files))
    assert testsets.main(["--root", str(qa_root), "--write-manifest"]) == 0
    assert remade == [("qa_squad", "4k"), ("qa_hotpot", "4k")]  # re-made before recording: both read the changed file
    entries = {e["file"]: e for e in json.loads((qa_root / "MANIFEST.json").read_text())["files"]}
    entry = entries["qa_hotpot/test4k.jsonl.gz"]
    assert entry["inputs"] == changed and entry["sha256"] == testsets.content_sha256(path) and "made_with" in entry
    assert entries["niah_single_1/test4k.jsonl.gz"]["sha256"] is not None  # the NIAH entries as they were


def test_the_exact_count_decides_when_the_estimate_is_short(pools, tmp_path):
    """The estimate sums per-document counts; a tokenizer that counts the assembled input higher (here
    5 tokens more for any text over 500 characters: the assembled input, not the frame alone nor a
    document) makes the sample drop documents until it fits."""

    def surprising(texts):
        return [len(t.split()) + (5 if len(t) > 500 else 0) for t in texts]

    q = "Which thing 0?"
    target = 32 + frame_words(q) + 11 * 10  # 11 documents by the estimate, exactly
    plain = generate_qa("qa_hotpot", 3, target, 0, "t", pools)
    tight = generate_qa("qa_hotpot", 3, target, 0, "t", Pools(pools.sources, surprising))
    for p, t in zip(plain, tight):
        assert p["input"].count("\nDocument ") == 11 and t["input"].count("\nDocument ") == 10
        assert t["length"] == len(t["input"].split()) + 1 + 5 + 32 <= target


def test_an_evaluation_of_a_folder_records_the_file_it_read():
    """eval_retriever.py's meta (and so data_sha256) names the test file a folder's split resolves to."""
    from omegaconf import OmegaConf

    from envs.data.common import content_sha256
    from envs.data.registry import dataset_spec

    folder = testsets.ROOT / "qa_squad"
    envs = OmegaConf.create({"name": "ruler_qa", "data_path": str(folder), "test_split": "test4k"})
    meta = dataset_spec("ruler_qa").eval_meta(envs)
    assert meta["data_path"] == str(folder / "test4k.jsonl.gz")
    manifest = {e["file"]: e["sha256"] for e in json.loads((testsets.ROOT / "MANIFEST.json").read_text())["files"]}
    assert content_sha256(meta["data_path"]) == manifest["qa_squad/test4k.jsonl.gz"]
    as_file = OmegaConf.create({"name": "ruler_qa", "data_path": "data/ruler_qa/qa_2.jsonl", "test_split": "test"})
    assert dataset_spec("ruler_qa").eval_meta(as_file)["data_path"] == "data/ruler_qa/qa_2.jsonl"  # as given


def test_the_squad_subset_is_built_from_the_pinned_blobs_of_a_snapshot(tmp_path, monkeypatch):
    """--squad-snapshot: the two halves read from a git snapshot at the pinned commit, each blob's sha256
    checked first; the file and its manifest written (a stand-in repository here)."""
    import hashlib
    import subprocess

    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    dev = {"version": "v2.0", "data": [SQUAD["data"][0], {"title": "Misc", "paragraphs": []}]}
    test = {"version": "v2.0", "data": [SQUAD["data"][1]]}
    blobs = {"data/dev-v2.0.json": json.dumps(dev).encode(), "data/test-v2.0.json": json.dumps(test).encode()}
    for path, blob in blobs.items():
        (repo / path).write_bytes(blob)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "halves"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    sha = {p: hashlib.sha256(b).hexdigest() for p, b in blobs.items()}
    source = {
        "repo": "x/y",
        "commit": commit,
        "dev": ("data/dev-v2.0.json", sha["data/dev-v2.0.json"]),
        "test": ("data/test-v2.0.json", sha["data/test-v2.0.json"]),
        "drop": ["Misc"],
    }
    monkeypatch.setattr(testsets, "SQUAD_SOURCE", source)
    manifest = testsets.build_squad(str(repo / ".git"), tmp_path / "squad")
    built = load_squad(tmp_path / "squad" / testsets.SQUAD_FILE)
    assert (len(built.docs), len(built.questions)) == (7, 2)
    assert manifest["files"][0] | {"sha256": None} == {
        "file": testsets.SQUAD_FILE,
        "sha256": None,
        "articles": 2,
        "paragraphs": 7,
        "questions": 4,
        "answerable": 2,
    }
    assert testsets.verify_squad(tmp_path / "squad") == []
    monkeypatch.setitem(source, "dev", ("data/dev-v2.0.json", "0" * 64))
    with pytest.raises(testsets.TestsetError, match="data/dev-v2.0.json at [0-9a-f]+ is not the pinned blob"):
        testsets.build_squad(str(repo / ".git"), tmp_path / "squad")
