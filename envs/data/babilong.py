"""BabiLong (docs/DATA_BABILONG.md): every bAbI story statement hidden, in order,
among book sentences.

Two ways to size a haystack (``envs.length_unit``):

* ``sentences`` (default, the Q-RAG reference): ``num_sentences`` chunks in all, every story
  statement kept however long the story (N = max(N_i, m)); facts at distinct positions.
* ``tokens`` (the official BabiLong generator, booydar/babilong ``NoiseInjectionDataset``):
  ``num_tokens`` minus ``prompt_reserve_tokens`` (300: prompt and question) is filled with the
  facts plus noise, counted with ``length_tokenizer`` (GPT-2's in the official sets) as
  ``" " + sentence``; stories with more than ``budget // tokens_per_fact`` lines (facts + the
  question; ``max_n_facts`` there) are dropped from the set; noise sentences under
  ``min_noise_sentence_tokens`` (10) tokens are skipped; the last noise sentence is cut to fill
  the budget exactly; facts go to positions drawn with replacement among the len(noise) + 1 gaps
  (several facts may share a gap, in story order). Noise runs read a book on from a random
  sentence to its end, then another book.

Every sample records ``num_tokens``: its haystack's length (facts and noise) under
``length_tokenizer``, in both modes. Counts of corpus sentences are cached per book. In sentence
mode the count is extra work (a length-tokenizer pass over every new noise sentence); a dataset
with ``record_num_tokens = False`` skips it (the training environments: rl/run/build.py).

``long_stories`` (sentence mode, training only; ``envs.long_stories``): a story of at least
``min_facts`` facts gets a haystack of ``long_stories.num_sentences`` sentences (an int or a list
to draw from) in place of ``num_sentences``. The usual size is drawn all the same and the long
size from a generator of its own (keyed ``long_stories``), so each sample's generator is consumed
as without it: a shorter story's sample is the one it had, and a long story's differs only through
its size (experiments/qa3_long). Evaluation sets it off (rl/run/eval_config.py): it sizes training
haystacks, never test ones.

Sample i is a pure function of (seed, split, sizing, i): its noise, its size (when the size is
a list) and its fact positions all come from one generator derived from those keys, so access
order never matters. Its ``id`` is the question's position in the bAbI file, also when the
token mode drops stories. ``legacy.fixed_noise_seed`` restores the reference's single noise
generator seeded 42 and shared by all samples (order-dependent).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from envs.data.babi import BabiSample, load_babi_file
from envs.data.common import cfg_get
from envs.data.length_tokenizer import LengthTokenizer, length_tokenizer
from envs.data.noise import Corpus, NoiseSampler, Run, load_noise_corpus
from envs.data.registry import DatasetSpec, register
from envs.seeding import derive_rng
from envs.types import Sample, validate_sample

REF_NOISE_SEED = 42  # legacy.fixed_noise_seed only


def assemble(
    babi: BabiSample,
    noise: Sequence[str],
    rng: np.random.Generator,
) -> tuple[list[str], list[int], list[int]]:
    """Place the story's statements at sorted random positions among ``noise``.

    Returns (chunks, facts_idx, sf_idx). O(len(noise) + m log m); no per-noise-sentence Python
    work beyond list slicing.
    """
    m = len(babi.facts)
    total = len(noise) + m
    pos = np.sort(rng.choice(total, size=m, replace=False)) if m else np.empty(0, dtype=np.int64)
    facts_idx = [int(p) for p in pos]
    chunks: list[str] = []
    taken = 0  # noise sentences used so far
    for k, p in enumerate(facts_idx):
        upto = p - k  # noise sentences before fact k
        chunks.extend(noise[taken:upto])
        taken = upto
        chunks.append(babi.facts[k])
    chunks.extend(noise[taken:])
    sf_idx = [facts_idx[r] for r in babi.references_idx]
    return chunks, facts_idx, sf_idx


@dataclass(frozen=True)
class TokenBudget:
    """The official generator's sizing (``envs.length_unit: tokens``)."""

    sizes: tuple[int, ...]  # num_tokens: one, or several to draw from per sample
    reserve: int = 300  # prompt_reserve_tokens: the official "- 300" for prompt and question
    min_noise: int = 10  # min_noise_sentence_tokens: SentenceSampler(min_sentence_len=10)
    tokens_per_fact: int = 8  # max_n_facts = budget // 8 (lines, the question included)

    def max_lines(self) -> int | None:
        """Most story lines (facts + question) a kept story may have; None = no limit (a budget
        ≤ 0, the official "0k" sets of facts alone)."""
        budget = min(self.sizes) - self.reserve  # a story kept must fit every size drawn
        return budget // self.tokens_per_fact if budget > 0 else None

    def key(self, tokenizer: str) -> str:
        return f"tokens:{list(self.sizes)}:{self.reserve}:{self.min_noise}:{self.tokens_per_fact}:{tokenizer}"


