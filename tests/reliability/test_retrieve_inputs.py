"""retrieve.py's untrusted input (issue 36 items 2, 5, 6, 7): ``output=`` never replaces a file the
user needs, the tool's own keys are checked before the model loads, an export is never left half
written at its target, and questions files in another encoding or case are read or refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rl.tool.retriever import QRAGRetriever, RetrieverError, read_questions
from tests.conftest import ROOT

TEXT = "John went to the garden. Mary moved to the kitchen.\nThe sky is blue. Sandra journeyed to the office.\n"


def cli(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "retrieve.py"), "device=cpu", "progress_bar=false", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def _refused(done: subprocess.CompletedProcess, message: str) -> None:
    assert done.returncode == 2, done.stderr
    errors = [x for x in done.stderr.splitlines() if x.startswith("error")]
    assert errors and message in errors[0], done.stderr
    assert "[retrieve]" not in done.stderr and "Traceback" not in done.stderr  # before the model loads


@pytest.fixture
def book(tmp_path: Path) -> Path:
    path = tmp_path / "book.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("RUN/model_best.pt", "is inside the run folder"),
        ("BOOK", "is the text file"),
        ("QUESTIONS", "is the questions file"),
        ("OTHER", "exists and is not an earlier answers file"),
        ("TMP/missing/a.jsonl", "does not exist"),
        ("TMP", "is a folder"),
    ],
)
def test_output_that_would_replace_a_needed_file_is_refused(eval_run_dir, tmp_path, book, target, message):
    questions = tmp_path / "q.txt"
    questions.write_text("Where is Mary?\n")
    other = tmp_path / "notes.txt"
    other.write_text("my notes\n")
    before = {p: p.read_bytes() for p in (eval_run_dir / "model_best.pt", book, questions, other)}
    subs = {"RUN": str(eval_run_dir), "BOOK": str(book), "QUESTIONS": str(questions), "OTHER": str(other)}
    subs["TMP"] = str(tmp_path)
    for k, v in subs.items():
        target = target.replace(k, v)
    _refused(cli(f"run={eval_run_dir}", f"text={book}", f"questions={questions}", f"output={target}"), message)
    assert {p: p.read_bytes() for p in before} == before


def test_an_earlier_answers_file_is_replaced(eval_run_dir, tmp_path, book):
    out = tmp_path / "answers.jsonl"
    for _ in range(2):  # the second run replaces the first one's answers
        done = cli(f"run={eval_run_dir}", f"text={book}", "question=Where is Mary?", f"output={out}", "steps=1")
        assert done.returncode == 0, done.stderr
    assert [json.loads(x)["question"] for x in out.read_text().splitlines()] == ["Where is Mary?"]


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("steps=abc", "steps=abc: expected a whole number"),
        ("steps=2.5", "steps=2.5: expected a whole number"),
        ("steps=0", "steps=0: expected a whole number"),
        ("stop_threshold=abc", "stop_threshold=abc: expected a number"),
        ("beam_width=abc", "beam_width=abc: expected a whole number"),
        ("beam_expand=-1", "beam_expand=-1: expected a whole number"),
    ],
)
def test_the_tools_own_numbers_are_checked_first(eval_run_dir, book, arg, message):
    _refused(cli(f"run={eval_run_dir}", f"text={book}", "question=Where is Mary?", arg), message)


def test_bad_export_targets_are_refused_before_the_model_loads(eval_run_dir, tmp_path):
    (tmp_path / "file").write_text("x")
    _refused(cli(f"run={eval_run_dir}", f"export={tmp_path / 'file'}"), "is a file")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    _refused(cli(f"run={eval_run_dir}", f"export={tmp_path / 'full'}"), "exists and is not empty")
    _refused(cli(f"run={eval_run_dir}", f"export={tmp_path / 'file' / 'sub'}"), "cannot be written")


def test_a_failed_export_leaves_no_half_folder(eval_run_dir, tmp_path, monkeypatch):
    from rl.tool import export

    r = QRAGRetriever.from_run(eval_run_dir, device="cpu")

    def killed(*a):  # dies after the encoders' folders were written, before the settings file
        raise KeyboardInterrupt

    monkeypatch.setattr(export, "readme", killed)
    with pytest.raises(KeyboardInterrupt):
        r.export(tmp_path / "exp")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # neither a half export nor its work folder
    monkeypatch.undo()
    r.export(tmp_path / "exp")  # the rerun is not refused
    assert (tmp_path / "exp" / "qrag_retriever.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]


def test_questions_files_in_latin1_capitals_or_with_a_bom(tmp_path):
    latin = tmp_path / "q.txt"
    latin.write_bytes("Où est Marie?\n".encode("latin-1"))
    with pytest.raises(RetrieverError, match=r"not UTF-8 text"):
        read_questions(latin)
    upper = tmp_path / "q.JSONL"
    upper.write_text('{"question": "Where is Mary?", "id": 1}\n')
    assert read_questions(upper) == [{"question": "Where is Mary?", "id": 1}]
    bom = tmp_path / "bom.txt"
    bom.write_bytes("\ufeffWhere is Mary?\n".encode())
    assert read_questions(bom) == [{"question": "Where is Mary?"}]


def test_a_question_holding_an_interpolation_is_asked_as_typed(eval_run_dir, book):
    """Item 5: `${` in a question is text, not a reference to the config (it stopped the tool) nor
    a resolver reading this machine (``oc.env``)."""
    question = "Is ${x} in ${oc.env:HOME}?"
    done = cli(f"run={eval_run_dir}", f"text={book}", f"question={question}", "steps=1")
    assert done.returncode == 0, done.stderr
    assert any(line.startswith(f"question: {question}  (") for line in done.stdout.splitlines()), done.stdout
