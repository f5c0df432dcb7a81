"""Offline RULER NIAH generator (the real RULER data cannot be downloaded here).

Reimplements NVIDIA/RULER ``scripts/data/synthetic/niah.py`` with its prompt from
``constants.py`` (docs/DATA_OTHER.md lists what is reproduced). Writes JSONL in current RULER's
format: ``index`` (here the sample number; RULER writes the answer's character offset there,
a field the loader never keys on), ``input`` (instruction, haystack with needles, question),
``outputs`` (the values of the queried keys), ``length`` (tokens of ``input`` plus the 128
tokens reserved for the answer, under the counting tokenizer) and ``answer_prefix``.

| task | haystack | keys | values | needles / values per key / queries |
|---|---|---|---|---|
| niah_single_1 | noise blocks | words | numbers | 1 / 1 / 1 |
| niah_single_2 | essay | words | numbers | 1 / 1 / 1 |
| niah_single_3 | essay | words | uuids | 1 / 1 / 1 |
| niah_multikey_1 | essay | words | numbers | 4 / 1 / 1 (3 distractor keys) |
| niah_multikey_2 | other needles | words | numbers | 1 / 1 / 1 |
| niah_multikey_3 | other needles | uuids | uuids | 1 / 1 / 1 |
| niah_multivalue | essay | words | numbers | 1 / 4 / 1 |
| niah_multiquery | essay | words | numbers | 4 / 1 / 4 |

As RULER:

* wording: a task with one answer (queries × values = 1) uses the singular prompt ("A special
  magic number is hidden ...", "What is the special magic number for ...", answer prefix
  "... is"), obtained by RULER's replacements on its plural template; needles stay plural;
* keys: adjective-noun pairs from the ``wonderwords`` package's word lists ("calm-harbor"), drawn
  uniformly from the 910 x 6 786 distinct pairs (RULER draws from the same set), or uuid4s;
  values: 7-digit numbers (10^6 .. 10^7 - 1) or uuid4s;
* essay haystack: consecutive sentences of the corpus from its first sentence, the same start
  for every sample (RULER's Paul Graham essays always start at their first word); needles go
  between sentences at depths drawn without replacement from RULER's 40 depths
  round(linspace(0, 100, 40)), position int(n_sentences * depth / 100);
* noise haystack (single_1): repeats of RULER's five-sentence block, needles inserted between
  whole blocks at distinct random block positions, lines joined by newlines; needle haystack
  (multikey_2/3): distractor needles with random keys and values (never a real key), same
  insertion;
* length: the input fits ``target - 128`` tokens (RULER's ``tokens_to_generate`` for NIAH)
  under the counting tokenizer, which should be the reader's (RULER counts with the tokenizer
  of the model it evaluates).

Not reproduced: Python's ``random`` stream (sample i of (task, split name, target length) uses
``derive_rng(seed, "niah", task, split, length, i)``), RULER's needle shuffle with a fixed seed,
its word-level essay cut (here whole sentences), and its per-task search of one haystack size
(here each sample is fitted: an estimate from per-unit token counts, then exact counts of the
assembled input, shrinking until it fits). ``haystack_start="random"`` starts each sample's
essay at a random corpus sentence instead (the generator's earlier behaviour).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
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

# RULER's NIAH prompt (constants.py 'niah'), base model template, answer prefix appended
TEMPLATE = (
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the {type_needle_v} afterwards.\n{context}\nWhat are all the special magic "
    "{type_needle_v} for {query} mentioned in the provided text?"
)
ANSWER_PREFIX = " The special magic {type_needle_v} for {query} mentioned in the provided text are"
NEEDLE = "One of the special magic {type_needle_v} for {key} is: {value}."
NOISE_BLOCK = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
TOKENS_TO_GENERATE = 128  # RULER's answer budget for NIAH
DEPTHS = [int(d) for d in np.round(np.linspace(0, 100, num=40, endpoint=True)).astype(int)]


def wording(spec: NiahTask) -> tuple[str, str, str]:
    """(template, answer prefix, value type as the prompt names it): RULER turns its plural
    prompt singular when the answer is one value, by plain replacements on the template."""
    full = TEMPLATE + ANSWER_PREFIX
    type_v = spec.value_type
    if spec.num_queries * spec.num_values == 1:
        for old, new in (("Some", "A"), ("are all", "is"), ("are", "is"), ("answers", "answer")):
            full = full.replace(old, new)
        type_v = type_v[:-1]
    cut = full.index("?") + 1  # the template ends with its question mark; the prefix follows
    return full[:cut], full[cut:], type_v


def needle_sentence(key: str, value: str, value_type: str) -> str:
    return NEEDLE.format(type_needle_v=value_type, key=key, value=value)


@lru_cache(maxsize=1)
def key_words() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(adjectives, nouns): the distinct entries of the ``wonderwords`` package's word lists,
    one word a line (RULER reads them through wonderwords' own reader, which strips line ends).
    Read as files: importing wonderwords loads every list through a deprecated API."""
    spec = importlib.util.find_spec("wonderwords")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("RULER's keys need the wonderwords package: pip install wonderwords")
    assets = Path(list(spec.submodule_search_locations)[0]) / "assets"

    def words(name: str) -> tuple[str, ...]:
        lines = (assets / name).read_text(encoding="utf-8").splitlines()
        return tuple(sorted({w.rstrip() for w in lines}))

    return words("adjectivelist.txt"), words("nounlist.txt")


