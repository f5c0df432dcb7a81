"""Offline generators: NIAH (RULER format) and synthetic multi-hop sets."""

import json

import pytest

from envs.data.hotpotqa import load_2wiki, load_hotpotqa
from envs.data.multihop_generator import make_2wiki, make_hotpotqa, make_musique, make_ruler_qa
from envs.data.musique import load_musique
from envs.data.niah import load_niah
from envs.data.niah_generator import (
    TASKS,
    generate,
    hf_token_counter,
    length_name,
    whitespace_counter,
    write_jsonl,
    write_text,
)
from envs.data.ruler_qa import load_ruler_qa
from envs.data.splitter import split_sentences

BOOKS = [
    [f"Sentence number {i} of the first book talks about ships and the sea." for i in range(60)],
    [f"The second book says thing {i} about Mr. Knightley and the weather." for i in range(40)]
    + ["A line without an end"],
]


@pytest.mark.parametrize("task", sorted(TASKS))
def test_niah_tasks_round_trip(task, tmp_path):
    recs = generate(task, 4, 400, seed=3, split="train", counter=whitespace_counter, corpus=BOOKS)
    assert recs == generate(task, 4, 400, seed=3, split="train", counter=whitespace_counter, corpus=BOOKS)
    spec = TASKS[task]
    for r in recs:
        assert set(r) >= {"index", "input", "outputs", "length", "answer_prefix"}
        # the input fits 400 - 128 (RULER keeps 128 tokens for the answer); length counts both
        assert r["length"] == len(r["input"].split()) + 128 and 340 < r["length"] <= 400
        assert len(r["outputs"]) == spec.num_values * spec.num_queries
    write_jsonl(recs, tmp_path / "train.jsonl.gz")
    for r, s in zip(recs, load_niah(tmp_path, "train")):
        gold = [s["chunks"][j] for j in s["sf_idx"]]
        # each gold chunk is exactly one needle sentence holding one queried value
        assert sorted(v for g in gold for v in r["outputs"] if v in g) == sorted(r["outputs"])
        assert all(g.startswith("One of the special magic") and g.endswith(".") for g in gold)
        assert len(gold) == len(r["outputs"])
        one = spec.num_values * spec.num_queries == 1  # RULER's singular wording for one answer
        assert s["question"].startswith("What is the special magic" if one else "What are all the special magic")
        needles = [c for c in s["chunks"] if c.startswith("One of the special magic")]
        expected_needles = spec.num_keys * spec.num_values
        assert len(needles) >= expected_needles if spec.haystack == "needle" else len(needles) == expected_needles


def test_niah_exact_bert_length():
    count = hf_token_counter()
    for task in ("niah_single_3", "niah_multikey_2"):
        r = generate(task, 1, 512, seed=0, split="test512", counter=count, corpus=BOOKS)[0]
        assert r["length"] == count([r["input"]])[0] + 128 <= 512
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


def test_niah_wording_is_rulers():
    # RULER niah.py: with one answer, 'Some'->'A', 'are all'->'is', 'are'->'is' on the plural
    # template + answer prefix, and the value type loses its "s"; needles stay plural
    from envs.data.niah_generator import wording

    t, prefix, type_v = wording(TASKS["niah_single_2"])
    assert t == (
        "A special magic {type_needle_v} is hidden within the following text. Make sure to memorize it. "
        "I will quiz you about the {type_needle_v} afterwards.\n{context}\nWhat is the special magic "
        "{type_needle_v} for {query} mentioned in the provided text?"
    )
    assert prefix == " The special magic {type_needle_v} for {query} mentioned in the provided text is"
    assert type_v == "number" and wording(TASKS["niah_multikey_3"])[2] == "uuid"
    t, prefix, type_v = wording(TASKS["niah_multivalue"])
    assert t.startswith("Some special magic {type_needle_v} are hidden") and prefix.endswith("text are")
    assert "What are all the special magic" in t and type_v == "numbers"
    r = generate("niah_single_1", 1, 400, seed=0, split="x", counter=whitespace_counter, corpus=None)[0]
    assert r["input"].startswith("A special magic number is hidden") and "special magic numbers for" in r["input"]
    assert r["answer_prefix"].endswith("mentioned in the provided text is")


