"""The generator stays within its stated tolerances of the real bAbI v1.2 files.

Statistics and tolerances: envs/data/babi_stats.py (STATS); the full-size table is
experiments/babi_fidelity/babi_fidelity.md (experiments/babi_fidelity/babi_fidelity.py). The real files are the shipped ones
under data/babilong/babi/en-10k.
"""

from __future__ import annotations

from functools import cache

import pytest

import envs.data.babi_generator as gen
from envs.data.babi_stats import compare, first_questions, read_lines, story_stats

from .conftest import EMBEDDED

REAL = EMBEDDED / "babilong/babi/en-10k"
N = 2000  # questions per side: big enough for the tolerances, a few seconds per task


@cache
def _real_stats(task: str):
    lines = first_questions(read_lines(REAL / f"{gen.GEN_TASKS[task]}_train.txt.gz"), N)
    return story_stats(task, lines, f"real {task}")


def _out_of_tolerance(task: str, real, seed: int = 0) -> list[str]:
    rows = compare(task, real, story_stats(task, gen.generate_task(task, N, seed, "train"), "generated"))
    return [f"{r.name}: real {r.real:.3f}, generated {r.generated:.3f}, tolerance {r.tol}" for r in rows if not r.ok]


@pytest.mark.parametrize("task", list(gen.GEN_TASKS))
def test_generated_statistics_stay_within_tolerance_of_the_real_files(task):
    bad = _out_of_tolerance(task, _real_stats(task))
    assert not bad, "out of tolerance:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    ("task", "constant", "value", "caught"),
    [
        ("qa2", "THERE_DROP", 0.0, "drops ending in 'there'"),
        ("qa3", "WINDOW", 9, "latest gold fact at most 5 back"),
        ("qa4", "MIDDLE_SECOND", 1.0, "the question names the middle room"),
        ("qa5", "ACTIONS", {"move": 1.0, "get drop": 0.6, "give": 0.3}, "give statements"),
    ],
)
def test_a_generator_off_the_real_rules_is_caught(monkeypatch, task, constant, value, caught):
    if constant == "ACTIONS":  # one task's action weights
        value = {**gen.ACTIONS, task: value}
    monkeypatch.setattr(gen, constant, value)
    bad = _out_of_tolerance(task, _real_stats(task))
    assert any(caught in b for b in bad), bad


def test_the_fixed_move_event_odds_of_the_earlier_qa3_generator_are_caught(monkeypatch):
    # before round 5, qa3 drew "move" against "any possible pick-up or drop" at fixed odds 63 : 37;
    # it passed every other statistic, but held all three objects at once half as often as the real
    # files and let events of different people follow each other less often
    monkeypatch.setattr(gen, "KIND_WEIGHTS", {})
    monkeypatch.setattr(gen, "ACTIONS", {**gen.ACTIONS, "qa3": {"move": 0.63, "get drop": 0.37}})
    bad = _out_of_tolerance("qa3", _real_stats("qa3"))
    assert any("all three objects are held" in b for b in bad), bad
    assert any("followed by someone else's" in b for b in bad), bad


def test_an_unknown_statement_names_its_file_and_line():
    with pytest.raises(ValueError, match=r"^f\.txt:2: unknown statement 'Mary flew away\.'$"):
        story_stats("qa1", ["1 Mary went to the kitchen.", "2 Mary flew away."], "f.txt")
