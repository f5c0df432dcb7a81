"""Each benchmark's official scoring rule, pinned with worked cases written from the official
definitions (docs/SCORING.md): BabiLong compare_answers, RULER string_match_all / part, the
HotpotQA / 2Wiki yes/no/noanswer F1, and the reasoning-block strip."""

from pathlib import Path

import pytest

from envs.data.babi import load_babi_file
from prompts_and_metrics.metrics import (
    TASK_LABELS,
    babilong_acc,
    babilong_acc_fixed,
    babilong_f1,
    hotpot_f1,
    niah_metrics,
    niah_values,
    qa_scores,
    ruler_postprocess,
    squad_em,
    squad_f1,
    string_match_all,
    string_match_part,
    synthetic_scores,
)
from prompts_and_metrics.prompts import extract_final_answer, strip_think

from .conftest import load_script

metric_names = load_script("eval_llm_synthetics").metric_names

ROOT = Path(__file__).resolve().parents[2]
WHERE = "Where is Mary?"


# ---------------------------------------------------------------- BabiLong (booydar/babilong)


def test_official_cuts_at_first_period_not_newline():
    # the text after the first '.' is ignored, a newline is not a cut
    assert babilong_acc("The most recent location of Mary is kitchen. Before: garden", "kitchen", WHERE, "qa1") == 1.0
    assert babilong_acc("kitchen\ngarden", "kitchen", WHERE, "qa1") == 0.0
    assert babilong_acc("kitchen\ngarden.", "kitchen", WHERE, "qa1") == 0.0
    assert babilong_acc("Kitchen", "kitchen", WHERE, "qa1") == 1.0  # lower-cased
    assert babilong_acc("", "kitchen", WHERE, "qa1") == 0.0


def test_official_keeps_echoed_question_lines():
    # the official split on 'Question' comes after lower-casing and never fires: an echoed
    # question stays in the text and its labels count
    out = "garden\nQuestion: Is it the kitchen? Answer: kitchen"
    assert babilong_acc(out, "garden", WHERE, "qa1") == 0.0
    # echoed <context> / <example> blocks are cut
    assert babilong_acc("garden <context> kitchen", "garden", WHERE, "qa1") == 1.0
    assert babilong_acc("garden <example> kitchen", "garden", WHERE, "qa1") == 1.0


def test_official_labels_of_the_question_are_dropped():
    q = "Where was the apple before the office?"
    assert babilong_acc("Before the office the apple was in the hallway.", "hallway", q, "qa3") == 1.0
    # qa5: both names of the question drop out, the remaining one is the answer
    assert babilong_acc("Fred gave the football to Jeff.", "Jeff", "Who did Fred give the football to?", "qa5") == 1.0
    # two remaining labels -> wrong
    assert babilong_acc("kitchen or garden", "kitchen", WHERE, "qa1") == 0.0


def test_official_multi_object_targets_qa8():
    q = "What is Mary carrying?"
    assert babilong_acc("apple, football", "apple,football", q, "qa8") == 1.0
    assert babilong_acc("football and apple", "apple,football", q, "qa8") == 1.0  # order free
    assert babilong_acc("apple", "apple,football", q, "qa8") == 0.0
    assert babilong_acc("apple, football, milk", "apple,football", q, "qa8") == 0.0
    assert babilong_acc("nothing", "nothing", q, "qa8") == 1.0


def test_qa7_official_quirk_and_fixed_variant():
    q = "How many objects is Daniel carrying?"
    # 'one' is a substring of 'none': the official rule finds {none, one} and never credits none
    assert babilong_acc("none", "none", q, "qa7") == 0.0
    assert babilong_acc_fixed("none", "none", q, "qa7") == 1.0
    for n in ("one", "two", "three"):
        assert babilong_acc(n, n, q, "qa7") == 1.0 and babilong_acc_fixed(n, n, q, "qa7") == 1.0
    assert synthetic_scores("none", "none", q, "qa7")["acc"] == 0.0
    assert synthetic_scores("none", "none", q, "qa7")["acc_fixed"] == 1.0


def test_fixed_variant_reads_whole_words_only():
    # official: 'no' inside 'know' is an answer 'no'; the fixed variant finds no label
    q = "Is Mary in the garden?"
    assert babilong_acc("I don't know", "no", q, "qa6") == 1.0
    assert babilong_acc_fixed("I don't know", "no", q, "qa6") == 0.0
    assert babilong_acc_fixed("No", "no", q, "qa6") == 1.0


def test_qa19_official_labels():
    assert sorted(TASK_LABELS["qa19"]) == [
        "e,e",
        "e,n",
        "e,s",
        "n,e",
        "n,n",
        "n,w",
        "s,e",
        "s,s",
        "s,w",
        "w,n",
        "w,s",
        "w,w",
    ]
    q = "How do you go from the kitchen to the garden?"
    for label in TASK_LABELS["qa19"]:  # a perfect reader scores 1 on every possible answer
        assert babilong_acc(label, label, q, "qa19") == 1.0
        assert babilong_f1(label, label, "qa19") == 1.0
    # the official rule matches the label as written: "n, n" holds no label
    assert babilong_acc("n, n", "n,n", q, "qa19") == 0.0
    assert babilong_acc("s,w", "n,e", q, "qa19") == 0.0


def test_label_f1_gives_nothing_to_an_output_without_labels():
    assert babilong_f1("I cannot tell", "n,n", "qa19") == 0.0
    assert babilong_f1("", "kitchen", "qa1") == 0.0
    assert babilong_f1("kitchen", "kitchen", "qa1") == 1.0
    # neither side names a label (the first qa19 list lacked n,n, so its gold had none): the
    # reference scored 1.0 here, the fixed rule 0
    assert babilong_f1("I cannot tell", "somewhere", "qa1") == 0.0