class CorpusTokenCounts:
    """Length-tokenizer counts of corpus sentences, computed once per sentence on first use."""

    def __init__(self, corpus: Corpus, tokenizer: LengthTokenizer):
        self.corpus, self.tokenizer = corpus, tokenizer
        self._books: dict[int, np.ndarray] = {}  # book -> counts, -1 = not yet counted

    def of(self, runs: Sequence[Run]) -> list[np.ndarray]:
        """Counts of the sentences of each run, as one array per run."""
        missing: dict[int, set[int]] = {}  # runs of one call may overlap: count each sentence once
        for b, start, stop in runs:
            arr = self._books.get(b)
            if arr is None:
                arr = self._books[b] = np.full(len(self.corpus[b]), -1, dtype=np.int32)
            idx = start + np.flatnonzero(arr[start:stop] < 0)
            if len(idx):
                missing.setdefault(b, set()).update(idx.tolist())
        if missing:
            todo = [(b, sorted(idx)) for b, idx in missing.items()]
            counts = self.tokenizer.count([self.corpus[b][j] for b, idx in todo for j in idx])
            at = 0
            for b, idx in todo:
                self._books[b][idx] = counts[at : at + len(idx)]
                at += len(idx)
        return [self._books[b][start:stop] for b, start, stop in runs]


