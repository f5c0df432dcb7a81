"""Loaders on hand-written fixtures in the real formats (incl. malformed records)."""

import json

import pytest
from omegaconf import OmegaConf

from envs.data.babilong_hf import build_babilong_hf, load_babilong_hf
from envs.data.combined import build_combined
from envs.data.hotpotqa import build_2wiki, build_hotpotqa, load_2wiki, load_hotpotqa
from envs.data.musique import build_musique, load_musique
from envs.data.niah import build_niah, load_niah
from envs.data.registry import build_dataset, dataset_spec
from envs.data.ruler_qa import build_ruler_qa, load_ruler_qa
from envs.errors import DatasetFormatError, DatasetNotFoundError
from envs.types import validate_sample
from prompts_and_metrics.metrics import sample_fact_metrics


def test_hotpotqa(fix):
    s = load_hotpotqa(fix / "hotpotqa", "train")
    assert [x["id"] for x in s] == ["5a8b57f25542995d1e6f1371", "5a8c7595554299585d9e36b6", "5a85ea095542994775f606a8"]
    a = s[0]
    assert (
        a["chunks"][0]
        == "Adam Collis Adam Collis is an American filmmaker and actor.  He attended the Duke University."
    )
    assert a["sf_idx"] == [2, 3]  # "Ed Wood (film)" is not a supporting title
    assert s[1]["sf_idx"] == [1, 2] and s[2]["sf_idx"] == [1, 2]
    assert a["answer"] == "yes"
    alls = load_hotpotqa(fix / "hotpotqa", "all")
    assert [x["id"] for x in alls][0] == "dev1" and len(alls) == 4
    for x in alls:
        validate_sample(x)


def test_2wiki(fix):
    s = load_2wiki(fix / "2wiki", "dev")
    assert s[0]["sf_idx"] == [0, 2]
    with pytest.raises(DatasetNotFoundError, match="test.json"):
        load_2wiki(fix / "2wiki", "test")


def test_2wiki_answer_id_aliases_and_unlabelled_test(fix):
    """The official v1.1 evaluation scores against the answer plus the aliases and demonyms that
    id_aliases.json lists for the record's answer_id; the test split carries no answers."""
    s = load_2wiki(fix / "2wiki_ids", "dev")
    assert s[0]["answer"] == "United States"
    assert s[0]["answer_aliases"] == ["American", "USA", "United States of America"]
    assert "answer_aliases" not in s[1]  # empty answer_id: the answer alone
    assert "answer_aliases" not in load_2wiki(fix / "2wiki", "dev")[0]  # no id_aliases.json
    with pytest.raises(DatasetFormatError, match="test split is unlabelled"):
        load_2wiki(fix / "2wiki_ids", "test")


def test_musique_reasoning_order_and_idx_mapping(fix):
    s = load_musique(fix / "musique", "eval")
    assert s[0]["sf_idx"] == [3, 1]  # decomposition order, not ascending
    assert s[0]["chunks"][3] == "Messi. Lionel Messi joined Inter Miami in 2023."
    assert s[0]["answer_aliases"] == ["Fort Lauderdale, Florida"]
    assert s[1]["sf_idx"] == [0, 1]  # idx 7 -> 0, idx 5 -> 1, null skipped, the repeated hop counted once


def test_musique_gold_is_is_supporting_and_full_honours_answerable(fix):
    # the official evaluator's gold: paragraphs with is_supporting, whatever the hops name
    a, contrast, c = load_musique(fix / "musique", "full_eval")
    assert a["id"] == "2hop__11_22" and a["sf_idx"] == [0, 1] and a["answerable"] is True
    assert "sf_known" not in a
    # the unanswerable contrast shares the id in the file; it has no gold and a distinct id here
    assert contrast["id"] == "2hop__11_22:unanswerable" and contrast["answerable"] is False
    assert contrast["sf_idx"] == [] and contrast["sf_known"] is False
    # idx 9 (list position 1) is named by a hop but not supporting; position 2 supports unnamed
    assert c["sf_idx"] == [0, 2]
    cfg = OmegaConf.create(
        {"name": "musique", "data_path": str(fix / "musique"), "test_split": "full_eval", "length": -1}
    )
    assert len(build_musique(cfg, "test", 0)) == 3


