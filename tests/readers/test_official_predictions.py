"""scripts/leaderboard.py hotpotqa|musique: the committed Table 2 retriever logs (and a reader's answers)
written in HotpotQA's and MuSiQue's official prediction layouts, scored by the ports of
hotpot_evaluate_v1.py and evaluate_v1.0.py, agree with the project's own numbers."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.conftest import load_script as load_from_scripts

from .conftest import load_script

official = load_from_scripts("leaderboard")

ARCHIVE = ROOT / "experiments" / "table2" / "runs.tar.xz"  # Table 2's committed raw records
with tarfile.open(ARCHIVE) as _tar:
    LOGS = sorted(n for n in _tar.getnames() if n.endswith(".jsonl") and Path(n).name.startswith("eval_"))


@pytest.fixture
def table2(committed_runs: dict[str, Path]) -> Path:
    """The archive unpacked (once per session)."""
    return committed_runs["table2"]


def test_ports_on_worked_cases() -> None:
    # HotpotQA answers: the yes/no/noanswer rule, and no overlap scoring 0 even for two empty sides
    assert official.hotpot_answer("The answer is yes.", "yes") == (0.0, 0.0, 0.0, 0.0)
    assert official.hotpot_answer("", "") == (1.0, 0.0, 0.0, 0.0)
    em, f1, prec, rec = official.hotpot_answer("the Armando Iannucci show", "Armando Iannucci")
    assert (em, prec, rec) == (0.0, 2 / 3, 1.0) and f1 == pytest.approx(0.8)
    # MuSiQue answers: SQuAD F1, two empty sides score 1
    assert official.squad_f1("", "") == 1.0 and official.squad_f1("a", "Paris") == 0.0
    # supporting facts: EM only for the exact set (extras cost it), HotpotQA's empty-set rule
    assert official.set_scores([("A", 0), ("B", 1), ("C", 0)], [("A", 0), ("B", 1)])[:2] == (0.0, 0.8)
    assert official.set_scores([], []) == (1.0, 0.0, 0.0, 0.0)
    assert official.musique_support([], []) == (1.0, 1.0)  # MuSiQue's SupportMetric sets both to 1
    gold = [{"_id": "q", "answer": "yes", "supporting_facts": [["A", 0]]}]
    scores = official.hotpot_evaluate({"answer": {"q": "yes"}, "sp": {}}, gold)
    assert scores["em"] == 1.0 and scores["sp_f1"] == 0.0 and scores["joint_em"] == 0.0  # no sp: no joint


@pytest.mark.parametrize("name", LOGS)
def test_committed_logs_agree_with_the_official_scorers(name: str, table2: Path, tmp_path: Path) -> None:
    log = table2 / name
    result = official.write_official(log, tmp_path)
    assert result["all_agree"], result
    records = [json.loads(x) for x in log.read_text(encoding="utf-8").splitlines()]
    assert result["fact_f1_agree"] == f"{len(records)}/{len(records)}"
    if result["dataset"] == "musique":
        pred = [json.loads(x) for x in (tmp_path / "musique_pred.jsonl").read_text().splitlines()]
        gold = [json.loads(x) for x in (tmp_path / "musique_gold.jsonl").read_text().splitlines()]
        assert [p["id"] for p in pred] == [g["id"] for g in gold] == [r["id"] for r in records]
        assert set(pred[0]) == {"id", "predicted_answer", "predicted_support_idxs", "predicted_answerable"}
        assert result["official"]["support_f1"] == pytest.approx(result["project"]["fact_f1"], abs=1e-12)
    else:
        pred = json.loads((tmp_path / "hotpot_pred.json").read_text())
        gold = json.loads((tmp_path / "hotpot_gold.json").read_text())
        assert set(pred) == {"answer", "sp"} and [g["_id"] for g in gold] == [r["id"] for r in records]
        title, sent = pred["sp"][records[0]["id"]][0]
        assert isinstance(title, str) and sent == 0
        # every sentence of the picked paragraphs: all gold sentences predicted iff all gold paragraphs
        for r, g in zip(records, gold):
            found = {tuple(f) for f in g["supporting_facts"]} <= {tuple(f) for f in pred["sp"][r["id"]]}
            assert found == (r["recall"] == 1.0)


class ScriptedReader:
    """Answers from the gold answer, varied per question: exact, with an article, padded, yes, empty."""

    name = "scripted"
    last_errors: list = []

    def __init__(self, answers: dict[str, str]):
        self.answers = answers

    def generate(self, batch, *a, **k):
        out = []
        for k, messages in enumerate(batch):
            question = next(q for q in self.answers if q in messages[-1]["content"])
            gold = self.answers[question]
            out.append(f"Final answer: {[gold, 'The ' + gold, gold + ' and more', 'yes', ''][k % 5]}")
        return out


@pytest.mark.parametrize("run", ["h_qrag_s1", "m_qrag"])
def test_reader_answers_agree(run: str, table2: Path, tmp_path: Path) -> None:
    openqa = load_script("eval_llm_openqa")
    src = table2 / run / "eval_seed42.jsonl"
    log = tmp_path / "eval_seed42.jsonl"
    lines = src.read_text(encoding="utf-8").splitlines()[:30]
    log.write_text("\n".join(lines) + "\n")
    shutil.copy(table2 / run / "eval_seed42.jsonl.meta.json", tmp_path)
    records = [json.loads(x) for x in lines]
    reader_out = tmp_path / "reader.jsonl"
    args = openqa.parse_args(
        ["--retriever_logfile", str(log), "--llm_name", "m", "--output_file_path", str(reader_out)]
    )
    summary = openqa.run(args, ScriptedReader({r["question"]: r["answer"] for r in records}))
    result = official.write_official(log, tmp_path / "official", reader_out)
    assert result["all_agree"] and result["answer_agree"] == "30/30"
    em, f1 = ("em", "f1") if result["dataset"] == "hotpotqa" else ("answer_em", "answer_f1")
    assert result["official"][em] == pytest.approx(summary["EM"]) and 0 < summary["EM"] < 1
    assert result["official"][f1] == pytest.approx(summary["F1"])


def one_line(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err and err.count("\n") == 1, err
    return err


def test_bad_inputs_are_one_error_line(table2: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    log = table2 / "m_qrag" / "eval_seed42.jsonl"
    hotpot = ROOT / "data" / "hotpotqa" / "subset_test.jsonl.gz"
    cases = [
        (["musique", str(tmp_path / "none.jsonl")], "retriever log not found"),
        (["musique", str(log), "--data", str(hotpot)], "missing field 'id'"),  # a HotpotQA file for a MuSiQue log
        (["musique", str(log), "--data", str(ROOT / "data/musique/subset_train.jsonl.gz")], "no record with id"),
        (
            [
                "hotpotqa",
                str(table2 / "h_noft" / "eval_seed42.jsonl"),
                "--data",
                str(ROOT / "data" / "hotpotqa" / "subset_train.jsonl.gz"),
            ],
            "IRCoT-layout records",
        ),
    ]
    for argv, message in cases:
        assert official.main([*argv, "--out", str(tmp_path / "o")]) == 2
        assert message in one_line(capsys)
    reader = tmp_path / "reader.jsonl"
    reader.write_text(json.dumps({"id": "x", "prediction": "a", "EM": 0.0, "F1": 0.0}) + "\n")
    assert official.main(["musique", str(log), "--reader", str(reader), "--out", str(tmp_path / "o")]) == 2
    assert "no reader line for 200 record(s)" in capsys.readouterr().err
    # the subcommand names the layout: a MuSiQue log asked for HotpotQA's is refused, nothing written
    assert official.main(["hotpotqa", str(log), "--out", str(tmp_path / "h")]) == 2
    assert "a musique log, not hotpotqa: write it with `leaderboard.py musique`" in one_line(capsys)
    assert not (tmp_path / "h").exists()


def test_the_command_line_writes_and_checks_a_committed_log(table2: Path, tmp_path: Path, capsys) -> None:
    log = table2 / "h_qrag_s1" / "eval_seed42.jsonl"
    assert official.main(["hotpotqa", str(log), "--out", str(tmp_path / "o"), "--check"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((tmp_path / "o" / "official_scores.json").read_text())
    assert printed["dataset"] == "hotpotqa" and printed["all_agree"] and (tmp_path / "o" / "hotpot_pred.json").is_file()


def test_records_of_unknown_gold_are_left_out_as_in_the_summary(table2: Path, tmp_path: Path) -> None:
    src = table2 / "h_qrag_s1"
    records = [json.loads(x) for x in (src / "eval_seed42.jsonl").read_text(encoding="utf-8").splitlines()][:5]
    records[0].update(em=None, f1=None, precision=None, recall=None)  # what a record of unknown gold holds
    log = tmp_path / "eval_seed42.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    shutil.copy(src / "eval_seed42.jsonl.meta.json", tmp_path)
    result = official.write_official(log, tmp_path / "official")
    assert result["all_agree"] and result["fact_f1_agree"] == "4/4"
    assert result["project"]["fact_f1"] == pytest.approx(sum(r["f1"] for r in records[1:]) / 4)


def test_every_committed_log_is_checked() -> None:
    """The parametrised check above runs on every retriever log of Table 2 (none lost in a move)."""
    assert len(LOGS) == 14 and {n.split("/")[0] for n in LOGS} == {"h_gen", "h_noft", "h_qrag_s1", "m_qrag"}
