"""Seeded bAbI generator (qa1-qa5): determinism, format, and an independent re-derivation."""

from __future__ import annotations

import gzip
import re

import numpy as np
import pytest

from envs.data.babi import parse_babi_lines
from envs.data.babi_generator import (
    GEN_TASKS,
    PEOPLE,
    PEOPLE_QA5,
    check_babi_lines,
    generate_task,
)

from .conftest import EMBEDDED, FIXTURES

N_SUPPORT = {"qa1": 1, "qa2": 2, "qa3": 3, "qa4": 1, "qa5": 1}


def test_deterministic_per_seed_and_split():
    a = generate_task("qa2", 300, seed=7, split="train")
    assert a == generate_task("qa2", 300, seed=7, split="train")
    assert a != generate_task("qa2", 300, seed=8, split="train")
    assert a != generate_task("qa2", 300, seed=7, split="test")


@pytest.mark.parametrize("task", list(GEN_TASKS))
def test_checker_agrees_over_thousands_of_questions(task):
    for seed in (0, 1):
        lines = generate_task(task, 2000, seed=seed, split="train")
        assert check_babi_lines(task, lines) == 2000
        samples = parse_babi_lines([ln + "\n" for ln in lines])
        assert len(samples) == 2000
        assert all(len(s.references_idx) == N_SUPPORT[task] for s in samples)


@pytest.mark.parametrize("task", list(GEN_TASKS))
def test_vocabulary_and_format(task):
    lines = generate_task(task, 200, seed=3)
    people = set(PEOPLE_QA5 if task == "qa5" else PEOPLE)
    for ln in lines:
        assert re.fullmatch(r"\d+ [A-Z][^\t]*[.?]( \t\w+\t\d+( \d+)*)?", ln), ln
        names = set(re.findall(r"\b[A-Z][a-z]+\b", ln)) - {"The", "Where", "What", "Who"}
        assert names <= people, ln


def test_story_shapes_resemble_en10k():
    qa1 = parse_babi_lines([ln + "\n" for ln in generate_task("qa1", 500, seed=0)])
    assert {len(s.facts) for s in qa1} == {2, 4, 6, 8, 10}  # 5 questions per 15-line story
    qa3 = parse_babi_lines([ln + "\n" for ln in generate_task("qa3", 500, seed=0)])
    lengths = [len(s.facts) for s in qa3]
    assert np.mean(lengths) > 20 and max(lengths) > 60  # long stories, as in en-10k qa3
    qa4 = generate_task("qa4", 10, seed=0)
    assert len(qa4) == 30 and qa4[2].startswith("3 What is")


def test_checker_catches_wrong_answers_and_support():
    lines = generate_task("qa2", 50, seed=0)
    qi = next(i for i, ln in enumerate(lines) if "\t" in ln)
    head, ans, sup = lines[qi].split("\t")
    other = "garden" if ans != "garden" else "kitchen"
    with pytest.raises(AssertionError, match=f"line {qi + 1}"):
        check_babi_lines("qa2", lines[:qi] + [f"{head}\t{other}\t{sup}"] + lines[qi + 1 :])
    with pytest.raises(AssertionError, match="support"):
        check_babi_lines("qa2", lines[:qi] + [f"{head}\t{ans}\t{sup.split()[0]}"] + lines[qi + 1 :])


def test_checker_accepts_hand_written_files():
    for task, name in (("qa1", "qa1_single-supporting-fact_test.txt"), ("qa2", "qa2_two-supporting-facts_test.txt")):
        lines = (FIXTURES / name).read_text().splitlines()
        assert check_babi_lines(task, lines) == len(parse_babi_lines(lines))


def test_shipped_generated_test_files_are_reproducible():
    root = EMBEDDED / "babilong/babi-generated-v2/en-10k"
    for key, task in GEN_TASKS.items():
        if key != "qa3":  # qa1, qa2, qa4, qa5 follow with their rewrite
            continue
        text = gzip.decompress((root / f"{task}_test.txt.gz").read_bytes()).decode()
        assert text == "".join(ln + "\n" for ln in generate_task(key, 1000, seed=0, split="test"))
