"""The shipped real HotpotQA / MuSiQue / 2WikiMultihopQA subsets, the IRCoT layout and the build
(docs/DATA_OTHER.md, "Real multi-hop records"), on real records: fixtures copied from the snapshots
the subsets are built from (tests/fixtures/other/real_*; snapshots/ holds excerpts of the snapshot
files in their own containers and layouts), malformed ones made from them (bad_ircot, tmp files)."""

from __future__ import annotations

import gzip
import hashlib
import json

import pytest
from omegaconf import OmegaConf

from envs.data.hotpotqa import load_2wiki, load_hotpotqa
from envs.data.ircot import ircot_record_to_sample
from envs.data.musique import load_musique
from envs.data.registry import build_dataset, first_samples
from envs.errors import DatasetFormatError, DatasetNotFoundError
from tests.conftest import load_script

SHARED = "5a7e37095542995ed0d166d5"  # in IRCoT's dev sample and in MIGRES's original-layout file


def test_ircot_and_original_layouts_give_the_same_sample(fix):
    """One HotpotQA question as IRCoT processed it and in the dataset's own layout: same chunks,
    gold paragraphs, question and answer (IRCoT's paragraph_text is the sentences joined by a space)."""
    ircot = {s["id"]: s for s in load_hotpotqa(fix / "real_hotpotqa", "train")}
    original = {s["id"]: s for s in load_hotpotqa(fix / "real_hotpotqa", "eval")}
    a, b = ircot[SHARED], original[SHARED]
    assert a["chunks"] == b["chunks"] and len(a["chunks"]) == 10
    assert a["sf_idx"] == b["sf_idx"] == [3, 9]
    assert (
        (a["question"], a["answer"])
        == (b["question"], b["answer"])
        == (
            "Which film director is younger, Robert Z. Leonard or Sinclair Hill?",
            "Sinclair Hill",
        )
    )
    assert a["answer_aliases"] == []


def test_ircot_records(fix):
    s = load_hotpotqa(fix / "real_hotpotqa", "train")
    assert [x["id"] for x in s] == [SHARED, "5abff0645542994516f45539"]
    assert s[1]["sf_idx"] == [6, 7] and s[1]["answer"] == "yes"
    assert s[1]["chunks"][6].startswith("Paul Andrew Williams Paul Andrew Williams is")  # title + " " + text
    # a real original-layout record with 4 paragraphs; "all" = test file first, then validation, train
    alls = load_hotpotqa(fix / "real_hotpotqa", "all")
    assert [x["id"] for x in alls] == [
        SHARED,
        "5ac2a291554299657fa28ff6",
        "5a7d2afd5542995f4f402221",
        SHARED,
        "5abff0645542994516f45539",
    ]
    assert len(alls[1]["chunks"]) == 4 and alls[1]["sf_idx"] == [1, 2]
    (val,) = load_hotpotqa(fix / "real_hotpotqa", "validation")
    assert val["question"] == "Who is older, Ferdi Taygan or Mahesh Bhupathi?" and len(val["chunks"]) == 10


def test_ircot_answer_objects(fix):
    rec = json.loads((fix / "real_hotpotqa" / "subset_train.jsonl").read_text().splitlines()[1])
    rec["answers_objects"] = [
        {"number": "", "date": {"day": "4", "month": "July", "year": "1776"}, "spans": []},
        {"number": 3, "date": {"day": "", "month": "", "year": ""}, "spans": ["three", "3"]},
    ]
    s = ircot_record_to_sample(rec, fix / "x.jsonl", "line 1", ". ")
    assert s["answer"] == "4 July 1776" and s["answer_aliases"] == ["three", "3"]
    assert s["chunks"][6].startswith("Paul Andrew Williams. Paul")
    for c in rec["contexts"]:
        c["is_supporting"] = False
    assert ircot_record_to_sample(rec, fix / "x.jsonl", "line 1", " ").get("sf_known") is False


def test_real_musique_records_keep_reasoning_order(fix):
    (train,) = load_musique(fix / "real_musique", "train")
    assert train["id"] == "2hop__341176_711757" and train["sf_idx"] == [10, 4]  # decomposition order
    assert train["answer"] == "Gmina Ryki" and train["answer_aliases"] == ["Ryki"]
    assert train["chunks"][4].split(". ")[0] == "Gmina Ryki"  # title + ". " + paragraph_text
    (test,) = load_musique(fix / "real_musique", "eval")
    assert test["sf_idx"] == [17, 0, 7] and len(test["chunks"]) == 20
    (val,) = load_musique(fix / "real_musique", "validation")
    assert val["id"] == "2hop__809785_606637" and [val["chunks"][i].split(". ")[0] for i in val["sf_idx"]] == [
        "Adventures in Your Own Backyard",
        "Wooden Arms",
    ]


