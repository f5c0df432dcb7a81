"""Bad input to the scripts that repackage and score evaluation files (issue 46 items 10, 11, 17, 18):
scripts/leaderboard.py babilong and scripts/ruler_effective_length.py skip a half-written last
line with a warning; every other bad input is one ``error:`` line with status 2, loses no file
and writes nothing outside ``--out``."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

import runstore
from tests.eval.test_leaderboards import board, reader_line, ruler, write_cell, write_jsonl

QUESTION = ("Where is John?", "hallway", "hallway")


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    return err


def leaderboard(tmp_path: Path, *inputs: Path | str, model: str = "a/b", out: Path | None = None) -> int:
    return board.main(["babilong", *map(str, inputs), "--model", model, "--out", str(out or tmp_path / "evals")])


# -- scripts/leaderboard.py babilong ----------------------------------------------------------


def test_babilong_skips_a_half_written_last_line_with_a_warning(tmp_path, capsys):
    whole = [reader_line(f"4k/qa1/{r}", *QUESTION) for r in range(2)]
    src = write_jsonl(tmp_path / "out.jsonl", whole)
    with open(src, "a") as f:
        f.write(json.dumps(reader_line("4k/qa1/2", *QUESTION))[:40])  # a reader killed mid-line
    assert leaderboard(tmp_path, src) == 0
    assert "skipped a half-written last line" in capsys.readouterr().err
    csv_file = next((tmp_path / "evals" / "a" / "b").glob("*.csv"))
    assert len(csv_file.read_text().splitlines()) == 3  # header + the two whole lines


def _text(text: str):
    def make(folder: Path) -> Path:
        (folder / "o.jsonl").write_text(text)
        return folder / "o.jsonl"

    return make


def _latin1(tmp_path: Path) -> Path:
    src = write_jsonl(tmp_path / "out.jsonl", [reader_line("4k/qa1/0", *QUESTION)] * 2)
    src.write_bytes(src.read_bytes().replace(b"John", b"J\xf6hn", 1))
    return src


def _null_settings(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "out.jsonl", [{**reader_line("4k/qa1/0", *QUESTION), "reader_settings": None}])


def _no_settings(tmp_path: Path) -> Path:
    line = reader_line("4k/qa1/0", *QUESTION)
    del line["reader_settings"]
    return write_jsonl(tmp_path / "out.jsonl", [reader_line("4k/qa1/1", *QUESTION), line])


def _no_prediction(tmp_path: Path) -> Path:
    line = reader_line("4k/qa1/0", *QUESTION)
    del line["prediction"]
    return write_jsonl(tmp_path / "out.jsonl", [line])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "missing.jsonl", "missing.jsonl: no such file"),
        (lambda p: p, "a folder, not a file"),
        (_text('{"id": 1\n{}\n'), "o.jsonl:1: not valid JSON"),
        (_text("[1, 2]\n"), "o.jsonl:1: expected a JSON object"),
        (_latin1, "out.jsonl:1: not UTF-8 text"),
        (_null_settings, "out.jsonl:1: the line lacks reader_settings"),
        (_no_settings, "out.jsonl:2: the line lacks reader_settings"),
        (_no_prediction, "out.jsonl:1: the line lacks prediction"),
    ],
    ids=["missing", "folder", "bad-json", "not-object", "latin1", "null-settings", "no-settings", "no-key"],
)
def test_babilong_bad_input_is_one_line(tmp_path, capsys, make, message):
    src = make(tmp_path)
    assert leaderboard(tmp_path, src) == 2
    assert message in one_error_line(capsys)
    assert not (tmp_path / "evals").exists()


@pytest.mark.parametrize("model", ["../X", "a/..", "./a", "a/b/../../../x", "a/."])
def test_babilong_model_cannot_write_outside_out(tmp_path, capsys, model):
    src = write_jsonl(tmp_path / "out.jsonl", [reader_line("4k/qa1/0", *QUESTION)])
    (tmp_path / "out").mkdir()
    with pytest.raises(SystemExit) as e:
        leaderboard(tmp_path, src, model=model, out=tmp_path / "out")
    assert e.value.code == 2 and "give <org>/<name>" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["out", "out.jsonl"]


def test_babilong_a_refused_later_cell_writes_no_earlier_cell(tmp_path, capsys):
    lines = [reader_line("4k/qa1/0", *QUESTION), reader_line("4k/qa2/0", *QUESTION, task="qa2")]
    lines.append(
        {**reader_line("4k/qa2/1", *QUESTION, task="qa2"), "reader_settings": {"babi_task": "qa2", "max_tokens": 9}}
    )
    src = write_jsonl(tmp_path / "out.jsonl", lines)
    assert leaderboard(tmp_path, src) == 2
    assert "qa2 4k: lines made with different reader settings" in one_error_line(capsys)
    assert not (tmp_path / "evals").exists()


@pytest.mark.parametrize("where", ["under-a-file", "read-only"])
def test_babilong_an_unwritable_out_is_one_line(tmp_path, capsys, monkeypatch, where):
    src = write_jsonl(tmp_path / "out.jsonl", [reader_line("4k/qa1/0", *QUESTION)])
    out = src / "evals"
    if where == "read-only":  # as the tests may run as root, the folder's refusal is injected
        out = tmp_path / "evals"
        denied = PermissionError(errno.EACCES, "Permission denied")
        monkeypatch.setattr(runstore, "_open_for_write", lambda path: (_ for _ in ()).throw(denied))
    assert leaderboard(tmp_path, src, out=out) == 2
    assert "cannot write" in one_error_line(capsys)
    assert src.read_bytes() and not list(tmp_path.rglob("*.csv"))


# -- scripts/ruler_effective_length.py ------------------------------------------------------


def test_ruler_skips_a_half_written_last_line_with_a_warning(tmp_path, capsys):
    path = write_cell(tmp_path / "s1", "niah_single_1", "4k", hits=4, n=4)
    with open(path, "a") as f:
        f.write('{"pred_idx": [1, 0], "pred_te')  # an evaluation killed mid-line: not a miss
    assert ruler.main([str(tmp_path / "s1")]) == 0
    captured = capsys.readouterr()
    assert "skipped a half-written last line" in captured.err and "| 4K | 100.0 | 100.0 |" in captured.out


def _meta(text: str):
    def make(folder: Path) -> None:
        path = write_cell(folder, "niah_single_1", "4k", hits=4)
        Path(f"{path}.meta.json").write_text(text)

    return make


def _records(text: bytes, name: str = "eval_seed42_test4k.jsonl"):
    def make(folder: Path) -> None:
        path = write_cell(folder, "niah_single_1", "4k", hits=4)
        path.unlink()
        path.with_name(name).write_bytes(text)
        Path(f"{path.with_name(name.removesuffix('.gz'))}.meta.json").write_text('{"task": "niah_single_1"}')

    return make


def _reader(value: object):
    def make(folder: Path) -> None:
        path = write_cell(folder, "niah_single_1", "4k", hits=4)
        write_jsonl(path.with_name(f"llm_{path.name}"), [{"filter": "none", "answer_acc": value}])

    return make


@pytest.mark.parametrize(
    ("make", "args", "message"),
    [
        (lambda f: None, ["--folder-missing"], "no such folder"),
        (_records(b""), [], "no records: rerun the evaluation"),  # killed before its first record
        (_records(b"not gzip", "eval_seed42_test4k.jsonl.gz"), [], "cannot be read"),
        (_records(b'{"q_values": [1]}\n'), [], ":1: the record lacks pred_idx"),
        (_records(b'{"a": 1}\n\xe9\n'), [], ":2: not UTF-8 text"),
        (_meta("{}"), [], "not an eval_retriever.py meta file"),
        (_meta("[1]"), [], "not an eval_retriever.py meta file"),
        (_reader(float("nan")), ["--reader", "llm"], "answer_acc is NaN, not a score"),
        (_reader(None), ["--reader", "llm"], "answer_acc is null, not a score"),
        (lambda f: write_cell(f, "niah_single_1", "4k", hits=4), ["--same-folder-twice"], "is given twice"),
    ],
    ids=[
        "no-folder",
        "empty",
        "not-gzip",
        "no-q_values",
        "latin1",
        "meta-no-task",
        "meta-list",
        "nan",
        "null",
        "twice",
    ],
)
def test_ruler_bad_input_is_one_line(tmp_path, capsys, make, args, message):
    folder = tmp_path / "s1"
    if args != ["--folder-missing"]:
        folder.mkdir()
    make(folder)
    folders = [str(folder)] * (2 if args == ["--same-folder-twice"] else 1)
    extra = [a for a in args if not a.startswith("--folder") and not a.startswith("--same")]
    assert ruler.main([*folders, *extra]) == 2
    assert message in one_error_line(capsys)


def test_ruler_a_nan_score_does_not_pass_the_threshold():
    cells = {("a", "t", "4k"): {"score": 90.0}, ("a", "t", "8k"): {"score": float("nan")}}
    assert ruler.report(cells, ["a"])["effective_length"] == "4K"


@pytest.mark.parametrize(
    "target", ["records", "answers", "meta", "other", "folder", "no-parent", "under-a-file", "read-only"]
)
def test_ruler_out_never_replaces_an_input_and_is_checked_before_the_table(tmp_path, capsys, monkeypatch, target):
    records = write_cell(tmp_path / "s1", "niah_single_1", "4k", hits=4)
    answers = write_jsonl(records.with_name(f"llm_{records.name}"), [{"filter": "none", "answer_acc": 1.0}])
    (tmp_path / "notes.json").write_text('{"mine": 1}')
    out = {
        "records": records,
        "answers": answers,
        "meta": Path(f"{records}.meta.json"),
        "other": tmp_path / "notes.json",
        "folder": tmp_path / "s1",
        "no-parent": tmp_path / "nowhere" / "r.json",
        "under-a-file": records / "r.json",
        "read-only": tmp_path / "r.json",
    }[target]
    if target == "read-only":  # as the tests may run as root, the folder's refusal is injected
        monkeypatch.setattr(ruler, "probe_writable", lambda folder: PermissionError(errno.EACCES, "Permission denied"))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert ruler.main([str(tmp_path / "s1"), "--reader", "llm", "--out", str(out)]) == 2
    err = one_error_line(capsys)
    assert "--out" in err and not capsys.readouterr().out  # refused before the table is printed
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_ruler_out_replaces_an_earlier_report(tmp_path):
    write_cell(tmp_path / "s1", "niah_single_1", "4k", hits=4)
    out = tmp_path / "r.json"
    assert ruler.main([str(tmp_path / "s1"), "--out", str(out)]) == 0
    write_cell(tmp_path / "s1", "niah_single_1", "8k", hits=4)
    assert ruler.main([str(tmp_path / "s1"), "--out", str(out)]) == 0
    assert list(json.loads(out.read_text())["scores"]) == ["4k", "8k"]
