"""scripts/leaderboard.py babilong (BABILong's leaderboard prediction files) and
scripts/ruler_effective_length.py (RULER's effective length of retrieval and reader runs)."""

from __future__ import annotations

import csv
import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from prompts_and_metrics.metrics import babilong_acc, string_match_all
from prompts_and_metrics.prompts import babilong_user_message
from tests.conftest import ROOT as REPO
from tests.conftest import load_script

board = load_script("leaderboard")
ruler = load_script("ruler_effective_length")

SETTINGS = {"babi_task": "qa1", "max_tokens": 32, "think": False, "llm_name": "smollm2", "extra_question_mark": False}
# (row, question, target, reader output) of qa1 at 4k, written out of row order
QA1 = [
    (2, "Where is Sandra?", "kitchen", "kitchen"),
    (0, "Where is John?", "hallway", "The most recent location of John is hallway."),
    (1, "Where is Mary?", "bathroom", "garden"),
]


def reader_line(sample_id: str, question: str, target: str, output: str, task: str = "qa1", **kw) -> dict:
    settings = {**SETTINGS, "babi_task": task}
    acc = babilong_acc(output, target, question, task)
    return {"id": sample_id, "question": question, "answer": target, "prediction": output, "filter": "none",
            "reader_settings": settings, "answer_acc": acc, **kw}  # fmt: skip


def write_jsonl(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def test_babilong_files_read_and_score_as_the_leaderboard_reads_them(tmp_path: Path) -> None:
    lines = [reader_line(f"4k/qa1/{row}", q, t, o) for row, q, t, o in QA1]
    lines.append({**lines[0], "filter": "gt", "prediction": "office"})  # another chunk filter: not written
    lines.append(reader_line("1M/qa2/0", "Where is the football?", "garden", "garden", task="qa2"))
    src = write_jsonl(tmp_path / "smollm2_eval_seed0_test_4k.jsonl", lines)
    assert board.main(["babilong", str(src), "--model", "q-rag/minilm-smollm2", "--out", str(tmp_path / "evals")]) == 0
    folder = tmp_path / "evals" / "q-rag" / "minilm-smollm2"
    assert sorted(p.name for p in folder.iterdir()) == [
        "manifest.json",
        f"qa1_4k_{board.PROMPT_CONFIG}.csv",
        f"qa1_4k_{board.PROMPT_CONFIG}.json",
        f"qa2_1M_{board.PROMPT_CONFIG}.csv",
        f"qa2_1M_{board.PROMPT_CONFIG}.json",
    ]
    path = folder / f"qa1_4k_{board.PROMPT_CONFIG}.csv"
    # the leaderboard's file name: task, length, then yes/no settings it parses pair by pair
    task, length, *config = path.stem.split("_")
    assert (task, length) == ("qa1", "4k")
    words, parsed = [], {}
    for w in config:
        if w in ("yes", "no"):
            parsed["_".join(words)], words = w == "yes", []
        else:
            words.append(w)
    assert parsed == {"instruction": True, "examples": True, "post_prompt": True, "chat_template": True} and not words
    text = path.read_text(encoding="utf-8")
    assert text.splitlines()[0] == ",target,output,question"  # an official file's header (pandas' unnamed index)
    rows = list(csv.DictReader(text.splitlines()))
    assert [r[""] for r in rows] == ["0", "1", "2"]  # the official rows, in order
    assert [(r["target"], r["output"], r["question"]) for r in rows] == [(t, o, q) for _, q, t, o in sorted(QA1)]
    # scored row by row with BABILong's compare_answers (our port): the reader's own accuracy
    official = [babilong_acc(r["output"], r["target"], r["question"], "qa1") for r in rows]
    assert official == [1.0, 0.0, 1.0] and sum(official) == sum(x["answer_acc"] for x in lines[:3])
    meta = json.loads((folder / f"qa1_4k_{board.PROMPT_CONFIG}.json").read_text())
    p = meta["prompt"]
    filled = p["template"].format(
        instruction=p["instruction"], examples=p["examples"], post_prompt=p["post_prompt"], context="C.", question="Q?"
    )
    assert filled.strip() == babilong_user_message("qa1", "C.", "Q?")  # the prompt the reader sent
    assert meta["reader_settings"] == SETTINGS and meta["generate_kwargs"]["max_new_tokens"] == 32


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (["17"], "is not <length>/<task>/<row>"),  # a generated haystack's sample
        (["3k/qa1/0"], "length '3k' is not one of the leaderboard's"),
        (["4k/qa11/0"], "task qa11 is not on the leaderboard"),
        (["4k/qa1/0", "4k/qa1/0"], "4k row 0 is written twice"),
    ],
)
def test_babilong_refuses_what_the_leaderboard_cannot_hold(tmp_path: Path, capsys, ids, message) -> None:
    src = write_jsonl(tmp_path / "out.jsonl", [reader_line(i, "Where is John?", "hallway", "hallway") for i in ids])
    assert board.main(["babilong", str(src), "--model", "a/b", "--out", str(tmp_path / "evals")]) == 2
    assert message in capsys.readouterr().err