def fill_noise(
    sampler: NoiseSampler, counts: CorpusTokenCounts, target: int, min_tokens: int, rng: np.random.Generator
) -> tuple[list[str], list[int]]:
    """Noise sentences and their counts for ``target`` tokens, as the official SentenceSampler:
    sentences under ``min_tokens`` are skipped, sentences are added until the total reaches the
    target, and the last one is cut to its first tokens so that the total equals the target."""
    out: list[str] = []
    lens: list[int] = []
    if target <= 0:
        return out, lens
    total = 0
    piece = max(16, min(4096, target // 16))  # sentences counted per batch (≈ 30 tokens each)
    for b, start, stop in sampler.runs_to_book_end(rng):
        for lo in range(start, stop, piece):
            run = (b, lo, min(lo + piece, stop))
            (cnt,) = counts.of([run])
            for text, c in zip(sampler.corpus[b][run[1] : run[2]], cnt.tolist()):
                if c < min_tokens:
                    continue
                if total + c >= target:
                    keep = target - total  # > 0: the total before this sentence was short of it
                    out.append(text if keep == c else counts.tokenizer.cut(text, keep))
                    lens.append(keep)
                    return out, lens
                out.append(text)
                lens.append(c)
                total += c
    raise AssertionError("unreachable: runs_to_book_end never ends")


def assemble_gaps(facts: Sequence[str], noise: Sequence[str], rng: np.random.Generator) -> tuple[list[str], list[int]]:
    """The official insertion: each fact goes to a gap drawn with replacement among the
    len(noise) + 1 gaps (before noise sentence g, or at the end); facts sharing a gap keep story
    order. Returns (chunks, facts_idx)."""
    gaps = np.sort(rng.choice(len(noise) + 1, size=len(facts), replace=True)) if facts else []
    chunks: list[str] = []
    facts_idx: list[int] = []
    k = 0
    for g in range(len(noise) + 1):
        while k < len(facts) and gaps[k] == g:
            facts_idx.append(len(chunks))
            chunks.append(facts[k])
            k += 1
        if g < len(noise):
            chunks.append(noise[g])
    return chunks, facts_idx


@dataclass(frozen=True)
class LongStories:
    """``envs.long_stories``: stories of at least ``min_facts`` facts get haystacks of one of
    ``sizes`` sentences (drawn per sample when several)."""

    min_facts: int
    sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.min_facts < 1 or not self.sizes or min(self.sizes) < 1:
            raise ValueError(f"envs.long_stories: expected min_facts >= 1 and sizes >= 1, got {self}")

    def size(self, rng: np.random.Generator) -> int:
        return self.sizes[0] if len(self.sizes) == 1 else self.sizes[int(rng.integers(len(self.sizes)))]


class BabiLongDataset:
    """``__getitem__(i)`` builds sample i on demand (a 400k-sentence sample takes ~a second).

    ``tokens`` set: the token-budget mode; stories too long for its budget are left out
    (``ids`` keeps each kept sample's position in the bAbI file). ``length`` ≥ 0 keeps the first
    ``length`` samples (after that filter). ``long_stories``: the sentence mode's larger haystacks
    for stories of many facts (the module's docstring)."""

    def __init__(
        self,
        babi: list[BabiSample],
        noise: list[list[str]],
        num_sentences: int | Sequence[int],
        seed: int,
        split: str,
        subsample_size: int = 100,
        fixed_noise_seed: bool = False,
        tokenizer: LengthTokenizer | None = None,
        tokens: TokenBudget | None = None,
        length: int = -1,
        long_stories: LongStories | None = None,
    ):
        self.seed, self.split = int(seed), split
        self.tokens = tokens
        if tokens is not None and tokenizer is None:
            raise ValueError("the token-budget mode needs a length tokenizer")
        if long_stories is not None and tokens is not None:
            # the token mode sizes by a budget and drops the stories that do not fit it: "more
            # sentences for a long story" has no meaning there (and test evaluations use that mode)
            raise ValueError("envs.long_stories needs the sentence mode (envs.length_unit=sentences)")
        if long_stories is not None and fixed_noise_seed:
            # one noise stream shared by all samples: a long story's extra noise would shift every later sample's
            raise ValueError("envs.long_stories cannot be combined with legacy.fixed_noise_seed")
        self.long_stories = long_stories
        self.ids = list(range(len(babi)))
        limit = tokens.max_lines() if tokens is not None else None
        if limit is not None:
            self.ids = [i for i in self.ids if len(babi[i].facts) + 1 <= limit]
        if length >= 0:
            self.ids = self.ids[:length]
        self.babi = [babi[i] for i in self.ids]
        if isinstance(num_sentences, (int, np.integer)):
            self.sizes: list[int] | None = None
            self.num_sentences = int(num_sentences)
        else:
            self.sizes = [int(x) for x in num_sentences]
            if not self.sizes:
                raise ValueError("num_sentences list is empty")
            self.num_sentences = -1
        if tokens is not None:
            if not tokens.sizes:
                raise ValueError("num_tokens list is empty")
            self._n_key = tokens.key(tokenizer.name)  # type: ignore[union-attr]
        else:
            self._n_key = str(self.sizes if self.sizes is not None else self.num_sentences)
        self.sampler = NoiseSampler(noise, subsample_size)
        self.counts = CorpusTokenCounts(noise, tokenizer) if tokenizer is not None else None
        self.tokenizer = tokenizer
        self.record_num_tokens = True  # sentence mode: count num_tokens (token mode always has it)
        # legacy: one stateful generator for every sample's noise, whatever the run seed
        self._shared_rng = np.random.default_rng(REF_NOISE_SEED) if fixed_noise_seed else None

    def __len__(self) -> int:
        return len(self.babi)

    def sample_rng(self, i: int, *more: str) -> np.random.Generator:
        """The generator of the question at file position ``i`` (``more``: a second one of its own,
        e.g. ``long_stories``'s size draw, which leaves the first untouched)."""
        return derive_rng(self.seed, "babilong", self.split, self._n_key, i, *more)

    def __getitem__(self, i: int) -> Sample:
        if not -len(self) <= i < len(self):
            raise IndexError(f"sample {i} out of range for {len(self)} samples")
        i = i % len(self)
        b, qid = self.babi[i], self.ids[i]
        rng = self.sample_rng(qid)
        noise_rng = self._shared_rng if self._shared_rng is not None else rng
        if self.tokens is not None:
            chunks, facts_idx, num_tokens = self._token_haystack(b, rng, noise_rng)
        else:
            n_i = self.num_sentences if self.sizes is None else self.sizes[int(rng.integers(len(self.sizes)))]
            if self.long_stories is not None and len(b.facts) >= self.long_stories.min_facts:
                n_i = self.long_stories.size(self.sample_rng(qid, "long_stories"))
            runs = self.sampler.draw_runs(max(n_i - len(b.facts), 0), noise_rng)
            chunks, facts_idx, _ = assemble(b, self.sampler.texts(runs), rng)
            num_tokens = None
            if self.counts is not None and self.record_num_tokens:
                num_tokens = sum(int(c.sum()) for c in self.counts.of(runs)) + sum(self.tokenizer.count(b.facts))
        sample: Sample = {
            "id": qid,
            "question": b.question,
            "answer": b.answer,
            "chunks": chunks,
            "sf_idx": [facts_idx[r] for r in b.references_idx],
            "facts_idx": facts_idx,
            "num_sentences": len(chunks),
            "split": self.split,
        }
        if num_tokens is not None:
            sample["num_tokens"] = num_tokens
        return validate_sample(sample, f"babilong[{self.split}][{qid}]")

    def _token_haystack(
        self, b: BabiSample, rng: np.random.Generator, noise_rng: np.random.Generator
    ) -> tuple[list[str], list[int], int]:
        t = self.tokens
        size = t.sizes[0] if len(t.sizes) == 1 else t.sizes[int(rng.integers(len(t.sizes)))]
        fact_tokens = sum(self.tokenizer.count(b.facts))
        target = size - t.reserve - fact_tokens
        noise, lens = fill_noise(self.sampler, self.counts, target, t.min_noise, noise_rng)
        chunks, facts_idx = assemble_gaps(b.facts, noise, rng)
        return chunks, facts_idx, fact_tokens + sum(lens)


LONG_STORIES_OFF = {"min_facts": None, "num_sentences": None}


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str)


def _size_errors(key: str, n: Any) -> list[str]:
    """One line unless ``n`` is a sentence-mode size: an integer >= 1 or a non-empty list of them."""
    values = n if _is_list(n) else [n]
    if values and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 1 for x in values):
        return []
    return [f"{key}={list(n) if _is_list(n) else n!r}: expected an integer >= 1 or a list of them"]


