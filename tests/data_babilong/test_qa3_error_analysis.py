"""experiments/round5/qa3_error_analysis.py: the roles it gives to the picks of a qa3 retriever."""

from __future__ import annotations

from envs.data.babi import parse_babi_lines
from tests.conftest import load_script

STORY = [
    "1 Sandra went to the garden.",
    "2 Sandra got the milk.",
    "3 Sandra went to the kitchen.",
    "4 Sandra dropped the milk.",
    "5 Mary went to the kitchen.",
    "6 Mary took the milk.",
    "7 Mary moved to the office.",
    "8 Daniel went to the bedroom.",
    "9 Mary travelled to the hallway.",
    "10 Mary got the apple.",
    "11 Where was the milk before the hallway? \toffice\t6 9 7",
]


def test_roles_decoys_and_the_drop_before_a_gold_pick_up():
    script = load_script("qa3_error_analysis", "experiments/round5")
    (sample,) = parse_babi_lines([ln + "\n" for ln in STORY])
    assert script.roles(sample) == (5, 8, 6)  # pick-up, move into the hallway, move before it
    names = {j: script.decoy(sample, j) for j in (0, 2, 3, 4, 7, 9)}
    assert names == {
        0: "another person's move",
        2: "another person's move",
        3: "earlier drop of the object",
        4: "carrier's move before m1",
        7: "another person's move",
        9: "event of another object",
    }
    assert script.decoy(sample, None) == "noise sentence"
    assert script.hard(sample) == 2  # the pick-up comes 2 statements after Sandra's drop