@pytest.mark.parametrize("task", ["qa1", "qa2", "qa3", "qa4", "qa5"])
def test_perfect_reader_scores_one_on_real_babi(task):
    """Every answer of the real bAbI test files is a label the official rule credits."""
    files = sorted((ROOT / "data" / "babilong" / "babi" / "en-10k").glob(f"{task}_*_test.txt*"))
    samples = load_babi_file(files[0])
    assert len(samples) == 1000
    assert all(babilong_acc(s.answer, s.answer, s.question, task) == 1.0 for s in samples)


# ---------------------------------------------------------------- RULER (NVIDIA/RULER)


def test_ruler_postprocess_and_string_match():
    assert ruler_postprocess(" \x00 a\tb\n") == "a\nb"
    assert string_match_all("The numbers are 1. 4417\n2. 90213", ["4417", "90213", "123"]) == pytest.approx(2 / 3)
    assert string_match_all("ABC-def", ["abc-DEF"]) == 1.0  # case-insensitive substring
    assert string_match_part("Paris, France", ["Lyon", "paris"]) == 1.0
    assert string_match_part("Marseille", ["Lyon", "Paris"]) == 0.0


def test_niah_numbered_lists_and_restated_keys():
    # numbered list: the enumerators are not values
    m = niah_metrics("1. 4417\n2. 90213", "4417,90213")
    assert m == {"string_match_all": 1.0, "f1": 1.0}
    # multikey_3: keys are uuids too; restating the question's key is not a wrong value
    key, val = "11111111-2222-3333-4444-555555555555", "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
    q = f"What is the special magic uuid for {key} mentioned in the provided text?"
    out = f"The special magic uuid for {key} mentioned in the provided text is {val}."
    assert niah_values(out, q) == {val}
    assert niah_metrics(out, val, q) == {"string_match_all": 1.0, "f1": 1.0}
    s = synthetic_scores(out, val, q, "niah")
    assert set(s) == {"string_match_all", "em", "f1"} and s["string_match_all"] == 1.0
    # half the values: recall 1/2, precision 1 -> F1 2/3
    assert niah_metrics("4417", "4417,90213")["f1"] == pytest.approx(2 / 3)
    assert niah_metrics("4417", "4417,90213")["string_match_all"] == 0.5


def test_headline_metric_comes_first_in_the_synthetics_summary():
    # RULER's string_match_all heads the NIAH summary, the official accuracy the bAbI one
    assert metric_names("niah")[0] == metric_names("niahmv")[0] == "string_match_all"
    assert metric_names("qa7")[:2] == ("acc", "acc_fixed")


# ---------------------------------------------------------------- HotpotQA / 2Wiki / MuSiQue / RULER QA


def test_hotpot_yes_no_noanswer_rule():
    assert squad_f1("The answer is yes.", "yes") == pytest.approx(0.5)  # plain token F1
    assert hotpot_f1("The answer is yes.", "yes") == 0.0
    assert hotpot_f1("yes", "The answer is yes") == 0.0  # the rule applies to either side
    assert hotpot_f1("Yes.", "yes") == 1.0
    assert hotpot_f1("noanswer", "no") == 0.0
    assert hotpot_f1("Barack Obama", "Obama") == pytest.approx(2 / 3)
    assert hotpot_f1("", "") == 0.0 and squad_em("", "") == 1.0  # official: no overlap -> F1 0


def test_qa_scores_per_benchmark():
    s = qa_scores("The answer is yes.", "yes", benchmark="hotpotqa")
    assert s == {"EM": 0.0, "F1": 0.0, "F1_plain": pytest.approx(0.5)}
    # 2Wiki: maximum over the answer and its aliases, each with the official rule
    s = qa_scores("USA", "United States", ["USA", "American"], benchmark="2WikiMultihopQA")
    assert s["EM"] == 1.0 and s["F1"] == 1.0
    # 2Wiki's v1.1 script repeats HotpotQA's answer F1, yes/no/noanswer rule included
    s = qa_scores("The answer is yes.", "yes", benchmark="2WikiMultihopQA")
    assert s == {"EM": 0.0, "F1": 0.0, "F1_plain": pytest.approx(0.5)}
    assert qa_scores("The answer is yes.", "yes", benchmark="musique")["F1"] == pytest.approx(0.5)
    s = qa_scores("It is Paris, France", "Paris", ["Paris, France"], benchmark="ruler_qa")
    assert s["string_match_part"] == 1.0 and s["EM"] == 0.0
    with pytest.raises(ValueError, match="unknown QA benchmark"):
        qa_scores("a", "a", benchmark="nq")


# ---------------------------------------------------------------- reasoning blocks


def test_strip_think():
    assert strip_think("<think>kitchen? no, garden</think>\n\ngarden") == "\n\ngarden"
    assert strip_think("the template opened it</think>garden") == "garden"  # QwQ: only the closing tag
    assert strip_think("<think>cut off while reasoning about the kitchen") == ""
    assert strip_think("garden") == "garden"
    raw = "<think>Final answer: Lyon? No.</think>Paris it is. Final answer: Paris"
    assert extract_final_answer(strip_think(raw)) == "Paris"
    # the reasoning's labels do not reach the BabiLong scorer
    assert babilong_acc(strip_think("<think>kitchen</think>garden"), "garden", WHERE, "qa1") == 1.0