def _long_stories_errors(envs: Any) -> list[str]:
    """``envs.long_stories``: off (both null), or both set, in the sentence mode."""
    long = envs.get("long_stories")  # absent only in a run config from before it (upgrade_run_config fills it)
    if long is None:
        return []
    if not hasattr(long, "keys"):
        return [f"envs.long_stories={long!r}: expected min_facts and num_sentences (both null: off)"]
    errors = [
        f"envs.long_stories.{k}: unknown key (min_facts, num_sentences)"
        for k in long.keys()
        if k not in LONG_STORIES_OFF
    ]
    min_facts, sizes = long.get("min_facts"), long.get("num_sentences")
    if min_facts is None and sizes is None:
        return errors
    if min_facts is None or sizes is None:
        errors.append("envs.long_stories: set min_facts and num_sentences together (both null: off)")
    if min_facts is not None and not (
        isinstance(min_facts, int) and not isinstance(min_facts, bool) and min_facts >= 1
    ):
        errors.append(f"envs.long_stories.min_facts={min_facts!r}: expected an integer >= 1")
    if sizes is not None:
        errors += _size_errors("envs.long_stories.num_sentences", sizes)
    if envs.get("length_unit") != "sentences":
        errors.append(
            f"envs.long_stories: needs haystacks sized in sentences (envs.length_unit=sentences), not "
            f"{envs.get('length_unit')!r}"
        )
    return errors