def git(folder: Path, *args: str) -> str:
    run = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(run, capture_output=True, text=True, check=True).stdout.strip()


def test_babilong_manifest_names_the_scorer_its_state_and_the_dataset_revision(tmp_path: Path, capsys) -> None:
    scorer = tmp_path / "babilong"  # a checkout of booydar/babilong
    (scorer / "babilong").mkdir(parents=True)
    (scorer / "babilong" / "metrics.py").write_text("def compare_answers(target, output, question, task_labels): ...\n")
    git(scorer, "init", "-q")
    git(scorer, "add", ".")
    git(scorer, "commit", "-qm", "scorer")
    src = write_jsonl(tmp_path / "out.jsonl", [reader_line(f"4k/qa1/{row}", q, t, o) for row, q, t, o in QA1])
    revision = "a" * 40
    args = ["babilong", str(src), "--model", "a/b", "--out", str(tmp_path / "evals"), "--scorer", str(scorer)]
    assert board.main([*args, "--dataset-revision", revision]) == 0
    folder = tmp_path / "evals" / "a" / "b"
    m = json.loads((folder / "manifest.json").read_text())
    metrics = (scorer / "babilong" / "metrics.py").read_bytes()
    assert m["scorer"] == {
        "repo": "booydar/babilong",
        "commit": git(scorer, "rev-parse", "HEAD"),
        "file": "babilong/metrics.py",
        "sha256": hashlib.sha256(metrics).hexdigest(),
        "unmodified": True,
    }
    assert m["dataset"] == {"repo": "RMT-team/babilong", "revision": revision}
    (entry,) = m["files"]
    csv_file = folder / entry["file"]
    assert entry["sha256"] == hashlib.sha256(csv_file.read_bytes()).hexdigest() and entry["rows"] == 3
    assert entry["accuracy"] == 2 / 3  # the rows scored with compare_answers (our port): [1, 0, 1]
    assert (
        m["port"]["file"] == "prompts_and_metrics/metrics.py"
        and m["port"]["sha256"]
        == hashlib.sha256((REPO / "prompts_and_metrics" / "metrics.py").read_bytes()).hexdigest()
    )
    # a scorer changed after its commit is said to be so
    (scorer / "babilong" / "metrics.py").write_text("def compare_answers(*a): return 1\n")
    assert board.main(args) == 0
    m = json.loads((folder / "manifest.json").read_text())
    assert m["scorer"]["unmodified"] is False and m["dataset"]["revision"] is None
    assert "warning: the manifest names no dataset revision" in capsys.readouterr().err
    # a folder that is not a checkout names no commit: refused before anything is written
    (tmp_path / "copy" / "babilong").mkdir(parents=True)
    (tmp_path / "copy" / "babilong" / "metrics.py").write_bytes(metrics)
    out2 = tmp_path / "evals2"
    assert (
        board.main(["babilong", str(src), "--model", "a/b", "--out", str(out2), "--scorer", str(tmp_path / "copy")])
        == 2
    )
    assert "is not a git checkout of booydar/babilong" in capsys.readouterr().err and not out2.exists()


def needle_record(hit: bool) -> dict:
    """A greedy NIAH record: the needle (chunk 3) retrieved or not."""
    picks = [3, 0] if hit else [1, 0]
    return {"pred_idx": picks, "pred_texts": ["x"] * 2, "q_values": [0.9, 0.1], "sf_idx": [3], "answer": "7"}


def write_cell(folder: Path, task: str, length: str, hits: int, n: int = 10) -> Path:
    """eval_retriever.py's files for one task and length: ``hits`` of ``n`` samples retrieved."""
    cell = folder / "niah" / task
    cell.mkdir(parents=True, exist_ok=True)
    path = write_jsonl(cell / f"eval_seed42_test{length}.jsonl", [needle_record(k < hits) for k in range(n)])
    (cell / f"eval_seed42_test{length}.jsonl.meta.json").write_text(json.dumps({"task": task}))
    return path


