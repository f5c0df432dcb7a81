"""Generate RULER-style NIAH JSONL offline (envs/data/niah_generator.py).

    # the shipped set (data/niah/mv_niah_4k/niah_multivalue):
    python scripts/generate_niah.py --task niah_multivalue --out data/niah/mv_niah_4k/niah_multivalue \
        --train 200:4096 --test 50:4096,20:16384 --tokenizer minilm --gzip
    # Table 1's training set: the eight subtasks mixed in one file at 4K GPT-2 tokens (docs/DATA_OTHER.md):
    python scripts/generate_niah.py --task all --out data/niah/ruler_gpt2/mix8_4k --train 250:4096 \
        --test 25:4096 --tokenizer gpt2 --gzip
    # a 128K / 1M test file of another task, lengths in the reader's tokens (as RULER counts):
    python scripts/generate_niah.py --task niah_single_2 --out ../RULER/niah_single_2 \
        --test 100:131072,20:1048576 --tokenizer Qwen/Qwen3-4B

``--task`` takes one task, a comma-separated list or ``all``: several tasks are generated
``N`` samples each and mixed in one file (records in turn, each with its ``task``;
envs/data/niah_generator.py ``mix``). Train files are ``train.jsonl``; test files
``test{4k,16k,128k,1m}.jsonl`` (from the length).
A length N holds the input and RULER's 128-token answer budget. Haystack sentences: the noise
corpus (``--corpus``; default the project's data/babilong/pg19-with-sentences/{train,test}.jsonl.gz:
train books for train, test books for test files), or any .txt file.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from envs.data.niah_generator import (
    TASKS,
    generate,
    hf_token_counter,
    length_name,
    mix,
    read_corpus,
    whitespace_counter,
    write_jsonl,
)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO / "data" / "babilong" / "pg19-with-sentences"


def _pairs(spec: str | None) -> list[tuple[int, int]]:
    """'100:4096,10:16384' -> [(100, 4096), (10, 16384)]."""
    if not spec:
        return []
    out = []
    for item in spec.split(","):
        n, _, tokens = item.partition(":")
        out.append((int(n), int(tokens)))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--task",
        default="niah_multivalue",
        help=f"one task, a comma-separated list (mixed in one file) or 'all'; tasks: {', '.join(sorted(TASKS))}",
    )
    ap.add_argument("--out", required=True, help="output folder (RULER layout: <root>/<set>/<task>)")
    ap.add_argument("--train", default=None, help="N:TOKENS for train.jsonl, e.g. 200:4096")
    ap.add_argument("--test", default=None, help="N:TOKENS[,N:TOKENS...] for test<len>.jsonl files")
    ap.add_argument("--validation", default=None, help="N:TOKENS for validation.jsonl")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", default=None, help="noise corpus (.jsonl[.gz] / save_to_disk folder / .txt)")
    ap.add_argument(
        "--tokenizer",
        default="minilm",
        help="the reader's tokenizer, which counts the length (RULER counts with the evaluated model's): "
        "a HF name or folder, 'gpt2' (shipped), 'minilm' (offline MiniLM, default) or 'whitespace' (words)",
    )
    ap.add_argument(
        "--haystack-start",
        default="fixed",
        choices=("fixed", "random"),
        help="essay haystack start: fixed = the corpus's first sentence for every sample (RULER), "
        "random = a random sentence per sample",
    )
    ap.add_argument("--gzip", action="store_true", help="write .jsonl.gz (the NIAH loader reads both)")
    args = ap.parse_args(argv)
    tasks = list(TASKS) if args.task == "all" else args.task.split(",")
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        ap.error(f"unknown task(s) {', '.join(unknown)}; known: {', '.join(sorted(TASKS))}")

    counter = whitespace_counter if args.tokenizer == "whitespace" else hf_token_counter(args.tokenizer)
    corpora: dict[str, list[list[str]] | None] = {}

    def corpus_for(task: str, kind: str) -> list[list[str]] | None:
        if TASKS[task].haystack != "essay":
            return None
        if kind not in corpora:
            path = (
                Path(args.corpus)
                if args.corpus
                else DEFAULT_CORPUS / f"{'train' if kind == 'train' else 'test'}.jsonl.gz"
            )
            corpora[kind] = read_corpus(path)
        return corpora[kind]

    jobs = [("train", n, t, "train") for n, t in _pairs(args.train)]
    jobs += [("validation", n, t, "train") for n, t in _pairs(args.validation)]
    jobs += [(f"test{length_name(t)}", n, t, "test") for n, t in _pairs(args.test)]
    if not jobs:
        ap.error("nothing to generate: give --train, --validation and/or --test")
    for name, n, tokens, kind in jobs:
        t0 = time.time()
        per_task = {
            task: generate(task, n, tokens, args.seed, name, counter, corpus_for(task, kind), args.haystack_start)
            for task in tasks
        }
        records = per_task[tasks[0]] if len(tasks) == 1 else mix(per_task)
        path = write_jsonl(records, Path(args.out) / f"{name}.jsonl{'.gz' if args.gzip else ''}")
        print(f"{path}: {len(records)} samples, ~{tokens} tokens ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()
