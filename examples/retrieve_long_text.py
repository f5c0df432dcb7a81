"""The retriever tool on a long text (docs/RETRIEVER_TOOL.md, "Long texts"):

    python examples/retrieve_long_text.py runs/<demo run> [--tokens 10000000] [--device cuda]

The text is the shipped PG19 noise sentences (data/babilong/pg19-with-sentences, train and test
books) repeated until it holds at least ``--tokens`` GPT-2 tokens (or the first sentences that do), one chunk per sentence, with the
ten statements of the worked example's bAbI story (examples/make_retrieve_example.py) planted in
story order at seeded places. The four questions of data/examples/ are asked one by one and then as
one batch; each answer is a JSON line with the gold statement's chunk index, the picks and the wall
time (the repetition makes it a speed and scale check, not a benchmark of retrieval quality).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
from make_retrieve_example import story  # noqa: E402

from envs.data.length_tokenizer import LengthTokenizer  # noqa: E402
from rl.tool.retriever import QRAGRetriever  # noqa: E402

NOISE = ROOT / "data/babilong/pg19-with-sentences"
QUESTIONS = ROOT / "data/examples/persuasion_ch1_qa1.questions.jsonl"


def long_text(tokens: int, seed: int = 0) -> tuple[list[str], dict[str, int], int]:
    """Chunks, the chunk index of each planted statement, and the text's GPT-2 token count."""
    sents = []
    for split in ("train", "test"):
        with gzip.open(NOISE / f"{split}.jsonl.gz", "rt", encoding="utf-8") as f:
            for line in f:
                sents += [s.replace("\n", " ").strip() for s in json.loads(line)["sentences"] if s.strip()]
    counter = LengthTokenizer("gpt2")
    counts = np.asarray(counter.count(sents))
    per_pass = int(counts.sum())
    reps = -(-tokens // per_pass)
    chunks = sents * reps if reps > 1 else sents[: int(np.searchsorted(np.cumsum(counts), tokens)) + 1]
    facts = story()
    slots = sorted(np.random.default_rng(seed).choice(len(chunks), size=len(facts), replace=False).tolist())
    for k, (slot, fact) in enumerate(zip(slots, facts)):
        chunks.insert(slot + k, fact)
    gold = {fact: slot + k for k, (slot, fact) in enumerate(zip(slots, facts))}
    return chunks, gold, int(sum(counter.count(chunks)))


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="a run folder (e.g. the demo's)")
    ap.add_argument("--tokens", type=int, default=10_000_000, help="GPT-2 tokens the text holds at least")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    t0 = time.time()
    chunks, gold, n_tokens = long_text(args.tokens)
    print(f"text: {len(chunks)} chunks, {n_tokens} GPT-2 tokens, built in {time.time() - t0:.1f} s", flush=True)
    t0 = time.time()
    retriever = QRAGRetriever.from_run(args.run, device=args.device)
    card = torch.cuda.get_device_name() if torch.cuda.is_available() and args.device != "cpu" else "cpu"
    print(f"loaded in {time.time() - t0:.1f} s on {card}", flush=True)
    questions = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
    for q in questions:
        sync()
        t0 = time.time()
        res = retriever.retrieve(q["question"], chunks, steps=args.steps)
        sync()
        picks = [(p.step, p.index, round(p.q_value, 4), p.chunk) for p in res.picks]
        row = {"question": q["question"], "gold": q["supporting"], "gold_index": gold[q["supporting"]]}
        row |= {"seconds": round(time.time() - t0, 2), "text_tokens": res.text_tokens, "picks": picks}
        print(json.dumps(row), flush=True)
    sync()
    t0 = time.time()
    batch = retriever.retrieve_batch([q["question"] for q in questions], chunks, steps=args.steps)
    sync()
    peak = f"; peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if card != "cpu" else ""
    print(
        f"batch of {len(questions)} questions: {time.time() - t0:.1f} s; first picks "
        f"{[b.picks[0].index for b in batch]}{peak}",
        flush=True,
    )


if __name__ == "__main__":
    main()
