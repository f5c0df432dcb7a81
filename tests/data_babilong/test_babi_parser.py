"""bAbI v1.2 parser (DESIGN §7.1) on hand-written files in the real format."""

from __future__ import annotations

import pytest

from envs.data.babi import TASKS, load_babi_file, parse_babi_lines, short_key, task_by_key
from envs.errors import DatasetFormatError, DatasetNotFoundError

from .conftest import EMBEDDED, FIXTURES


def test_task_names_and_short_keys():
    assert len(TASKS) == 20 and len(set(TASKS)) == 20
    assert short_key("qa3_three-supporting-facts") == "qa3"
    assert [short_key(t) for t in TASKS] == [f"qa{i}" for i in range(1, 21)]
    assert task_by_key("qa19") == "qa19_path-finding"
    assert task_by_key("qa2_two-supporting-facts") == "qa2_two-supporting-facts"
    with pytest.raises(KeyError):
        task_by_key("qa21")


def test_multi_question_stories_explode():
    s = load_babi_file(FIXTURES / "qa1_single-supporting-fact_test.txt")
    assert len(s) == 5  # every question reachable, the last included
    assert s[0].facts == ["Mary moved to the bathroom.", "John went to the hallway."]
    assert s[0].question == "Where is Mary? " and s[0].answer == "bathroom"
    assert s[0].references_idx == [0]
    # the second question sees all four statements of its story, no question lines
    assert len(s[1].facts) == 4 and all("?" not in f for f in s[1].facts)
    assert s[1].facts[s[1].references_idx[0]] == "Daniel went back to the hallway."
    assert len(s[2].facts) == 6
    # a new story starts at line number 1
    assert s[3].story == 1 and s[3].facts == ["Sandra travelled to the office.", "Mary went to the kitchen."]
    assert s[4].facts[s[4].references_idx[0]] == "Sandra journeyed to the garden."
    assert [x.line_no for x in s] == [3, 6, 9, 12, 15]


def test_references_are_ascending_positions():
    s = load_babi_file(FIXTURES / "qa2_two-supporting-facts_test.txt")
    assert len(s) == 4
    assert s[0].supporting_lines == [5, 3]
    assert s[0].references_idx == [2, 4]
    assert [s[0].facts[i] for i in s[0].references_idx] == [
        "Mary got the football there.",
        "Mary went back to the kitchen.",
    ]
    # line 10 question: 8 statements before it (question line 6 removed); lines 5 and 8 -> 4, 6
    assert len(s[1].facts) == 8 and s[1].references_idx == [4, 6]
    assert s[1].facts[6] == "Mary dropped the football."
    assert s[2].references_idx == [1, 5] and s[2].answer == "bedroom"
    assert s[3].facts == ["Daniel travelled to the office.", "Daniel took the apple there."]


def test_legacy_drop_last_question():
    path = FIXTURES / "qa1_single-supporting-fact_test.txt"
    full, short = load_babi_file(path), load_babi_file(path, drop_last_question=True)
    assert len(short) == len(full) - 1
    assert [x.question for x in short] == [x.question for x in full[:-1]]


@pytest.mark.parametrize(
    "name, line, fragment",
    [
        ("bad_line_id.txt", 3, "numeric line number"),
        ("no_answer.txt", 3, "non-empty question and answer"),
        ("support_is_question.txt", 4, "supporting line 2"),
        ("support_in_future.txt", 4, "supporting line 3"),
        ("support_not_int.txt", 2, "integer supporting"),
    ],
)
def test_malformed_lines_name_file_and_line(name, line, fragment):
    with pytest.raises(DatasetFormatError) as e:
        load_babi_file(FIXTURES / name)
    msg = str(e.value)
    assert f"{name}:{line}:" in msg and fragment in msg
    assert e.value.location == line


@pytest.mark.parametrize("name", ["empty.txt", "no_question.txt"])
def test_files_without_questions(name):
    with pytest.raises(DatasetFormatError, match=f"{name}.*at least one question"):
        load_babi_file(FIXTURES / name)


def test_line_numbers_must_restart_or_increase():
    lines = ["1 Mary moved to the bathroom.\n", "3 John went to the hallway.\n", "2 Sandra left.\n"]
    with pytest.raises(DatasetFormatError, match=r"x.txt:3: line number 2 does not follow 3"):
        parse_babi_lines(lines, "x.txt")
    with pytest.raises(DatasetFormatError, match=r"y.txt:1: .*start at line number 1"):
        parse_babi_lines(["2 Mary moved to the bathroom.\n"], "y.txt")


def test_missing_file_says_what_to_download(tmp_path):
    with pytest.raises(DatasetNotFoundError) as e:
        load_babi_file(tmp_path / "babilong/babi/en-10k/qa1_single-supporting-fact_test.txt")
    msg = str(e.value)
    assert "bAbI v1.2" in msg and "en-10k" in msg and "{task}_{split}.txt" in msg
    assert "paths=embedded" in msg and "build_babi.py" in msg and "paths=generated" in msg


def test_embedded_files_have_all_questions():
    root = EMBEDDED / "babilong/babi/en-10k"
    for task in TASKS[:5]:
        test = load_babi_file(root / f"{task}_test.txt")
        assert len(test) == 1000
        assert all(test[i].facts[j] for i in range(0, 1000, 97) for j in test[i].references_idx)
    assert len(load_babi_file(root / "qa1_single-supporting-fact_train.txt")) == 10_000
