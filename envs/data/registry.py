"""Dataset factory: ``envs`` config node + split + seed -> a sequence of Samples.

Each loader module registers a builder under the config's ``envs.name``, with a
:class:`DatasetSpec`: what the rest of the program may know about the dataset beyond its
samples (how its evaluation files are named and described, which of its settings must be
checked), so that ``rl`` never switches on dataset names. Builders only know their own splits
(``train``, ``test`` and dataset-specific ones such as ``test4k``); the ``validation`` split is
carved here, generically, from ``train`` (DESIGN §5.8): a fixed, seed-derived fraction of the
training items that training never sees. A dataset whose files hold a validation split of their
own (the shipped real multi-hop subsets: ``DatasetSpec.fixed_validation``) is read as it is, and
nothing is carved.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from envs.legacy import ALL_OFF, Legacy
from envs.seeding import derive_rng
from envs.types import Sample

log = logging.getLogger(__name__)


class RetrievalDataset(Protocol):
    def __len__(self) -> int: ...
    def __getitem__(self, i: int) -> Sample: ...


# Keys of an ``envs`` node that set how episodes run on the samples, not which samples are built.
# An evaluation on another dataset (eval_env) keeps the run's values of these.
ACTING_KEYS = ("max_steps", "positions_processor", "step_size", "relative_formula", "max_chunks_count", "sort_by_index")
# Keys that leave the samples of a given split unchanged: the acting keys, the per-env reward
# defaults and the name of the test split (whoever builds a split passes the split itself).
NON_SAMPLE_KEYS = frozenset((*ACTING_KEYS, "feedback_defaults", "test_split"))


class DatasetSpec:
    """What evaluation and config checks know of a dataset (its ``envs`` node as argument).
    The base class fits a dataset evaluated on one fixed test split; a loader module registers
    a subclass where its evaluation files need more in their name or settings."""

    family: str | None = None  # eval_env within one family keeps the run's task (a model is trained on one task)
    # Keys added to this dataset's config after runs were saved with it, with the value those
    # runs used: rl/run/config.py's upgrade_run_config fills them into an older run's config.
    added_keys: dict[str, Any] = {}
    # Keys of its ``envs`` node that size training haystacks only, with their off value: evaluation
    # sets them off whatever the run's config says (rl/run/eval_config.py), so that a run's test
    # haystacks are the evaluation's own (BabiLong's long_stories).
    training_only: dict[str, Any] = {}

    def eval_suffix(self, envs: Any) -> str:
        """Part of the evaluation file's stem after ``eval_seed{seed}`` (what sets the test samples)."""
        return ""

    def describe(self, envs: Any) -> str:
        """The test set, as printed when an evaluation starts."""
        return f"{envs.name} split {envs.test_split}"

    def eval_meta(self, envs: Any) -> dict[str, Any]:
        """Settings of an evaluation file that size or locate the test data (a file made with others is
        not resumed). Every dataset returns the same keys, so meta files stay comparable."""
        return {"num_sentences": None, "length": None, "context_length": None, "data_path": envs.get("data_path")}

    def config_errors(self, envs: Any) -> list[str]:
        """One line per bad dataset-specific value (rl/run/validate.py reports them with the rest)."""
        return []

    def fixed_validation(self, envs: Any) -> bool:
        """True when the data hold a validation split of their own, which the builder reads (split
        ``validation``) in place of the carve from ``train``."""
        return False


class SplitNamedSpec(DatasetSpec):
    """Several test files, chosen by ``test_split``: the split names the evaluation file."""

    def eval_suffix(self, envs: Any) -> str:
        return f"_{envs.test_split}"


# builder(envs_cfg, split, seed, **switches): switches are the legacy ones it registered (envs/legacy.py)
Builder = Callable[..., RetrievalDataset]
_BUILDERS: dict[str, Builder] = {}
_SPECS: dict[str, DatasetSpec] = {}
_SWITCHES: dict[str, tuple[str, ...]] = {}
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


def register(name: str, spec: DatasetSpec | None = None, legacy: tuple[str, ...] = ()) -> Callable[[Builder], Builder]:
    """Register a builder for ``envs.name`` = ``name``; ``legacy`` names the switches (envs/legacy.py)
    it takes as boolean keywords."""

    def deco(fn: Builder) -> Builder:
        _BUILDERS[name] = fn
        _SPECS[name] = spec or DatasetSpec()
        _SWITCHES[name] = legacy
        return fn

    return deco


def _builder(name: str) -> Builder:
    if name not in _BUILDERS and name in _MODULES:
        importlib.import_module(_MODULES[name])
    if name not in _BUILDERS:
        known = sorted(set(_BUILDERS) | set(_MODULES))
        raise KeyError(f"unknown dataset name {name!r} (envs.name); known: {known}")
    return _BUILDERS[name]


def dataset_spec(name: str) -> DatasetSpec:
    """The :class:`DatasetSpec` registered with ``envs.name`` = ``name``."""
    _builder(name)
    return _SPECS[name]


class Subset:
    """A view of ``base`` restricted to ``indices`` (in that order)."""

    def __init__(self, base: RetrievalDataset, indices: Sequence[int]):
        self.base, self.indices = base, list(indices)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> Sample:
        return self.base[self.indices[i]]


def first_samples(ds: RetrievalDataset, n: int) -> RetrievalDataset:
    """The first ``n`` samples of ``ds`` (all of them for ``n`` = -1 or ``n`` >= its size): the key
    ``train_samples`` caps a training set so, after its validation questions were set apart, so that
    model selection keeps all of them. The loaders order the samples by a permutation derived from
    the run seed, so each seed trains on another subset of that size."""
    if n < 0 or n >= len(ds):
        return ds
    return Subset(ds, range(n))


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
    envs_cfg: Any, split: str, seed: int, validation_fraction: float = 0.0, legacy: Legacy = ALL_OFF
) -> RetrievalDataset:
    """Build the dataset for ``split``; its builder gets the legacy switches it registered.

    ``train`` / ``validation`` share one underlying training set: with a positive
    ``validation_fraction`` the two are disjoint. Data with a validation split of their own
    (``DatasetSpec.fixed_validation``) give both to the builder, whatever ``validation_fraction``
    says; so does any other split.
    """
    name = str(envs_cfg.name)
    build = functools.partial(_builder(name), **legacy.pick(_SWITCHES[name]))
    if split in ("train", "validation") and _SPECS[name].fixed_validation(envs_cfg):
        ds = build(envs_cfg, split, seed)
        if split == "validation":
            log.info("%s: the data's own validation split, %d questions (validation_fraction not used)", name, len(ds))
        return ds
    if split not in ("train", "validation") or validation_fraction <= 0:
        if split == "validation":
            raise ValueError("the validation split needs validation_fraction > 0")
        return build(envs_cfg, split, seed)
    full = build(envs_cfg, "train", seed)
    train_idx, val_idx = train_validation_indices(len(full), validation_fraction, seed)
    return Subset(full, train_idx if split == "train" else val_idx)
