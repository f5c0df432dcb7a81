"""The shipped real HotpotQA / MuSiQue subsets and the IRCoT layout (docs/DATA_OTHER.md, "Real
HotpotQA and MuSiQue records"), on real records: fixtures copied from the snapshots the subsets
are built from (tests/fixtures/other/real_*), malformed ones made from them (bad_ircot)."""

from __future__ import annotations

import gzip
import json

import pytest
from omegaconf import OmegaConf

from envs.data.hotpotqa import load_hotpotqa
from envs.data.ircot import ircot_record_to_sample
from envs.data.musique import load_musique
from envs.data.registry import build_dataset
from envs.errors import DatasetFormatError
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
    # a real original-layout record with 4 paragraphs; "all" = test file first
    alls = load_hotpotqa(fix / "real_hotpotqa", "all")
    assert [x["id"] for x in alls] == [SHARED, "5ac2a291554299657fa28ff6", SHARED, "5abff0645542994516f45539"]
    assert len(alls[1]["chunks"]) == 4 and alls[1]["sf_idx"] == [1, 2]


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
            },
        }
    )
    root.paths.root_dir = str(repo)
    OmegaConf.resolve(root)
    return root.envs


def test_embedded_paths_read_the_real_subsets_and_generated_the_stand_ins(repo):
    real = _paths(repo, "embedded")
    sizes = [len(build_dataset(real.h, s, 0)) for s in ("train", "test")]
    assert sizes == [485, 300]
    assert [len(build_dataset(real.m, s, 0)) for s in ("train", "test")] == [192, 200]
    gen = _paths(repo, "generated")
    assert [len(build_dataset(gen.h, s, 0)) for s in ("train", "test")] == [500, 100]
    assert [len(build_dataset(gen.m, s, 0)) for s in ("train", "test")] == [300, 100]
    assert "generated" in gen.h.data_path and "generated" not in real.h.data_path


def test_shipped_subsets_match_manifest_and_split_rule(repo):
    build = load_script("build_real_multihop")
    assert build.verify_shipped(repo / "data") == []
    for dataset, (n_train, n_test) in {"hotpotqa": (485, 300), "musique": (192, 200)}.items():
        folder = repo / "data" / dataset
        recs = {
            s: [json.loads(line) for line in gzip.open(folder / f"subset_{s}.jsonl.gz", "rt")]
            for s in ("train", "test")
        }
        key = {"hotpotqa": lambda r: r.get("_id", r.get("question_id")), "musique": lambda r: r["id"]}[dataset]
        ids = {s: [key(r) for r in v] for s, v in recs.items()}
        assert (len(ids["train"]), len(ids["test"])) == (n_train, n_test)
        assert len(set(ids["train"]) | set(ids["test"])) == n_train + n_test  # unique, no question in both
        manifest = json.loads((folder / "MANIFEST.json").read_text())
        assert manifest["licence"] == {"hotpotqa": "CC BY-SA 4.0", "musique": "CC BY 4.0"}[dataset]
        assert (folder / "LICENSE.txt").is_file()
        if dataset == "hotpotqa":  # test = the original layout, with sentence-level gold
            assert all(isinstance(f[1], int) for r in recs["test"] for f in r["supporting_facts"])
            assert all("question_text" in r for r in recs["train"])
            assert all("reranked_ret_res" not in r for r in recs["test"])  # MIGRES's added field dropped
        else:  # test = the 200 smallest split keys
            keys = sorted(build.split_key(i) for i in ids["train"] + ids["test"])
            assert {build.split_key(i) for i in ids["test"]} == set(keys[:200])


def test_build_split_and_fields(fix):
    build = load_script("build_real_multihop")
    rec = json.loads((fix / "real_hotpotqa" / "subset_test.jsonl").read_text().splitlines()[0])
    added = {**rec, "reranked_ret_res": ["x"]}
    assert build.own_fields(added, "hotpotqa", "here") == rec
    with pytest.raises(SystemExit, match="lacks"):
        build.own_fields({"_id": "a"}, "hotpotqa", "here")
    records = [("a", "ircot", {}), ("b", "hotpotqa", {}), ("c", "ircot", {})]
    assert build.split("hotpotqa", records) == {"train": [records[0], records[2]], "test": [records[1]]}