def test_niah_keys_are_wonderwords_pairs():
    from envs.data.niah_generator import key_words

    adjs, nouns = key_words()
    assert len(adjs) == 910 and len(nouns) == 6786  # distinct entries of wonderwords 2.2's lists
    recs = generate("niah_multiquery", 30, 400, seed=1, split="x", counter=whitespace_counter, corpus=BOOKS)
    keys = [
        k
        for r in recs
        for k in r["answer_prefix"].split(" for ", 1)[1].split(" mentioned")[0].replace(", and ", ", ").split(", ")
    ]
    assert len(keys) == 120 == len(set(keys))  # 6.2M pairs: no repeats
    for k in keys:  # some words hold hyphens ("wide-eyed"): one split must give an adjective and a noun
        parts = k.split("-")
        assert any("-".join(parts[:j]) in adjs and "-".join(parts[j:]) in nouns for j in range(1, len(parts)))


def test_niah_essay_start_and_depths():
    from envs.data.niah_generator import DEPTHS, prepare_corpus

    corpus = prepare_corpus(BOOKS)
    recs = generate("niah_single_2", 3, 300, seed=2, split="x", counter=whitespace_counter, corpus=BOOKS)
    for r in recs:
        body = r["input"].split("\n")[1]
        sentences = split_sentences(body)
        essay = [s for s in sentences if not s.startswith("One of the special magic")]
        assert essay == corpus[: len(essay)]  # RULER: the haystack starts where the essay starts, every sample
        n = len(essay)
        before = sentences.index(next(s for s in sentences if s.startswith("One of the special magic")))
        assert before in {int(n * d / 100) for d in DEPTHS}  # needle after int(n * depth / 100) sentences
    rand = generate(
        "niah_single_2", 3, 300, seed=2, split="x", counter=whitespace_counter, corpus=BOOKS, haystack_start="random"
    )
    starts = {split_sentences(r["input"].split("\n")[1])[0] for r in rand}
    assert len(starts) > 1  # the variant: a random start per sample


def test_niah_needles_between_whole_blocks():
    from envs.data.niah_generator import NOISE_BLOCK

    for task in ("niah_single_1", "niah_multikey_2"):
        r = generate(task, 1, 600, seed=4, split="x", counter=whitespace_counter, corpus=None)[0]
        lines = r["input"].split("\n")[1:-1]  # between the instruction and the question
        assert all(x == NOISE_BLOCK or x.startswith("One of the special magic numbers for ") for x in lines)
        hits = [x for x in lines if r["outputs"][0] in x]
        assert len(hits) == 1 and hits[0].endswith(f"is: {r['outputs'][0]}.")


def test_niah_too_short_a_length_is_an_error():
    with pytest.raises(ValueError, match="answer budget"):
        generate("niah_single_1", 1, 128, seed=0, split="x", counter=whitespace_counter, corpus=None)
    with pytest.raises(ValueError, match="cannot hold the prompt"):
        generate("niah_multiquery", 1, 160, seed=0, split="x", counter=whitespace_counter, corpus=BOOKS)


def test_niah_essay_insertion_worked_case():
    # RULER: needle k goes after int(n * depth_k / 100) of the n essay sentences, depths sorted;
    # depths 51 and 0 (of RULER's 40) over ten sentences: one needle first, one after five
    from envs.data.niah_generator import DEPTHS, insert_at_depths

    class Depths:
        def choice(self, options, size, replace):
            assert not replace and size == 2 and list(options) == DEPTHS
            return [51, 0]

    sentences = [f"s{i}." for i in range(10)]
    text = insert_at_depths(sentences, ["N1.", "N2."], Depths())
    assert text == "N1. s0. s1. s2. s3. s4. N2. s5. s6. s7. s8. s9."

    # depth 100 puts a needle after the last sentence; int() floors (33 % of 10 -> 3)
    class Late(Depths):
        def choice(self, options, size, replace):
            return [100, 33]

    assert insert_at_depths(sentences, ["A.", "B."], Late()) == "s0. s1. s2. A. s3. s4. s5. s6. s7. s8. s9. B."