def test_ruler_effective_length_of_retrieval_runs(tmp_path: Path, capsys) -> None:
    # two seeds; task A above the threshold everywhere, task B dropping at 16K. The averages over
    # tasks and seeds: 4K 100, 16K 90, 32K 85 (not above 85.6), 128K 95: the effective length is 16K,
    # a longer length passing again after a failure does not count
    hits = {"niah_single_1": (10, 10, 10, 10), "niah_multikey_1": (10, 8, 7, 9)}
    for seed in ("s1", "s2"):
        for task, per_length in hits.items():
            for length, h in zip(("4k", "16k", "32k", "128k"), per_length):
                write_cell(tmp_path / seed, task, length, h)
    out = tmp_path / "ruler.json"
    assert ruler.main([str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert list(rep["scores"]) == ["4k", "16k", "32k", "128k"]  # by length, not by name
    assert rep["scores"]["32k"] == {"niah_multikey_1": 70.0, "niah_single_1": 100.0}
    assert rep["effective_length"] == "16K"
    assert rep["effective_length_per_task"] == {"niah_multikey_1": "4K", "niah_single_1": "128K"}
    assert "| 32K | 70.0 | 100.0 | 85.0 |" in capsys.readouterr().out


def test_ruler_threshold_is_strict_and_reader_answers_are_scored(tmp_path: Path) -> None:
    names = ["a"]
    at = {("a", "t", "4k"): {"score": 90.0}, ("a", "t", "8k"): {"score": 85.6}}
    assert ruler.report(at, names)["effective_length"] == "4K"  # 85.6 is not above 85.6
    above = {**at, ("a", "t", "8k"): {"score": 85.7}}
    assert ruler.report(above, names)["effective_length"] == "8K"
    two = {**above, ("b", "t", "4k"): {"score": 90.0}}  # seed b not evaluated at 8K: said so
    assert ruler.report(two, ["a", "b"])["effective_length"] == "8K (a only)"
    # a reader's answers beside the records: its string_match_all of the chosen filter
    records = write_cell(tmp_path / "run", "niah_multivalue", "4k", 10)
    lines = [{"filter": "none", "answer_string_match_all": v} for v in (1.0, 0.75, 0.5, 1.0)]
    write_jsonl(
        records.with_name(f"Qwen3-4B_{records.name}"), lines + [{"filter": "gt", "answer_string_match_all": 0.0}]
    )
    cells = ruler.grid([tmp_path / "run"], "Qwen3-4B", "none", None)
    assert cells == {(str(tmp_path / "run"), "niah_multivalue", "4k"): {"score": 81.25}}
    assert ruler.report(cells, [str(tmp_path / "run")])["effective_length"] == "< 4K"


def test_ruler_files_in_rulers_own_layout(tmp_path: Path, capsys) -> None:
    """--ruler-out writes what RULER's scripts/eval/evaluate.py writes for a run: per length
    ``<max_seq_length>/pred/summary.csv`` (a pandas frame of the rows Tasks / Score / Nulls, its
    column numbers as header) and ``submission.csv`` (Task, ID, Prediction)."""
    run = tmp_path / "run"
    answers = {"niah_multikey_1": ["7", " 7\n", "", "8"], "niah_single_1": ["7, and 7", "7", "7", "no"]}
    for task, preds in answers.items():
        for length in ("4k", "16k"):
            records = write_cell(run, task, length, hits=4, n=4)
            lines = [{"id": str(k), "filter": "none", "prediction": p,
                      "answer_string_match_all": string_match_all(p, ["7"])} for k, p in enumerate(preds)]  # fmt: skip
            write_jsonl(records.with_name(f"llm_{records.name}"), lines)
    assert ruler.main([str(run), "--reader", "llm", "--ruler-out", str(tmp_path / "synthetic")]) == 0
    pred = tmp_path / "synthetic" / "4096" / "pred"
    assert sorted(p.name for p in (tmp_path / "synthetic").iterdir()) == ["16384", "4096"]
    rows = list(csv.reader((pred / "summary.csv").read_text().splitlines()))
    # RULER's task order (its synthetic.yaml), its score rounding, its null count
    assert rows == [
        ["0", "1", "2"],
        ["Tasks", "niah_single_1", "niah_multikey_1"],
        ["Score", "75.0", "50.0"],
        ["Nulls", "0/4", "1/4"],
    ]
    sub = list(csv.DictReader((pred / "submission.csv").read_text().splitlines()))
    assert list(sub[0]) == ["Task", "ID", "Prediction"] and len(sub) == 8
    assert sub[4] == {"Task": "niah_multikey_1", "ID": "0", "Prediction": "7"}
    assert sub[5]["Prediction"] == "7"  # stripped, as RULER post-processes
    # RULER's metric over the submission's predictions gives the summary's score back
    for task, score in zip(rows[1][1:], rows[2][1:]):
        preds = [r["Prediction"] for r in sub if r["Task"] == task]
        assert round(100 * sum(string_match_all(p, ["7"]) for p in preds) / len(preds), 2) == float(score)
    # a single task: RULER names the file summary-<task>.csv
    one = tmp_path / "one"
    records = write_cell(one, "niah_single_1", "4k", hits=1, n=1)
    write_jsonl(records.with_name(f"llm_{records.name}"), [{"id": "0", "filter": "none", "prediction": "7",
                                                             "answer_string_match_all": 1.0}])  # fmt: skip
    assert ruler.main([str(one), "--reader", "llm", "--ruler-out", str(tmp_path / "s1")]) == 0
    assert sorted(p.name for p in (tmp_path / "s1" / "4096" / "pred").iterdir()) == [
        "submission.csv",
        "summary-niah_single_1.csv",
    ]
    # RULER's files hold one run's reader answers
    with pytest.raises(SystemExit):
        ruler.main([str(run), str(one), "--reader", "llm", "--ruler-out", str(tmp_path / "x")])
    with pytest.raises(SystemExit):
        ruler.main([str(run), "--ruler-out", str(tmp_path / "x")])
    assert not (tmp_path / "x").exists()
