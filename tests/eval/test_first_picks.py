"""scripts/first_picks.py on real evaluation records (tests/fixtures/other/first_picks: qa3_sparse's ctrl seed 1,
four 1K questions whose first picks are a gold drop, a pick-up that is not gold, a gold pick-up and a drop that
is not gold, and two 32K ones; sp25 seed 4's first four 1K questions, each picked up first and none gold)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, load_script

FIXTURE = ROOT / "tests" / "fixtures" / "other" / "first_picks"


@pytest.fixture(scope="module")
def fp():
    return load_script("first_picks")


def test_shares_per_run_and_length(fp):
    rows = {(r["run"], r["length"]): r for r in fp.collect([FIXTURE], ["1K", "32K"], None, 42)}
    assert rows.keys() == {("w1_ctrl_s1", "1K"), ("w1_ctrl_s1", "32K"), ("w1_sp25_s4", "1K")}
    got = {k: (r["questions"], r["take_first"], r["gold_first"], r["take_first_gold"]) for k, r in rows.items()}
    assert got[("w1_ctrl_s1", "1K")] == (4, 50.0, 50.0, 25.0)
    assert got[("w1_ctrl_s1", "32K")] == (2, 0.0, 100.0, 0.0)
    assert got[("w1_sp25_s4", "1K")] == (4, 100.0, 0.0, 0.0)


def test_take_facts_are_the_pick_ups():
    take = load_script("first_picks").TAKE
    for s in (
        "John grabbed the apple.",
        "Mary picked up the milk there.",
        "Sandra got the football.",
        "Daniel took the apple there.",
    ):
        assert take.match(s), s
    for s in (
        "John discarded the apple there.",
        "Mary put down the milk.",
        "John went to the office.",
        "He took the book.",
    ):
        assert not take.match(s), s


def test_flag_settings_and_files(fp, tmp_path, capsys):
    """Marked at take first >= --flag at 1K (ctrl's 50 % sits on the default); --settings reads some runs;
    --out writes the table and the JSON."""
    fp.main([str(FIXTURE), "--flag", "60", "--out", str(tmp_path / "fp")])
    out = capsys.readouterr().out
    assert "| w1_sp25_s4 | 1K | 4 | 100.0 | 0.0 | 0.0 | take-first |" in out
    assert "take-first runs: 1 of 2 (w1_sp25_s4)" in out
    rep = json.loads((tmp_path / "fp.json").read_text())
    assert rep["take_first_runs"] == ["w1_sp25_s4"] and (tmp_path / "fp.md").read_text() == out
    rows = fp.main([str(FIXTURE), "--settings", "ctrl", "--lengths", "1K"])
    assert [r["run"] for r in rows] == ["w1_ctrl_s1"] and "(w1_ctrl_s1)" in capsys.readouterr().out