def _random(rng: np.random.Generator, kind: str) -> str:
    if kind == "uuids":
        return str(uuid.UUID(bytes=rng.bytes(16), version=4))
    if kind == "numbers":
        return str(int(rng.integers(1_000_000, 10_000_000)))  # 7 digits
    adjs, nouns = key_words()
    return f"{adjs[int(rng.integers(len(adjs)))]}-{nouns[int(rng.integers(len(nouns)))]}"


def _distinct(rng: np.random.Generator, kind: str, n: int, taken: set[str]) -> list[str]:
    out: list[str] = []
    for _ in range(1000 * max(n, 1)):
        if len(out) == n:
            break
        x = _random(rng, kind)
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


def hf_token_counter(tokenizer: Any = "minilm") -> TokenCounter:
    """Token counter from a HF tokenizer object or a name (envs/data/length_tokenizer.py:
    ``gpt2``, ``minilm``, a HF name or a local folder); counts without special tokens."""
    if isinstance(tokenizer, (str, Path)):
        from envs.data.length_tokenizer import load_hf_tokenizer

        tokenizer = load_hf_tokenizer(str(tokenizer))

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


def insert_at_depths(sentences: list[str], needles: list[str], rng: np.random.Generator) -> str:
    """RULER's essay insertion: depths drawn without replacement from DEPTHS, needle k after
    int(len(sentences) * depth_k / 100) sentences (depths sorted), pieces joined by spaces."""
    depths = rng.choice(DEPTHS, size=len(needles), replace=False)
    cuts = sorted(int(len(sentences) * int(d) / 100) for d in depths)
    pieces: list[str] = []
    last = 0
    for cut, needle in zip(cuts, needles):
        pieces.extend(sentences[last:cut])
        pieces.append(needle)
        last = cut
    pieces.extend(sentences[last:])
    return " ".join(pieces)


def insert_between_units(units: list[str], needles: list[str], rng: np.random.Generator) -> str:
    """RULER's noise/needle insertion: distinct unit positions, needles inserted from the
    largest position down (so each lands before the unit it was drawn for), lines joined by
    newlines. A needle never splits a unit."""
    units = list(units)
    spots = sorted((int(i) for i in rng.choice(len(units), size=len(needles), replace=False)), reverse=True)
    for spot, needle in zip(spots, needles):
        units.insert(spot, needle)
    return "\n".join(units)