def test_musique_answerable_record_without_supporting_paragraph_is_an_error(tmp_path, fix):
    line = (fix / "musique" / "musique_ans_v1.0_dev.jsonl").read_text().splitlines()[0]
    (tmp_path / "musique_ans_v1.0_dev.jsonl").write_text(
        line.replace('"is_supporting": true', '"is_supporting": false') + "\n"
    )
    with pytest.raises(
        DatasetFormatError,
        match=r"jsonl \(line 1, id=2hop__13548_13529\): an answerable record with no paragraph marked is_supporting",
    ):
        load_musique(tmp_path, "eval")


def test_hotpotqa_fullwiki_missing_gold_scores_as_the_official_evaluation(fix):
    """Official rule (default): gold paragraphs that the retrieved context lacks stay gold, so
    they cost recall and EM, and a sample with none of them present scores 0 and is counted."""
    full, partial, none = load_hotpotqa(fix / "hotpotqa", "fullwiki_eval")
    assert full["sf_idx"] == [0, 1] and "sf_partial" not in full and "sf_missing" not in full
    assert sample_fact_metrics([0, 1], full) == {"em": 1.0, "precision": 1.0, "recall": 1.0, "f1": 1.0}
    # one of the two gold paragraphs was not retrieved into the context
    assert partial["sf_idx"] == [0] and partial["sf_partial"] is True and partial["sf_missing"] == 1
    assert partial["sf_missing_titles"] == ["Steven Spielberg"]
    got = sample_fact_metrics([0, 1], partial)  # the present gold found: half the gold
    assert got["em"] == 0.0 and got["recall"] == 0.5 and got["precision"] == 0.5 and got["f1"] == 0.5
    # no gold paragraph in the context: zero, and counted in the means
    assert none["sf_idx"] == [] and none.get("sf_known", True) and none["sf_missing"] >= 1
    assert sample_fact_metrics([0], none) == {"em": 0.0, "precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_hotpotqa_fullwiki_in_context_switch_keeps_the_earlier_rule(fix):
    full, partial, none = load_hotpotqa(fix / "hotpotqa", "fullwiki_eval", fullwiki_gold="in_context")
    assert "sf_missing" not in partial and partial["sf_partial"] is True
    assert sample_fact_metrics([0, 1], partial)["em"] == 1.0  # scored against the present gold only
    assert none["sf_known"] is False and sample_fact_metrics([0], none) is None  # left out of the means
    cfg = OmegaConf.create(
        {
            "name": "hotpotqa",
            "data_path": str(fix / "hotpotqa"),
            "test_split": "fullwiki_eval",
            "fullwiki_gold": "in_context",
            "length": -1,
        }
    )
    assert all("sf_missing" not in x for x in build_hotpotqa(cfg, "test", 0).samples)
    with pytest.raises(ValueError, match="fullwiki_gold must be one of"):
        load_hotpotqa(fix / "hotpotqa", "fullwiki_eval", fullwiki_gold="present")
    spec = dataset_spec("hotpotqa")  # checked with the config; the earlier rule names its own eval files
    assert spec.config_errors(OmegaConf.create({"fullwiki_gold": "present"})) == [
        "envs.fullwiki_gold=present: expected one of official, in_context"
    ]
    assert spec.eval_suffix(cfg) == "_in_context" and spec.added_keys == {"fullwiki_gold": "official"}


def test_2wiki_without_alias_file_warns(fix, caplog):
    with caplog.at_level("WARNING"):
        load_2wiki(fix / "2wiki", "dev")
    assert "no id_aliases.json" in caplog.text and "without their aliases" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        load_2wiki(fix / "2wiki_ids", "dev")
    assert "id_aliases" not in caplog.text


def test_niah_gold_and_question(fix):
    s = load_niah(fix / "niah", "train")
    a = s[0]
    assert a["question"] == "What are all the special magic numbers for calm-harbor mentioned in the provided text?"
    assert a["answer"] == "1234567,7654321"
    assert a["chunks"][:3] == [
        "Some special magic numbers are hidden within the following text.",
        "Make sure to memorize it.",
        "I will quiz you about the numbers afterwards.",
    ]
    assert [a["chunks"][j] for j in a["sf_idx"]] == [
        "One of the special magic numbers for calm-harbor is: 1234567.",
        "One of the special magic numbers for calm-harbor is: 7654321.",
    ]
    b = s[1]
    assert [b["chunks"][j] for j in b["sf_idx"]] == [
        "One of the special magic uuids for 0f3b8c1e-5d7a-4e2b-9c6d-8a1f2e3d4c5b is: 6c8a1b2e-1234-4abc-8def-0123456789ab."
    ]
    assert "Mr. Smith visited www.example.com on 3.5 days." in b["chunks"]
    c = s[2]  # the question contains the value: never a candidate
    assert c["sf_idx"] == [1] and len(c["chunks"]) == 3


def test_niah_legacy_raw_sf(fix):
    s = load_niah(fix / "niah", "train", legacy_raw_sf=True)
    assert s[2]["sf_idx"] == [1, 3]  # the question's index 3 == len(chunks): out of range (ref)
    cfg = OmegaConf.create({"name": "niah", "data_path": str(fix / "niah"), "test_split": "test4k", "length": -1})
    ds = build_niah(cfg, "test", 0, niah_raw_sf=True)
    assert any(len(x["chunks"]) in x["sf_idx"] for x in ds.samples)


def test_niah_validation_split_errors(fix):
    with pytest.raises(DatasetNotFoundError, match="validation.jsonl"):
        build_niah(OmegaConf.create({"data_path": str(fix / "niah")}), "validation", 0)


def test_ruler_qa(fix):
    s = load_ruler_qa(fix / "ruler_qa.jsonl")
    a = s[0]  # RULER's "Question:" via the case-insensitive fallback
    assert a["question"] == "What is the capital of Germany?"
    # the template's repeat of the instruction after the documents is cut: Document 3 held only it
    assert a["chunks"][0].startswith("Answer the question") and len(a["chunks"]) == 3
    assert a["chunks"][2] == "Berlin is the capital of Germany."
    assert a["answer"] == "Berlin" and a["answer_aliases"] == ["Berlin, Germany"]
    assert a["sf_idx"] == [] and a["sf_known"] is False
    b = s[1]  # last QUESTION: marker; empty Document 3 dropped; gold_docs recovered
    assert b["question"] == "What holds the answer?"
    assert b["chunks"] == ["Alpha.", "Beta holds the answer.", "Gamma.\nQUESTION: Which document?"]
    assert b["sf_idx"] == [1] and b["sf_known"] is True


def test_babilong_hf(fix, tmp_path):
    s = load_babilong_hf(fix / "babilong_hf", "4k", "qa1_single-supporting-fact")
    assert s[0]["id"] == "4k/qa1/0" and s[0]["answer"] == "bathroom"
    assert s[0]["chunks"] == [
        "The lamp was on.",
        "Mary moved to the bathroom.",
        "John went to the hallway.",
        "Mr. Brown slept.",
    ]
    assert s[1]["sf_idx"] == [] and s[1]["sf_known"] is False
    cfg = OmegaConf.create(
        {
            "name": "babilong_hf",
            "data_path": str(fix / "babilong_hf"),
            "task": "qa1",
            "context_length": "4k",
            "length": -1,
        }
    )
    assert len(build_babilong_hf(cfg, "test", 1)) == 2
    with pytest.raises(ValueError, match="no 'train' split"):
        build_babilong_hf(cfg, "train", 1)
    import datasets

    dd = datasets.DatasetDict(
        {"qa1": datasets.Dataset.from_list([{"input": "A b. C d.", "question": "Q?", "target": "t"}])}
    )
    dd.save_to_disk(str(tmp_path / "8k"))
    s = load_babilong_hf(tmp_path, "8k", "qa1")
    assert s[0]["chunks"] == ["A b.", "C d."] and s[0]["id"] == "8k/qa1/0"


@pytest.mark.parametrize(
    "loader, name, match",
    [
        (
            lambda d: load_hotpotqa(d, "train"),
            "hotpot_train_v1.1.json",
            r"hotpot_train_v1\.1\.json \(record 1, _id=x2\): missing field 'context'",
        ),
        (
            lambda d: load_musique(d, "train"),
            "musique_ans_v1.0_train.jsonl",
            r"musique_ans_v1\.0_train\.jsonl \(line 2, id=m2, paragraphs\[0\]\): missing field 'paragraph_text'",
        ),
        (lambda d: load_niah(d, "train"), "train.jsonl", r"train\.jsonl \(line 2, index=1\): missing field 'outputs'"),
        (
            lambda d: load_ruler_qa(d / "ruler_qa.jsonl"),
            "ruler_qa.jsonl",
            r"ruler_qa\.jsonl \(line 2, index=5\): field 'input' has no question marker",
        ),
    ],
)
def test_malformed_records_name_file_record_field(fix, loader, name, match):
    with pytest.raises(DatasetFormatError, match=match) as e:
        loader(fix / "bad")
    assert e.value.path.endswith(name)


def test_missing_file_names_path_and_how(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="hotpot_dev_distractor_v1.json") as e:
        load_hotpotqa(tmp_path, "eval")
    assert "paths=embedded" in str(e.value) and "paths=generated" in str(e.value)


def test_seeded_permutation_and_length(fix):
    cfg = OmegaConf.create(
        {
            "name": "hotpotqa",
            "data_path": str(fix / "hotpotqa"),
            "test_split": "eval",
            "fullwiki_gold": "official",
            "length": -1,
        }
    )
    a = [x["id"] for x in build_hotpotqa(cfg, "train", 1)]
    assert sorted(a) == sorted(x["id"] for x in load_hotpotqa(fix / "hotpotqa", "train"))
    assert a == [x["id"] for x in build_hotpotqa(cfg, "train", 1)]
    orders = {tuple(x["id"] for x in build_hotpotqa(cfg, "train", s)) for s in range(10)}
    assert len(orders) > 1
    cfg.length = 2
    assert [x["id"] for x in build_hotpotqa(cfg, "train", 1)] == a[:2]
    assert len(build_hotpotqa(cfg, "test", 1)) == 1  # test -> eval file
    mcfg = OmegaConf.create({"name": "musique", "data_path": str(fix / "musique"), "test_split": "eval", "length": 1})
    assert len(build_musique(mcfg, "test", 3)) == 1
    wcfg = OmegaConf.create(
        {"name": "2WikiMultihopQA", "data_path": str(fix / "2wiki"), "test_split": "dev", "length": -1}
    )
    assert len(build_dataset(wcfg, "test", 0)) == 1 and len(build_2wiki(wcfg, "train", 0)) == 3
    rcfg = OmegaConf.create(
        {"name": "ruler_qa", "data_path": str(fix / "ruler_qa.jsonl"), "question_marker": "QUESTION:", "length": 1}
    )
    assert len(build_ruler_qa(rcfg, "test", 0)) == 1


def test_combined_source_and_shuffle(fix):
    cfg = OmegaConf.create(
        {
            "name": "combined",
            "dataset1_path": str(fix / "hotpotqa"),
            "dataset2_path": str(fix / "musique"),
            "dataset3_path": str(fix / "2wiki"),
            "test_split": "eval",
            "dataset3_test_split": "dev",
            "shuffle": {"train": True, "test": False},
            "length": -1,
        }
    )
    test = build_combined(cfg, "test", 0)
    assert [x["source"] for x in test.samples] == ["hotpotqa", "musique", "musique", "2WikiMultihopQA"]
    train = build_combined(cfg, "train", 0)
    assert sorted(x["source"] for x in train.samples) == ["2WikiMultihopQA"] * 3 + ["hotpotqa"] * 3 + ["musique"] * 2
    for x in train.samples:  # conversion follows the source's rules
        if x["source"] == "musique":
            assert "answer_aliases" in x

    def ids(ds):
        return [(x["source"], x["id"]) for x in ds.samples]

    assert ids(build_combined(cfg, "train", 0)) == ids(train)
    assert len({tuple(ids(build_combined(cfg, "train", s))) for s in range(6)}) > 1  # run seed, not fixed 42
    cfg.dataset3_path = None
    cfg.length = 2
    assert len(build_combined(cfg, "test", 0)) == 2


def test_niah_reads_ruler_2024_files_with_the_answer_prefix_in_input(fix):
    # RULER 2024: prepare.py appended the answer prefix to `input` (no `answer_prefix` field)
    s = load_niah(fix / "niah_2024", "test4k")
    a = s[0]  # single answer: RULER's singular wording
    assert a["question"] == "What is the special magic number for sour-cherry mentioned in the provided text?"
    assert a["chunks"][0] == "A special magic number is hidden within the following text."
    assert [a["chunks"][j] for j in a["sf_idx"]] == ["One of the special magic numbers for sour-cherry is: 4417093."]
    assert not any("mentioned in the provided text" in c for c in a["chunks"])  # the real question is no chunk
    b = s[1]  # a chat template: its closing tag after the question is dropped, its opening tag stays in chunk 0
    assert b["question"] == "What are all the special magic numbers for tall-fence mentioned in the provided text?"
    assert b["chunks"][0].startswith("[INST] Some special magic numbers") and len(b["sf_idx"]) == 2
    assert [x["id"] for x in s] == [0, 1] and [x["ruler_index"] for x in s] == [0, 1]


def test_niah_current_format_keeps_its_ids_unique_when_index_repeats(fix, tmp_path):
    src = (fix / "niah" / "train.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in src]
    for r in rows:
        r["index"] = 214  # current RULER: the answer's character offset, equal for alike layouts
    (tmp_path / "test4k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = load_niah(tmp_path, "test4k")
    assert [x["id"] for x in s] == [0, 1, 2] and {x["ruler_index"] for x in s} == {214}
    assert s[0]["question"] == load_niah(fix / "niah", "train")[0]["question"]
    cfg = OmegaConf.create({"name": "niah", "data_path": str(tmp_path), "test_split": "test4k", "length": -1})
    assert len(build_niah(cfg, "test", 3)) == 3  # nothing dropped


def test_ruler_qa_2024_answer_prefix_is_cut_from_the_question(fix):
    (a,) = load_ruler_qa(fix / "ruler_qa_2024.jsonl")
    assert a["question"] == "What is the capital of Peru?"
    assert a["chunks"][1] == "Oslo is the capital of Norway." and a["chunks"][2].startswith(
        "Lima is the capital of Peru."
    )
    assert a["id"] == 0 and a["ruler_index"] == 0


def test_list_dataset_refuses_repeated_ids():
    from envs.data.common import ListDataset
    from envs.types import SampleError

    a = {"id": 5, "question": "q1?", "answer": "x", "chunks": ["c"], "sf_idx": [0]}
    b = dict(a, question="q2?")
    with pytest.raises(SampleError, match="share the id 5 .questions 'q1.' and 'q2.'"):
        ListDataset([a, b], "demo")
    assert len(ListDataset([a, dict(b, source="other")], "combined")) == 2  # unique within a source


def test_ruler_qa_ids_stay_unique_when_index_repeats(fix, tmp_path):
    # RULER's `index` is no sample id (current NIAH files write an answer offset there): a file
    # whose records share it keeps every record, ids are positions
    rows = [json.loads(x) for x in (fix / "ruler_qa.jsonl").read_text().splitlines()]
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps({**r, "index": 7}) + "\n" for r in rows))
    s = load_ruler_qa(path)
    assert [x["id"] for x in s] == list(range(len(rows))) and {x["ruler_index"] for x in s} == {7}
    cfg = OmegaConf.create({"name": "ruler_qa", "data_path": str(path), "question_marker": "QUESTION:", "length": -1})
    assert len(build_ruler_qa(cfg, "test", 0)) == len(rows)  # nothing dropped


NIAH_BODY = (
    "A special magic number is hidden within the following text. Make sure to memorize it.\n"
    "The grass is green. One of the special magic numbers for calm-lake is: 5550123. The sky is blue.\n"
)


@pytest.mark.parametrize(
    "tail, field",
    [
        # RULER 2024: the answer prefix ends `input`
        (" The special magic number for calm-lake mentioned in the provided text is", None),
        # current layout, the prefix in its own field and still at the end of `input`
        (
            " The special magic number for calm-lake mentioned in the provided text is",
            " The special magic number for calm-lake mentioned in the provided text is",
        ),
    ],
)
def test_niah_answer_prefix_is_cut_also_under_another_question_wording(tmp_path, tail, field):
    # a question that is not RULER's sentence: only the prefix cut keeps it from being taken for
    # the answer prefix (the last sentence is the fallback question)
    q = "Which special magic number belongs to calm-lake?"
    rec = {"index": 0, "input": NIAH_BODY + q + tail, "outputs": ["5550123"]}
    if field is not None:
        rec["answer_prefix"] = field
    (tmp_path / "test4k.jsonl").write_text(json.dumps(rec) + "\n")
    (s,) = load_niah(tmp_path, "test4k")
    assert s["question"] == q and not any("mentioned in the provided text" in c for c in s["chunks"])


def test_niah_singular_question_before_a_chat_tag(tmp_path):
    # current RULER, one answer: the singular question is found although a chat template's closing
    # tag follows it (the tag is dropped, not taken for the question)
    q = "What is the special magic number for calm-lake mentioned in the provided text?"
    rec = {
        "index": 214,
        "input": NIAH_BODY + q + " [/INST]",
        "outputs": ["5550123"],
        "answer_prefix": " The special magic number for calm-lake mentioned in the provided text is",
    }
    (tmp_path / "test4k.jsonl").write_text(json.dumps(rec) + "\n")
    (s,) = load_niah(tmp_path, "test4k")
    assert s["question"] == q and s["chunks"][-1] == "The sky is blue."
    assert [s["chunks"][j] for j in s["sf_idx"]] == ["One of the special magic numbers for calm-lake is: 5550123."]
