"""Answer/retrieval metrics against hand-computed cases (docs/EVALUATION.md, docs/SCORING.md); the official
benchmark rules are pinned in test_scoring_official.py."""

import pytest

from prompts_and_metrics.metrics import (
    TASK_LABELS,
    babilong_em,
    babilong_f1,
    fact_metrics,
    normalize_answer,
    qa_scores,
    squad_em,
    squad_f1,
    task_key,
)


def test_fact_metrics():
    m = fact_metrics([3, 1, 7], [1, 7])
    assert m["em"] == 1.0 and m["recall"] == 1.0
    assert m["precision"] == pytest.approx(2 / 3) and m["f1"] == pytest.approx(0.8)
    m = fact_metrics([3], [1, 7])
    assert m == {"em": 0.0, "precision": 0.0, "recall": 0.0, "f1": 0.0}
    assert fact_metrics([], [])["em"] == 1.0 and fact_metrics([], [])["f1"] == 1.0
    assert fact_metrics([1], [1, 2])["f1"] == pytest.approx(2 * 1 * 0.5 / 1.5)


def test_task_key_long_short_and_niah():
    assert task_key("qa1") == "qa1"
    assert task_key("qa3_three-supporting-facts") == "qa3"
    assert task_key("qa20_agents-motivations") == "qa20"
    assert task_key("niah") == "niah" and task_key("niah_single_2") == "niah"
    assert task_key("mv_niah") == "niahmv" and task_key("niahmv") == "niahmv"
    with pytest.raises(ValueError):
        task_key("qa21")


def test_label_sets():
    assert all(f"qa{i}" in TASK_LABELS for i in range(1, 21))


def test_babilong_em_ref_rule():
    assert babilong_em("The most recent location of Mary is kitchen.", "kitchen") == 1.0
    assert babilong_em(" kitchen. ", "kitchen") == 1.0
    assert babilong_em("Kitchen", "kitchen") == 0.0  # case-sensitive, kept as in the ref
    assert babilong_em("kitchen is where Mary is", "kitchen") == 0.0  # last token only
    assert babilong_em("He carries football,apple", "apple,football") == 1.0  # set comparison
    assert babilong_em("", "kitchen") == 0.0


def test_babilong_f1_ref_substring_rule():
    # qa7 labels {none, one, three, two}: 'none' contains 'one', so gold 'none' -> {none, one};
    # prediction 'one' -> {one}: P = 1, R = 1/2, F1 = 2/3.
    assert babilong_f1("one", "none", "qa7") == pytest.approx(2 / 3)
    assert babilong_f1("none", "none", "qa7") == 1.0
    # qa10 {maybe, no, yes}: 'no' inside 'none' counts.
    assert babilong_f1("none", "no", "qa10") == 1.0
    assert babilong_f1("nothing here", "no", "qa6") == 1.0
    assert babilong_f1("I do not know", "kitchen", "qa1") == 0.0  # no label in the output
    assert babilong_f1("kitchen garden", "kitchen", "qa1") == pytest.approx(2 / 3)
    assert babilong_f1("KITCHEN", "kitchen", "qa1_single-supporting-fact") == 1.0  # long task name


def test_squad_normalisation():
    assert normalize_answer("  The  Eiffel-Tower!! ") == "eiffeltower"
    assert normalize_answer("an apple and a pear") == "apple and pear"
    assert normalize_answer("Theory") == "theory"  # articles only as whole words
    assert squad_em("the Beatles.", "Beatles") == 1.0


def test_squad_f1_and_aliases():
    assert squad_f1("Barack Obama", "Obama") == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert squad_f1("blue red", "red blue") == 1.0
    assert squad_f1("a a b", "a b b") == pytest.approx(2 / 3)  # multiset overlap
    s = qa_scores("NYC", "New York City", ["NYC", "the Big Apple"])
    assert s == {"EM": 1.0, "F1": 1.0}
    s = qa_scores("NYC", "New York City", ["NYC"], ignore_aliases=True)
    assert s == {"EM": 0.0, "F1": 0.0}


def test_empty_conventions_both_ways():
    # SQuAD: 1 iff both empty
    assert squad_f1("", "") == 1.0
    assert squad_f1("the", "") == 1.0  # both normalise to empty
    assert squad_f1("", "Paris") == 0.0 and squad_f1("Paris", "") == 0.0
    # legacy ref: empty gold -> recall 1, empty prediction -> precision 1
    assert squad_f1("Paris", "", legacy_empty=True) == pytest.approx(0.0)  # P=0/1=0, R=1 -> F1=0
    assert squad_f1("", "Paris", legacy_empty=True) == pytest.approx(0.0)  # P=1, R=0
    assert squad_f1("", "", legacy_empty=True) == 1.0
    assert qa_scores("", "", legacy_empty=True)["F1"] == 1.0