# The context-length grid of BabiLong's sentence mode: haystack sentences -> tokens they approximate.
SENTENCE_GRID = {50: "1K", 160: "4K", 1200: "32K", 4600: "128K", 40000: "1M", 400000: "10M"}


def _sizes(value: Any) -> int | list[int]:
    """``num_sentences`` / ``num_tokens`` as plain JSON values (an int or a list of them)."""
    return int(value) if isinstance(value, (int, np.integer)) else [int(x) for x in value]


def _sizes_list(value: Any) -> list[int]:
    sizes = _sizes(value)
    return sizes if isinstance(sizes, list) else [sizes]


def _label(value: Any) -> str:
    """A size for file names: ``1200``, or ``50-160`` for a list drawn from per sample."""
    sizes = _sizes(value)
    return "-".join(str(x) for x in sizes) if isinstance(sizes, list) else str(sizes)


class BabiLongSpec(DatasetSpec):
    """Evaluation files are named and checked by the haystack size of the chosen unit."""

    family = "babilong"
    # Runs saved before the token mode existed sized haystacks in sentences; the token mode's keys
    # are filled too, so that such a run can be evaluated with envs.length_unit=tokens.
    added_keys = {
        "long_stories": dict(LONG_STORIES_OFF),
        "length_unit": "sentences",
        "length_tokenizer": "gpt2",
        "num_tokens": 4000,
        "prompt_reserve_tokens": 300,
        "min_noise_sentence_tokens": 10,
        "tokens_per_fact": 8,
    }

    training_only = {"long_stories": LONG_STORIES_OFF}

    def eval_suffix(self, envs: Any) -> str:
        if envs.length_unit == "sentences":
            return f"_ns{_label(envs.num_sentences)}"
        return f"_nt{_label(envs.num_tokens)}"

    def describe(self, envs: Any) -> str:
        if envs.length_unit != "sentences":
            return (
                f"envs.num_tokens = {_label(envs.num_tokens)} {envs.length_tokenizer} tokens (official BabiLong sizing)"
            )
        n = envs.num_sentences
        grid = SENTENCE_GRID.get(int(n)) if isinstance(n, (int, np.integer)) else None
        return f"envs.num_sentences = {_label(n)}" + (f" (≈ {grid} tokens)" if grid else "")

    def eval_meta(self, envs: Any) -> dict[str, Any]:
        unit = str(envs.length_unit)
        length: dict[str, Any] = {"unit": unit, "tokenizer": str(envs.length_tokenizer)}
        if unit == "tokens":
            length.update(
                num_tokens=_sizes(envs.num_tokens),
                reserve=envs.prompt_reserve_tokens,
                min_noise=envs.min_noise_sentence_tokens,
                tokens_per_fact=envs.tokens_per_fact,
            )
        return {
            "num_sentences": _sizes(envs.num_sentences) if unit == "sentences" else None,
            "length": length,
            "context_length": None,
            "data_path": envs.facts_test_path,
        }

    def config_errors(self, envs: Any) -> list[str]:
        errors = _size_errors("envs.num_sentences", envs.num_sentences)
        return errors + _long_stories_errors(envs)


