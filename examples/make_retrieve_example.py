"""Build the worked example of the retriever tool (docs/RETRIEVER_TOOL.md, "Worked example").

Text: chapter 1 of Jane Austen's *Persuasion* (1818, public domain), its 74 sentences as the shipped
noise corpus holds them (data/babilong/pg19-with-sentences/test.jsonl.gz: a held-out book, never
seen in training), joined with spaces into one paragraph. Planted in it, in story order at seeded
random places as BabiLong plants them: the ten statements of the first story of the real bAbI qa1
test file (data/babilong/babi/, CC BY 3.0). Questions: "Where is X?" for each person of the story,
answered by that person's latest move (bAbI qa1's rule), with that move as the supporting fact.

    python examples/make_retrieve_example.py      # -> data/examples/persuasion_ch1_qa1.{txt,questions.jsonl}

The output depends on nothing but the shipped files and the seed; a test rebuilds and compares it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the project's bAbI parser and sentence splitter
CORPUS = REPO / "data" / "babilong" / "pg19-with-sentences" / "test.jsonl.gz"
BABI = REPO / "data" / "babilong" / "babi" / "en-10k" / "qa1_single-supporting-fact_test.txt.gz"
OUT = REPO / "data" / "examples"
BOOK = "Jane Austen: persuasion"
CHAPTER = slice(4, 78)  # after the title lines; chapter 2 opens with "Mr Shepherd, a civil, cautious lawyer"
MOVE = re.compile(r"^(\w+) (?:\w+ )+to the (\w+)\.$")


def chapter() -> list[str]:
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        for line in f:
            book = json.loads(line)
            if book["title"] == BOOK:
                return book["sentences"][CHAPTER]
    raise SystemExit(f"{CORPUS}: no book titled {BOOK!r}")


def story() -> list[str]:
    """The statements of the first story of the qa1 test file (those before its last question)."""
    from envs.data.babi import load_babi_file

    first = [s for s in load_babi_file(BABI) if s.story == 0]
    return first[-1].facts


def build(seed: int) -> tuple[str, list[dict]]:
    text, facts = chapter(), story()
    from envs.data.splitter import split_sentences

    # a fact goes where the sentence splitter cuts (after "...opened:" it would be glued on)
    clean = [i for i in range(len(text) + 1) if i == 0 or split_sentences(text[i - 1] + " Next.")[-1] == "Next."]
    rng = np.random.default_rng(seed)
    slots = sorted(rng.choice(clean, size=len(facts), replace=False).tolist())
    merged: list[str] = []
    k = 0
    for i in range(len(text) + 1):
        while k < len(facts) and slots[k] == i:
            merged.append(facts[k])
            k += 1
        if i < len(text):
            merged.append(text[i])
    latest: dict[str, tuple[str, str]] = {}  # person -> (room, the statement)
    for fact in facts:
        m = MOVE.match(fact)
        if m is None:
            raise SystemExit(f"not a qa1 move: {fact!r}")
        latest[m.group(1)] = (m.group(2), fact)
    questions = [
        {"question": f"Where is {who}?", "answer": room, "supporting": fact} for who, (room, fact) in latest.items()
    ]
    return " ".join(merged) + "\n", questions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    text, questions = build(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "persuasion_ch1_qa1.txt").write_text(text, encoding="utf-8")
    lines = "".join(json.dumps(q) + "\n" for q in questions)
    (args.out / "persuasion_ch1_qa1.questions.jsonl").write_text(lines, encoding="utf-8")
    print(f"{args.out}: {len(text)} characters, {len(questions)} questions")


if __name__ == "__main__":
    main()
