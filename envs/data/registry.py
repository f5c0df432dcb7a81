"""Dataset factory: ``envs`` config node + split + seed -> a sequence of Samples.

Each loader module registers a builder under the config's ``envs.name``. Builders only know
their own splits (``train``, ``test`` and dataset-specific ones such as ``test4k``); the
``validation`` split is carved here, generically, from ``train`` (SPEC §5.8): a fixed,
seed-derived fraction of the training items that training never sees.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from envs.seeding import derive_rng
from envs.types import Sample


class RetrievalDataset(Protocol):
    def __len__(self) -> int: ...
    def __getitem__(self, i: int) -> Sample: ...


# builder(envs_cfg, split, seed, legacy): legacy is the top-level `legacy` node (or None)
Builder = Callable[[Any, str, int, Any], RetrievalDataset]
_BUILDERS: dict[str, Builder] = {}
# Loader modules are imported lazily, on first use of their name.
_MODULES = {
    "babilong": "envs.data.babilong",
    "babilong_hf": "envs.data.babilong_hf",
    "niah": "envs.data.niah",
    "hotpotqa": "envs.data.hotpotqa",
    "musique": "envs.data.musique",
    "2WikiMultihopQA": "envs.data.hotpotqa",
    "combined": "envs.data.combined",
    "ruler_qa": "envs.data.ruler_qa",
    "longbench": "envs.data.longbench",
}


def register(name: str) -> Callable[[Builder], Builder]:
    def deco(fn: Builder) -> Builder:
        _BUILDERS[name] = fn
        return fn

    return deco


def _builder(name: str) -> Builder:
    if name not in _BUILDERS and name in _MODULES:
        importlib.import_module(_MODULES[name])
    if name not in _BUILDERS:
        known = sorted(set(_BUILDERS) | set(_MODULES))
        raise KeyError(f"unknown dataset name {name!r} (envs.name); known: {known}")
    return _BUILDERS[name]


class Subset:
    """A view of ``base`` restricted to ``indices`` (in that order)."""

    def __init__(self, base: RetrievalDataset, indices: Sequence[int]):
        self.base, self.indices = base, list(indices)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> Sample:
        return self.base[self.indices[i]]


def train_validation_indices(n: int, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Split range(n) into (train, validation) with a seed-derived permutation."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"validation_fraction must be in [0, 1), got {fraction}")
    n_val = int(round(n * fraction))
    if fraction > 0 and n_val == 0 and n > 1:
        n_val = 1
    perm = derive_rng(seed, "validation-split").permutation(n)
    val = sorted(int(i) for i in perm[:n_val])
    held = set(val)
    return [i for i in range(n) if i not in held], val


def build_dataset(
    envs_cfg: Any, split: str, seed: int, validation_fraction: float = 0.0, legacy: Any = None
) -> RetrievalDataset:
    """Build the dataset for ``split``.

    ``train`` / ``validation`` share one underlying training set: with a positive
    ``validation_fraction`` the two are disjoint. Any other split goes to the builder as is.
    """
    build = _builder(str(envs_cfg.name))
    if split not in ("train", "validation") or validation_fraction <= 0:
        if split == "validation":
            raise ValueError("the validation split needs validation_fraction > 0")
        return build(envs_cfg, split, seed, legacy)
    full = build(envs_cfg, "train", seed, legacy)
    train_idx, val_idx = train_validation_indices(len(full), validation_fraction, seed)
    return Subset(full, train_idx if split == "train" else val_idx)