@register("babilong", BabiLongSpec(), legacy=("babi_drop_last_question", "fixed_noise_seed"))
def build_babilong(
    envs_cfg: Any, split: str, seed: int, babi_drop_last_question: bool = False, fixed_noise_seed: bool = False
) -> BabiLongDataset:
    """Builder for ``envs.name: babilong``.

    Reads ``facts_{train,test}_path`` (one bAbI file, or a list of files read in order as one set:
    e.g. real and generated qa3 training files together; ``babi_drop_last_question`` drops each
    file's last question), ``noise_{train,test}_path``, ``length_unit``
    (``sentences`` | ``tokens``), ``num_sentences`` (int or list; sentence mode), ``num_tokens``
    (int or list), ``prompt_reserve_tokens``, ``min_noise_sentence_tokens``, ``tokens_per_fact``
    (token mode), ``length_tokenizer``, ``subsample_size`` and ``length`` (keep the first
    ``length`` questions in file order, after the token mode's story filter; -1 = all) and
    ``long_stories`` (``min_facts``, ``num_sentences``: both null = off; sentence mode). The
    legacy switches ``babi_drop_last_question`` and ``fixed_noise_seed`` come from the registry.
    """
    if split not in ("train", "test"):
        raise ValueError(f"babilong has splits 'train' and 'test', not {split!r}")
    facts = cfg_get(envs_cfg, f"facts_{split}_path")
    facts_paths = [facts] if isinstance(facts, (str, Path)) else list(facts)  # a list: ListConfig / tuple
    noise_path = Path(str(cfg_get(envs_cfg, f"noise_{split}_path")))
    babi = [s for f in facts_paths for s in load_babi_file(Path(str(f)), drop_last_question=babi_drop_last_question)]
    unit = str(cfg_get(envs_cfg, "length_unit"))
    if unit not in ("sentences", "tokens"):
        raise ValueError(f"envs.length_unit must be 'sentences' or 'tokens', got {unit!r}")
    tokenizer = length_tokenizer(str(cfg_get(envs_cfg, "length_tokenizer")))
    tokens = None
    if unit == "tokens":
        tokens = TokenBudget(
            sizes=_ints(cfg_get(envs_cfg, "num_tokens")),
            reserve=int(cfg_get(envs_cfg, "prompt_reserve_tokens")),
            min_noise=int(cfg_get(envs_cfg, "min_noise_sentence_tokens")),
            tokens_per_fact=int(cfg_get(envs_cfg, "tokens_per_fact")),
        )
    num_sentences = cfg_get(envs_cfg, "num_sentences")
    if not isinstance(num_sentences, (int, np.integer)):
        num_sentences = [int(x) for x in num_sentences]  # ListConfig / tuple
    # absent (= off) in the run configs saved before it: scripts that build from a run's
    # config_resolved.yaml (experiments/qa3_32k/analyze.py) read those without upgrade_run_config
    long = envs_cfg.get("long_stories")
    long_stories = None
    if long is not None and (long["min_facts"], long["num_sentences"]) != (None, None):
        if long["min_facts"] is None or long["num_sentences"] is None:
            raise ValueError("envs.long_stories: set min_facts and num_sentences together (both null: off)")
        long_stories = LongStories(int(long["min_facts"]), tuple(_sizes_list(long["num_sentences"])))
    return BabiLongDataset(
        babi,
        load_noise_corpus(noise_path),
        num_sentences,
        seed,
        split,
        subsample_size=int(cfg_get(envs_cfg, "subsample_size")),
        fixed_noise_seed=fixed_noise_seed,
        tokenizer=tokenizer,
        tokens=tokens,
        length=int(cfg_get(envs_cfg, "length")),
        long_stories=long_stories,
    )


def _ints(value: Any) -> tuple[int, ...]:
    if value is None:
        raise ValueError("envs.length_unit=tokens needs envs.num_tokens (an int, or a list to draw from)")
    if isinstance(value, (int, np.integer)):
        return (int(value),)
    return tuple(int(x) for x in value)
