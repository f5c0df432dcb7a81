"""The unified sample schema (DESIGN §1.1) every loader emits, and its validation."""

from __future__ import annotations

from typing import Any, TypedDict


class _SampleRequired(TypedDict):
    id: str | int
    question: str
    answer: str
    chunks: list[str]
    sf_idx: list[int]


class Sample(_SampleRequired, total=False):
    """One retrieval problem.

    ``chunks`` are in document order; ``sf_idx`` indexes into ``chunks`` (may repeat;
    consumers use ``set(sf_idx)``). ``sf_known`` is False for answer-only sets and other samples
    whose gold is unknown, which makes fact metrics null instead of 0; ``sf_partial`` flags gold
    only partly present in the context (``sf_missing_titles`` names the rest). ``num_tokens`` is
    the haystack's length under the loader's length tokenizer; ``ruler_index`` RULER's own
    ``index`` field (not an id: it repeats); ``answerable`` MuSiQue's flag.
    """

    answer_aliases: list[str]
    source: str
    sf_known: bool
    sf_partial: bool
    sf_missing_titles: list[str]
    facts_idx: list[int]
    num_sentences: int
    num_tokens: int
    split: str
    longbench: dict[str, Any]  # LongBench: dataset, all_classes, length, input (for its scorer)
    answerable: bool
    ruler_index: int | str


class SampleError(ValueError):
    """A loader produced a sample that breaks the schema."""


def validate_sample(sample: dict[str, Any], where: str = "") -> Sample:
    """Check the schema invariants and return the sample unchanged.

    Raises SampleError naming ``where`` (file / record) and the broken field.
    """
    prefix = f"{where}: " if where else ""
    for key in ("id", "question", "answer", "chunks", "sf_idx"):
        if key not in sample:
            raise SampleError(f"{prefix}sample is missing field {key!r}")
    chunks = sample["chunks"]
    if not isinstance(chunks, list) or not all(isinstance(c, str) for c in chunks):
        raise SampleError(f"{prefix}'chunks' must be a list of strings")
    n = len(chunks)
    for j in sample["sf_idx"]:
        if not isinstance(j, int) or not 0 <= j < n:
            raise SampleError(f"{prefix}sf_idx value {j!r} is outside [0, {n})")
    return sample  # type: ignore[return-value]


def sf_known(sample: Sample) -> bool:
    return bool(sample.get("sf_known", True))
