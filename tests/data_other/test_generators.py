"""Offline generators: NIAH (RULER format) and synthetic multi-hop sets."""
import json

import pytest

from envs.data.hotpotqa import load_2wiki, load_hotpotqa
from envs.data.multihop_generator import make_2wiki, make_hotpotqa, make_musique, make_ruler_qa
from envs.data.musique import load_musique
from envs.data.niah import load_niah
from envs.data.niah_generator import TASKS, generate, hf_token_counter, length_name, whitespace_counter, write_jsonl
from envs.data.ruler_qa import load_ruler_qa
from envs.data.niah_generator import write_text

BOOKS = [
    [f"Sentence number {i} of the first book talks about ships and the sea." for i in range(60)],
    [f"The second book says thing {i} about Mr. Knightley and the weather." for i in range(40)] + ["A line without an end"],
]


@pytest.mark.parametrize("task", sorted(TASKS))
def test_niah_tasks_round_trip(task, tmp_path):
    recs = generate(task, 4, 400, seed=3, split="train", counter=whitespace_counter, corpus=BOOKS)
    assert recs == generate(task, 4, 400, seed=3, split="train", counter=whitespace_counter, corpus=BOOKS)
    spec = TASKS[task]
    for r in recs:
        assert set(r) >= {"index", "input", "outputs", "length", "answer_prefix"}
        assert 300 < r["length"] <= 400 and r["length"] == len(r["input"].split())
        assert len(r["outputs"]) == spec.num_values * spec.num_queries
    write_jsonl(recs, tmp_path / "train.jsonl.gz")
    for r, s in zip(recs, load_niah(tmp_path, "train")):
        gold = [s["chunks"][j] for j in s["sf_idx"]]
        # each gold chunk is exactly one needle sentence holding one queried value
        assert sorted(v for g in gold for v in r["outputs"] if v in g) == sorted(r["outputs"])
        assert all(g.startswith("One of the special magic") and g.endswith(".") for g in gold)
        assert len(gold) == len(r["outputs"])
        assert s["question"].startswith("What are all the special magic")
        needles = [c for c in s["chunks"] if c.startswith("One of the special magic")]
        expected_needles = spec.num_keys * spec.num_values
        assert len(needles) >= expected_needles if spec.haystack == "needle" else len(needles) == expected_needles


def test_niah_exact_bert_length():
    count = hf_token_counter()
    for task in ("niah_single_3", "niah_multikey_2"):
        r = generate(task, 1, 512, seed=0, split="test512", counter=count, corpus=BOOKS)[0]
        assert r["length"] == count([r["input"]])[0] <= 512
        assert r["length"] > 450


def test_length_names():
    assert [length_name(t) for t in (4096, 16384, 131072, 1 << 20)] == ["4k", "16k", "128k", "1m"]


def test_multihop_formats_and_gold(tmp_path):
    hp = make_hotpotqa(1, "train", 40)
    assert hp == make_hotpotqa(1, "train", 40) and hp != make_hotpotqa(2, "train", 40)
    write_text(json.dumps(hp), tmp_path / "hotpot_train_v1.1.json")
    for rec, s in zip(hp, load_hotpotqa(tmp_path, "train")):
        assert len(s["chunks"]) == 10 and len(set(s["sf_idx"])) == 2
        titles = [rec["context"][j][0] for j in s["sf_idx"]]
        assert set(titles) == {t for t, _ in rec["supporting_facts"]}
        for t, sid in rec["supporting_facts"]:  # the cited sentence exists
            assert dict((tt, ss) for tt, ss in rec["context"])[t][sid]
    assert {r["type"] for r in hp} == {"bridge", "comparison"}
    mq = make_musique(1, "dev", 30)
    write_jsonl(mq, tmp_path / "musique_ans_v1.0_dev.jsonl.gz")
    for rec, s in zip(mq, load_musique(tmp_path, "eval")):
        hops = len(rec["question_decomposition"])
        assert 2 <= hops <= 4 and len(s["chunks"]) == 20 and len(set(s["sf_idx"])) == hops
        last = s["chunks"][s["sf_idx"][-1]]
        assert rec["answer"] in last  # the last hop's paragraph states the answer
    wk = make_2wiki(1, "dev", 10)
    write_text(json.dumps(wk), tmp_path / "dev.json")
    assert all(len(s["sf_idx"]) == 2 for s in load_2wiki(tmp_path, "dev"))
    rq = make_ruler_qa(hp[:10], 1)
    write_jsonl(rq, tmp_path / "qa_2.jsonl")
    for rec, s in zip(hp[:10], load_ruler_qa(tmp_path / "qa_2.jsonl")):
        assert s["sf_known"] and len(s["sf_idx"]) == 2 and s["question"] == rec["question"]
        golds = {t for t, _ in rec["supporting_facts"]}
        assert {s["chunks"][j].split("\n")[0] for j in s["sf_idx"]} == golds
