"""The retriever tool's worked example (docs/RETRIEVER_TOOL.md): its shipped text and questions are what the builder makes."""

from __future__ import annotations

import json

from rl.tool.retriever import split_text
from tests.conftest import ROOT, load_script


def test_shipped_example_is_rebuilt_exactly() -> None:
    text, questions = load_script("make_retrieve_example", "examples").build(seed=0)
    folder = ROOT / "data" / "examples"
    assert (folder / "persuasion_ch1_qa1.txt").read_text(encoding="utf-8") == text
    shipped = [json.loads(x) for x in (folder / "persuasion_ch1_qa1.questions.jsonl").read_text().splitlines()]
    assert shipped == questions
    chunks, _ = split_text(text)
    # every planted fact is a chunk of its own, and every answer's fact is among them
    assert all(q["supporting"] in chunks for q in questions)
    assert sum(c.startswith(("John ", "Mary ", "Sandra ", "Daniel ")) and c.count(" ") <= 5 for c in chunks) == 10
