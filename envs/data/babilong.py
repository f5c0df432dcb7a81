"""BabiLong (SPEC §7.3): every bAbI story statement hidden, in order, among book sentences.

Sample i is a pure function of (seed, split, num_sentences, i): its noise, its size (when
``num_sentences`` is a list) and its fact positions all come from one generator derived from
those keys, so access order never matters. ``legacy.fixed_noise_seed`` restores the reference's
single noise generator seeded 42 and shared by all samples (order-dependent).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from envs.data.babi import BabiSample, load_babi_file
from envs.data.noise import NoiseSampler, load_noise_corpus
from envs.data.registry import register
from envs.legacy import flag
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


class BabiLongDataset:
    """``__getitem__(i)`` builds sample i on demand (a 400k-sentence sample takes ~a second)."""

    def __init__(
        self,
        babi: list[BabiSample],
        noise: list[list[str]],
        num_sentences: int | Sequence[int],
        seed: int,
        split: str,
        subsample_size: int = 100,
        fixed_noise_seed: bool = False,
    ):
        self.babi, self.seed, self.split = babi, int(seed), split
        if isinstance(num_sentences, (int, np.integer)):
            self.sizes: list[int] | None = None
            self.num_sentences = int(num_sentences)
        else:
            self.sizes = [int(x) for x in num_sentences]
            if not self.sizes:
                raise ValueError("num_sentences list is empty")
            self.num_sentences = -1
        self._n_key = str(self.sizes if self.sizes is not None else self.num_sentences)
        self.sampler = NoiseSampler(noise, subsample_size)
        # legacy: one stateful generator for every sample's noise, whatever the run seed
        self._shared_rng = np.random.default_rng(REF_NOISE_SEED) if fixed_noise_seed else None

    def __len__(self) -> int:
        return len(self.babi)

    def sample_rng(self, i: int) -> np.random.Generator:
        return derive_rng(self.seed, "babilong", self.split, self._n_key, i)

    def __getitem__(self, i: int) -> Sample:
        if not -len(self) <= i < len(self):
            raise IndexError(f"sample {i} out of range for {len(self)} samples")
        i = i % len(self)
        b = self.babi[i]
        rng = self.sample_rng(i)
        n_i = self.num_sentences if self.sizes is None else self.sizes[int(rng.integers(len(self.sizes)))]
        num_noise = max(n_i - len(b.facts), 0)
        noise_rng = self._shared_rng if self._shared_rng is not None else rng
        noise = self.sampler.draw(num_noise, noise_rng)
        chunks, facts_idx, sf_idx = assemble(b, noise, rng)
        sample: Sample = {
            "id": i,
            "question": b.question,
            "answer": b.answer,
            "chunks": chunks,
            "sf_idx": sf_idx,
            "facts_idx": facts_idx,
            "num_sentences": len(chunks),
            "split": self.split,
        }
        return validate_sample(sample, f"babilong[{self.split}][{i}]")


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    try:
        return cfg.get(key, default)
    except AttributeError:
        return getattr(cfg, key, default)


@register("babilong")
def build_babilong(envs_cfg: Any, split: str, seed: int, legacy: Any = None) -> BabiLongDataset:
    """Builder for ``envs.name: babilong``.

    Reads ``facts_{train,test}_path``, ``noise_{train,test}_path``, ``num_sentences`` (int or
    list), ``subsample_size`` and ``length`` (keep the first ``length`` questions in file order;
    -1 = all). Legacy flags: ``babi_drop_last_question``, ``fixed_noise_seed``.
    """
    if split not in ("train", "test"):
        raise ValueError(f"babilong has splits 'train' and 'test', not {split!r}")
    facts_path = Path(str(_get(envs_cfg, f"facts_{split}_path")))
    noise_path = Path(str(_get(envs_cfg, f"noise_{split}_path")))
    babi = load_babi_file(facts_path, drop_last_question=flag(legacy, "babi_drop_last_question"))
    length = int(_get(envs_cfg, "length", -1))
    if length >= 0:
        babi = babi[:length]
    num_sentences = _get(envs_cfg, "num_sentences", 100)
    if not isinstance(num_sentences, (int, np.integer)):
        num_sentences = [int(x) for x in num_sentences]  # ListConfig / tuple
    return BabiLongDataset(
        babi,
        load_noise_corpus(noise_path),
        num_sentences,
        seed,
        split,
        subsample_size=int(_get(envs_cfg, "subsample_size", 100)),
        fixed_noise_seed=flag(legacy, "fixed_noise_seed"),
    )