def test_real_2wiki_subset_splits(fix):
    """The 2Wiki subset's files are its train, validation and dev splits; gold = the supporting titles."""
    (train,) = load_2wiki(fix / "real_2wiki", "train")
    assert train["question"] == "Which film came out earlier, The King Of Masks or Die Pratermizzi?"
    assert train["answer"] == "Die Pratermizzi" and train["sf_idx"] == [3, 7] and len(train["chunks"]) == 10
    (val,) = load_2wiki(fix / "real_2wiki", "validation")
    assert val["id"] == "b69ad95c08ad11ebbd83ac1f6bf848b6" and val["sf_idx"] == [3, 6]
    (dev,) = load_2wiki(fix / "real_2wiki", "dev")
    assert (dev["answer"], dev["sf_idx"]) == ("yes", [1, 5])
    assert dev["chunks"][1].startswith("Nikolsk Airport Nikolsk( also listed as")  # title + " " + sentences
    with pytest.raises(DatasetNotFoundError, match="test.json"):  # the official test split is not shipped
        load_2wiki(fix / "real_2wiki", "test")


def test_malformed_2wiki_records_name_file_and_line(fix, tmp_path):
    rec = json.loads((fix / "real_2wiki" / "subset_train.jsonl").read_text())
    good = json.dumps(rec)
    cases = [
        ({k: v for k, v in rec.items() if k != "answer"}, "line 2, _id=55b34fb9.*unlabelled"),  # as official test
        ({**rec, "supporting_facts": [7]}, r"line 2, _id=55b34fb9.*supporting_facts\[0\]"),
        ({**rec, "context": [["t"]]}, r"line 2, _id=55b34fb9.*context\[0\]"),
    ]
    for bad, match in cases:
        (tmp_path / "subset_train.jsonl").write_text(good + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(DatasetFormatError, match=match):
            load_2wiki(tmp_path, "train")


@pytest.mark.parametrize(
    "split, match",
    [
        (
            "train",
            r"subset_train\.jsonl \(line 2, question_id=5abff0645542994516f45539, contexts\[1\]\): "
            r"missing field 'is_supporting'",
        ),
        ("eval", r"subset_test\.jsonl \(line 1, question_id=5abff0645542994516f45539\): no answer"),
    ],
)
def test_malformed_ircot_records_name_file_and_line(fix, split, match):
    with pytest.raises(DatasetFormatError, match=match):
        load_hotpotqa(fix / "bad_ircot", split)


def test_bad_json_line_and_mixed_folder(fix, tmp_path):
    good = (fix / "real_hotpotqa" / "subset_train.jsonl").read_text().splitlines()[0]
    (tmp_path / "subset_train.jsonl").write_text(good + "\n{not json\n")
    with pytest.raises(DatasetFormatError, match=r"subset_train\.jsonl:2.*invalid JSON|line 2.*invalid JSON"):
        load_hotpotqa(tmp_path, "train")
    (tmp_path / "hotpot_train_v1.1.json").write_text("[]")
    with pytest.raises(DatasetFormatError, match="holds both the official hotpot_train_v1.1.json"):
        load_hotpotqa(tmp_path, "train")


def _paths(repo, name):
    paths = OmegaConf.load(repo / "configs" / "paths" / f"{name}.yaml")
    root = OmegaConf.create(
        {
            "paths": paths,
            "envs": {
                "h": OmegaConf.load(repo / "configs" / "envs" / "hotpotqa.yaml"),
                "m": OmegaConf.load(repo / "configs" / "envs" / "musique.yaml"),
                "w": {
                    "name": "2WikiMultihopQA",
                    "data_path": "${paths.twowiki_dir}",
                    "test_split": "dev",
                    "length": -1,
                },
            },
        }
    )
    root.paths.root_dir = str(repo)
    OmegaConf.resolve(root)
    return root.envs


def sizes(envs, validation_fraction=0.05):
    return [len(build_dataset(envs, s, 0, validation_fraction)) for s in ("train", "validation", "test")]


def test_embedded_paths_read_the_real_subsets_and_generated_the_stand_ins(repo):
    real = _paths(repo, "embedded")
    # the subsets' own validation files, whatever validation_fraction says
    assert sizes(real.h) == sizes(real.h, 0.3) == [733, 100, 300]
    assert sizes(real.m) == [573, 100, 200]
    assert sizes(real.w) == [478, 100, 300]
    gen = _paths(repo, "generated")  # no validation file: 5 % carved from train
    assert sizes(gen.h) == [475, 25, 100] and sizes(gen.m) == [285, 15, 100] and sizes(gen.w) == [95, 5, 50]
    for node in ("h", "m", "w"):
        assert "generated" in gen[node].data_path and "generated" not in real[node].data_path


def test_length_caps_training_questions_never_the_validation_split(repo):
    real = _paths(repo, "embedded")
    real.h.length = 50
    assert sizes(real.h) == [50, 100, 50]
    train = build_dataset(real.h, "train", 0)
    val = build_dataset(real.h, "validation", 0)
    assert not {train[i]["id"] for i in range(len(train))} & {val[i]["id"] for i in range(len(val))}


def test_train_samples_caps_the_training_set_only(repo):
    """``train_samples`` (a learning curve's x-axis, rl/run/train.py) keeps the first N training
    questions after validation is set apart: a fixed validation file and a carved one keep all their
    questions, the test set is another split, and each seed trains on another subset."""
    real, gen = _paths(repo, "embedded"), _paths(repo, "generated")
    ids = {}
    for seed in (1, 2):
        train = first_samples(build_dataset(real.h, "train", seed), 100)
        ids[seed] = {train[i]["id"] for i in range(len(train))}
        assert len(ids[seed]) == 100
    assert ids[1] != ids[2] and len(ids[1] | ids[2]) > 150
    full = build_dataset(real.h, "train", 1)  # the seed's first 100 of its own order
    assert ids[1] == {full[i]["id"] for i in range(100)}
    assert len(first_samples(full, -1)) == len(first_samples(full, 5000)) == 733
    carved = first_samples(build_dataset(gen.h, "train", 0, 0.2), 50)
    val = build_dataset(gen.h, "validation", 0, 0.2)
    assert (len(carved), len(val)) == (50, 100)
    assert not {carved[i]["id"] for i in range(50)} & {val[i]["id"] for i in range(100)}


# round 5's test files (experiments/table2), kept as they were: sha256 of the uncompressed content
ROUND5_TEST = {
    "hotpotqa": "6ababe82b4c0b74bd1fd72af6c9fa14594b53cc409baeae158190ca1aed296a6",
    "musique": "3e1365c1a8af965c9a034bf94d79d52450b0461c3452af48bcc16fdd21b9a0e5",
}
SHIPPED = {  # (train, validation, test) questions
    "hotpotqa": (733, 100, 300),
    "musique": (573, 100, 200),
    "2wikimultihopqa": (478, 100, 300),
}


def shipped_records(repo, dataset):
    folder = repo / "data" / dataset
    return {s: [json.loads(line) for line in gzip.open(folder / f"subset_{s}.jsonl.gz", "rt")] for s in SPLITS}


SPLITS = ("train", "validation", "test")


def rid(r):
    return str(r.get("_id", r.get("id", r.get("question_id"))))


def question(r):
    return " ".join(r.get("question", r.get("question_text", "")).split()).casefold()


@pytest.mark.parametrize("dataset", sorted(SHIPPED))
def test_shipped_subsets_match_manifest_and_split_rule(repo, dataset):
    build = load_script("build_real_multihop")
    assert build.verify_shipped(repo / "data") == []
    recs = shipped_records(repo, dataset)
    assert tuple(len(recs[s]) for s in SPLITS) == SHIPPED[dataset]
    for key in (rid, question):  # no id and no question text in two splits, none repeated in one
        seen = [key(r) for s in SPLITS for r in recs[s]]
        assert len(set(seen)) == len(seen) == sum(SHIPPED[dataset])
    folder = repo / "data" / dataset
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    assert manifest["licence"] == build.LICENCE[dataset] and (folder / "LICENSE.txt").is_file()
    assert manifest["checks"]["disagreements"] == 0
    for src in manifest["sources"]:  # every source pinned to a commit, with its blob's sha256
        assert len(src["commit"]) == 40 and len(src["sha256"]) == 64
    keys = {s: sorted(build.split_key(rid(r)) for r in recs[s]) for s in SPLITS}
    assert keys["validation"][-1] < keys["train"][0]  # validation = the smallest keys outside test
    if dataset in ROUND5_TEST:
        raw = gzip.open(folder / "subset_test.jsonl.gz").read()
        assert hashlib.sha256(raw).hexdigest() == ROUND5_TEST[dataset]
    if dataset == "hotpotqa":  # test = the original layout, with sentence-level gold
        assert all(isinstance(f[1], int) for r in recs["test"] for f in r["supporting_facts"])
        assert all("reranked_ret_res" not in r for r in recs["test"])  # MIGRES's added field dropped
        layouts = [sum("question_text" in r for r in recs[s]) for s in SPLITS]
        assert layouts == [127, 16, 0]  # IRCoT-layout questions no snapshot holds in the original layout
    if dataset == "2wikimultihopqa":
        assert keys["test"][-1] < keys["validation"][0]  # test = the 300 smallest keys
        assert all(list(r) == list(build.TWOWIKI_FIELDS) for s in SPLITS for r in recs[s])


def test_build_split_and_fields(fix):
    build = load_script("build_real_multihop")
    rec = json.loads((fix / "real_hotpotqa" / "subset_test.jsonl").read_text().splitlines()[0])
    src = build.Source("hotpotqa", "o/r", "c", "p", "hotpotqa", "jsonl")
    added = {**rec, "reranked_ret_res": ["x"]}
    assert build.to_own_layout(added, src) == ("hotpotqa", rec)
    with pytest.raises(build.BuildError, match="lacks"):
        build.to_own_layout({"_id": "a"}, src)


# -- the build on excerpts of the snapshots ---------------------------------------------------


@pytest.fixture
def snapshots(fix, monkeypatch):
    """build_real_multihop with a small SOURCES over the excerpts in tests/fixtures/other/snapshots
    (read_blob returns those files) and splits small enough to see every part filled."""
    build = load_script("build_real_multihop")
    snap = fix / "snapshots"
    blobs = {
        "hot_orig": (fix / "real_hotpotqa" / "subset_test.jsonl").read_bytes(),  # MIGRES's layout
        **{p.name: p.read_bytes() for p in snap.iterdir()},
    }
    S = build.Source
    monkeypatch.setattr(build, "read_blob", lambda mirrors, repo, commit, path: blobs[path])
    monkeypatch.setattr(
        build,
        "SOURCES",
        (
            S("hotpotqa", "o/migres", "c", "hot_orig", "hotpotqa", "jsonl", round5=True),
            S("hotpotqa", "o/infodecay", "c", "hotpot_hf.jsonl", "hf_hotpotqa", "jsonl"),
            S("hotpotqa", "o/ircot", "c", "hotpot_ircot.jsonl", "ircot", "jsonl", round5=True),
            S("musique", "o/tca", "c", "musique_array.json", "musique", "array", round5=True),
            S("musique", "o/wikontic", "c", "musique_data.json", "musique", "data_array"),
            S("2wikimultihopqa", "o/tca", "c", "2wiki_array.json", "2wiki", "array"),
            S("2wikimultihopqa", "o/tts", "c", "2wiki_columns.json", "2wiki", "columns", rename=(("_1", "_id"),)),
        ),
    )
    monkeypatch.setattr(build, "EXCLUDED", ())
    monkeypatch.setattr(build, "VALIDATION", 1)
    monkeypatch.setattr(build, "MUSIQUE_TEST", 1)
    monkeypatch.setattr(build, "TWOWIKI_TEST", 1)
    return build, blobs


def manifest_of(files, dataset):
    return json.loads(files[dataset]["MANIFEST.json"])


def records_of(files, dataset):
    return {
        s: [json.loads(x) for x in gzip.decompress(files[dataset][f"subset_{s}.jsonl.gz"]).splitlines()] for s in SPLITS
    }


def test_build_restores_sentence_ids_and_keeps_one_record_per_question(snapshots):
    build, _ = snapshots
    files, lines = build.build(None)
    hot = manifest_of(files, "hotpotqa")
    counts = [(s["kept"], s["repeated_ids"]) for s in hot["sources"]]
    # the two IRCoT questions the HF-layout file holds keep its sentence ids; the third stays IRCoT
    assert counts == [(2, 0), (2, 0), (1, 2)]
    recs = records_of(files, "hotpotqa")
    assert [rid(r) for r in recs["test"]] == ["5a7e37095542995ed0d166d5", "5ac2a291554299657fa28ff6"]
    rest = [r for s in ("train", "validation") for r in recs[s]]
    assert sorted(("question_text" in r, rid(r)) for r in rest) == [
        (False, "5ab1d7ac554299449642c7e6"),
        (False, "5ab6369655429953192ad2a1"),
        (True, "5a83ed9b55429933447460b8"),
    ]
    hf = next(r for r in rest if rid(r) == "5ab1d7ac554299449642c7e6")
    assert list(hf) == list(build.HOTPOTQA_FIELDS) and hf["supporting_facts"] == [
        ["Xanthoceras", 0],
        ["Ehretia", 0],
        ["Ehretia", 1],
    ]
    # MuSiQue: the id in both files is checked and kept once; 2Wiki: the pandas columns read back
    assert [(s["kept"], s["repeated_ids"]) for s in manifest_of(files, "musique")["sources"]] == [(2, 0), (0, 1)]
    wiki = manifest_of(files, "2wikimultihopqa")["sources"]
    assert [(s["kept"], s["repeated_ids"]) for s in wiki] == [(2, 0), (1, 1)]
    assert [len(v) for v in records_of(files, "2wikimultihopqa").values()] == [1, 1, 1]
    assert lines[1] == "musique: 2 questions (train 0, validation 1, test 1); 1 repeated ids, all equal; " + (
        "0 repeated question texts left out"
    )


def _edit_line(blob, k, change):
    lines = blob.decode().splitlines()
    rec = json.loads(lines[k])
    change(rec)
    lines[k] = json.dumps(rec)
    return ("\n".join(lines) + "\n").encode()


def test_a_question_held_twice_with_other_gold_or_text_stops_the_build(snapshots):
    build, blobs = snapshots
    clean = dict(blobs)

    def ircot_gold_dropped(rec):  # the IRCoT copy of 5ab1d7ac marks one of its two gold paragraphs no more
        rec["contexts"][0]["is_supporting"] = False

    blobs["hotpot_ircot.jsonl"] = _edit_line(clean["hotpot_ircot.jsonl"], 0, ircot_gold_dropped)
    with pytest.raises(build.BuildError, match=r"hotpotqa id 5ab1d7ac554299449642c7e6: o/ircot:.*\['sf_idx'\]"):
        build.build(None)
    blobs.update(clean)
    data = json.loads(clean["musique_data.json"])
    data["data"][0]["question"] += " "  # one character more in the question text
    blobs["musique_data.json"] = json.dumps(data).encode()
    with pytest.raises(build.BuildError, match=r"musique id 2hop__335899_124498: o/wikontic.*\['question'\]"):
        build.build(None)


def test_a_repeated_question_text_under_another_id_is_left_out(snapshots):
    build, blobs = snapshots
    twin = json.loads(blobs["musique_array.json"])[1]
    data = json.loads(blobs["musique_data.json"])
    data["data"].append({**twin, "id": "2hop__1_2", "question": "  " + twin["question"].upper()})
    blobs["musique_data.json"] = json.dumps(data).encode()
    files, _ = build.build(None)
    src = manifest_of(files, "musique")["sources"][1]
    assert (src["kept"], src["repeated_ids"], src["repeated_questions"]) == (0, 1, 1)
    assert "2hop__1_2" not in [rid(r) for s in SPLITS for r in records_of(files, "musique")[s]]


def test_an_excluded_pickle_is_read_without_unpickling_and_must_add_nothing(snapshots, monkeypatch):
    build, blobs = snapshots
    head = blobs["reflexion_head.bin"]  # the first 720 bytes of reflexion's joblib file
    ids = [m.decode() for m in build.PICKLED_HOTPOT_ID.findall(head)]
    assert ids[:2] == ["5a7613c15542994ccc9186bf", "5adf2fa35542993344016c11"] and len(ids) == 5
    ex = build.Excluded("hotpotqa", "o/reflexion", "c", "reflexion_head.bin", "a pickle")
    monkeypatch.setattr(build, "EXCLUDED", (ex,))
    with pytest.raises(build.BuildError, match="5 of its 5 ids are not kept from another source"):
        build.build(None)


def test_missing_clone_is_one_error_line(tmp_path, capsys):
    build = load_script("build_real_multihop")
    assert build.main(["--mirrors", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: AdelWang/MIGRES 1de6265c9c:data/hotpot.json not in ") and err.count("\n") == 1
    assert f"git clone --bare https://github.com/AdelWang/MIGRES {tmp_path / 'AdelWang+MIGRES'}" in err