def make_sample(
    task: str,
    index: int,
    target_tokens: int,
    rng: np.random.Generator,
    counter: TokenCounter,
    essay: Haystack | None,
    haystack_start: str = "fixed",
) -> dict[str, Any]:
    spec = TASKS[task]
    template, prefix, type_v = wording(spec)
    taken: set[str] = set()
    keys = _distinct(rng, spec.key_type, spec.num_keys, taken)
    values = {k: _distinct(rng, spec.value_type, spec.num_values, taken) for k in keys}
    needles = [needle_sentence(k, v, spec.value_type) for k in keys for v in values[k]]
    needles = [needles[int(i)] for i in rng.permutation(len(needles))]
    queried = [keys[int(i)] for i in rng.choice(spec.num_keys, size=spec.num_queries, replace=False)]
    query = query_text(queried)
    outputs = [v for k in queried for v in values[k]]
    budget = target_tokens - TOKENS_TO_GENERATE  # the input's share; RULER keeps 128 for the answer

    def render(context: str) -> str:
        return template.format(type_needle_v=type_v, context=context, query=query)

    fixed = counter([render("")])[0] + sum(counter(needles))
    place_seed = int(rng.integers(2**63))  # every fitting attempt places the needles with the same draws
    if spec.haystack == "essay":
        if essay is None:
            raise ValueError(f"{task} needs an essay corpus (corpus path)")
        start = 0 if haystack_start == "fixed" else int(rng.integers(len(essay.sentences)))
        units = essay.take(start, budget - fixed)
        if any(v in " ".join(units) for vs in values.values() for v in vs):
            raise RuntimeError("a needle value occurs in the haystack text; change the seed")
        build = lambda u: insert_at_depths(u, needles, np.random.default_rng(place_seed))  # noqa: E731
    else:
        if spec.haystack == "noise":
            per = max(counter([NOISE_BLOCK])[0], 1)
            pool = [NOISE_BLOCK] * max(budget // per + 8, len(needles))
        else:  # other keys' needles (RULER multikey_2/3); distractors never reuse a real key
            per = max(counter([needles[0]])[0], 1)
            pool = []
            while len(pool) < max(budget // per + 8, len(needles)):
                k, v = _random(rng, spec.key_type), _random(rng, spec.value_type)
                if k not in taken and v not in taken:
                    pool.append(needle_sentence(k, v, spec.value_type))
        csum = np.cumsum(counter(pool))
        units = pool[: max(int(np.searchsorted(csum, budget - fixed, side="right")), len(needles))]
        build = lambda u: insert_between_units(u, needles, np.random.default_rng(place_seed))  # noqa: E731
    # the estimate sums per-unit counts; the exact count of the assembled input decides
    text = render(build(units))
    length = counter([text])[0]
    least = 1 if spec.haystack == "essay" else len(needles)  # each needle needs its own unit position
    while length > budget and len(units) > least:
        units = units[: max(least, len(units) - max(1, len(units) // 50))]
        text = render(build(units))
        length = counter([text])[0]
    if length > budget:
        raise ValueError(
            f"{task}: {target_tokens} tokens cannot hold the prompt, the needles and "
            f"{TOKENS_TO_GENERATE} answer tokens ({length} input tokens at the least)"
        )
    return {
        "index": index,
        "input": text,
        "outputs": outputs,
        "length": length + TOKENS_TO_GENERATE,
        "answer_prefix": prefix.format(type_needle_v=type_v, query=query),
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
    haystack_start: str = "fixed",
    start: int = 0,
) -> list[dict[str, Any]]:
    """``num_samples`` RULER records of ``task`` fitting ``target_tokens`` (answer budget
    included). ``haystack_start``: ``fixed`` (RULER: every essay haystack from the corpus's first
    sentence) or ``random`` (a random sentence per sample). Samples ``start`` .. ``start +
    num_samples - 1`` of the stream: each sample has its own generator, so a file made in pieces
    (scripts/niah_testsets.py, in parallel) equals the file made at once."""
    if task not in TASKS:
        raise ValueError(f"unknown NIAH task {task!r}; known: {sorted(TASKS)}")
    if haystack_start not in ("fixed", "random"):
        raise ValueError(f"haystack_start must be 'fixed' or 'random', got {haystack_start!r}")
    if target_tokens <= TOKENS_TO_GENERATE:
        raise ValueError(
            f"target length {target_tokens} leaves nothing after the {TOKENS_TO_GENERATE}-token answer budget"
        )
    essay = (
        Haystack(prepare_corpus(corpus), counter) if corpus is not None and TASKS[task].haystack == "essay" else None
    )
    out = []
    for i in range(start, start + num_samples):
        rng = derive_rng(seed, "niah", task, split, target_tokens, i)
        for attempt in range(10):
            try:
                out.append(make_sample(task, i, target_tokens, rng, counter, essay, haystack_start))
                break
            except RuntimeError:
                if attempt == 9:
                    raise
    return out


def mix(per_task: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One file of several subtasks (training on "the NIAH subtasks", docs/DATA_OTHER.md): records
    taken in turn from each task (sample 0 of every task, then sample 1, ...), so any prefix or
    random share holds every task about equally; each record gets its ``task`` and is renumbered
    (``index`` = position). The loader reads such a file like any other: every record is a
    whole RULER prompt."""
    out: list[dict[str, Any]] = []
    longest = max(len(recs) for recs in per_task.values())
    for i in range(longest):
        for task, recs in per_task.items():
            if i < len(recs):
                out.append({**recs[i], "index": len(out), "task": task})
    return out


def write_text(text: str, path: str | Path) -> Path:
    """Write ``text``; a ``.gz`` name is gzipped reproducibly (mtime 0, no file name). Written
    beside and renamed, so a file that exists is whole (scripts/niah_testsets.py checks files
    while others are still being made)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    tmp = p.with_name(f".{p.name}.tmp")
    with open(tmp, "wb") as raw:
        if p.name.endswith(".gz"):
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
                gz.write(data)
        else:
            raw.write(data)
    os.replace(tmp, p)
    return p


def write_jsonl(records: Sequence[dict[str, Any]], path: str | Path) -> Path:
    return write_text("".join(json.dumps(rec, ensure_ascii=False) + "\n" for rec in records), path)
