"""Prompt structure (DESIGN §9.4, §9.5)."""

import pytest

from prompts_and_metrics.prompts import (
    SYSTEM_BABILONG,
    TASK_PROMPTS,
    babilong_messages,
    babilong_user_message,
    extract_final_answer,
    openqa_messages,
)

N_EXAMPLES = {
    **{f"qa{i}": 3 for i in range(1, 21)},
    "qa1": 2,
    "qa2": 2,
    "qa3": 2,
    "qa6": 2,
    "qa9": 2,
    "niah": 1,
    "niahmv": 1,
}


@pytest.mark.parametrize("task", sorted(N_EXAMPLES))
def test_every_task_has_pieces(task):
    p = TASK_PROMPTS[task]
    assert len(p.examples) == N_EXAMPLES[task]
    assert p.instruction and p.post_prompt
    for ex in p.examples:
        assert "Question:" in ex and "Answer:" in ex


def test_babilong_layout():
    msgs = babilong_messages("qa1_single-supporting-fact", "A went to the garden.", "Where is A? ")
    assert msgs[0] == {"role": "system", "content": SYSTEM_BABILONG}
    user = msgs[1]["content"]
    p = TASK_PROMPTS["qa1"]
    assert user.startswith(p.instruction + "\nExample:\n")
    assert f"\n{p.post_prompt}\nContext: A went to the garden.\n\nQuestion: Where is A?" in user
    assert user.endswith("Question: Where is A?")  # stripped, no extra '?'
    assert user.count("Example:") == 2
    legacy = babilong_user_message("qa1", "ctx", "Where is A? ", extra_question_mark=True)
    assert legacy.endswith("Where is A? ?")


def test_openqa_layout_and_extraction():
    msgs = openqa_messages(["p one", "p two"], "Who?")
    assert "Final answer: " in msgs[0]["content"]
    u = msgs[1]["content"]
    assert u.startswith("GIVEN PASSAGES:\np one\n\np two\n---\n\nQUESTION:\nWho?")
    assert u.endswith("Final answer: ")
    assert extract_final_answer("think... Final answer: x\nFinal answer:  Paris ") == "Paris"
    assert extract_final_answer(" just Paris ") == "just Paris"
