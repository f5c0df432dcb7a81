"""scripts/generate_data.py: each subcommand writes the shipped generated files byte for byte (the
multi-hop stand-ins and RULER QA file at their default sizes, the bAbI test files), under the names
the loaders read."""

from __future__ import annotations

import gzip

from tests.conftest import ROOT, load_script

generate_data = load_script("generate_data")
DATA = ROOT / "data"


def test_multihop_writes_the_shipped_stand_ins(tmp_path, capsys):
    generate_data.main(["multihop", "--out", str(tmp_path), "--gzip"])
    shipped = {
        "hotpotqa/hotpot_train_v1.1.json.gz": "hotpotqa-generated/hotpot_train_v1.1.json.gz",
        "hotpotqa/hotpot_dev_distractor_v1.json.gz": "hotpotqa-generated/hotpot_dev_distractor_v1.json.gz",
        "musique/musique_ans_v1.0_train.jsonl.gz": "musique-generated/musique_ans_v1.0_train.jsonl.gz",
        "musique/musique_ans_v1.0_dev.jsonl.gz": "musique-generated/musique_ans_v1.0_dev.jsonl.gz",
        **{f"2wikimultihopqa/{s}.json.gz": f"2wikimultihopqa-generated/{s}.json.gz" for s in ("train", "dev", "test")},
        "ruler_qa/qa_2.jsonl.gz": "ruler_qa/qa_2.jsonl.gz",
    }
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == sorted(shipped)
    for name, ship in shipped.items():
        assert (tmp_path / name).read_bytes() == (DATA / ship).read_bytes(), name
    assert "hotpotqa/hotpot_dev_distractor_v1.json.gz: 100 records" in capsys.readouterr().out


def test_multihop_sizes_and_plain_files(tmp_path):
    generate_data.main(
        ["multihop", "--out", str(tmp_path), "--hotpotqa", "3:2", "--musique", "2:1"] + ["--ruler-qa", "0"]
    )
    assert (tmp_path / "musique" / "musique_ans_v1.0_dev.jsonl").read_text().count("\n") == 1
    assert not (tmp_path / "ruler_qa").exists()


def test_babi_writes_the_shipped_test_files(tmp_path):
    out = tmp_path / "en-10k"
    generate_data.main(["babi", "--out", str(out), "--tasks", "qa1", "qa3", "--train-questions", "5", "--gzip"])
    shipped = DATA / "babilong" / "babi-generated" / "en-10k"
    names = ["qa1_single-supporting-fact", "qa3_three-supporting-facts"]
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{n}_{s}.txt.gz" for n in names for s in ("train", "test"))
    for n in names:
        assert (out / f"{n}_test.txt.gz").read_bytes() == (shipped / f"{n}_test.txt.gz").read_bytes()
        train = gzip.decompress((out / f"{n}_train.txt.gz").read_bytes()).decode()
        assert train.count("?") == 5  # one question mark per question
