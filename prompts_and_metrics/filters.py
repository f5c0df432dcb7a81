"""Chunk filters applied by the reader scripts to one retriever JSONL record (DESIGN §9.3).

A record carries ``pred_idx``/``pred_texts`` (retrieval order) and ``sf_idx``/``sf_texts``; there
is no full chunk list, so a kept index's text comes from ``pred_texts`` when it was retrieved, else
from ``sf_texts`` (only ``gt`` can keep an unretrieved gold chunk).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

FILTERS = ("none", "gt", "no_noise", "early_stop", "qvalue", "retrieval_step", "llm")


@dataclass(frozen=True)
class FilterSpec:
    """name: one of FILTERS. threshold: the ``qvalue`` cut (ref class default -0.5).
    comparison: ``le`` stops at the first step with Q <= threshold (ref); ``lt`` keeps while
    Q >= threshold, i.e. stops at the first Q < threshold (paper App. B). budget: the
    ``retrieval_step`` cap. empty_if_none: ``early_stop`` keeps nothing (instead of everything)
    when no gold chunk was retrieved."""

    name: str = "none"
    threshold: float = -0.5
    comparison: str = "le"
    budget: int | None = None
    empty_if_none: bool = False

    @classmethod
    def from_args(cls, args: Any) -> FilterSpec:
        """The filter a reader script's flags name (``--chunk_filter`` and its parameters; a script
        without ``--empty_if_none`` keeps the default)."""
        return cls(
            args.chunk_filter,
            args.stopping_threshold,
            args.qvalue_comparison,
            args.max_retrieval_budget,
            getattr(args, "empty_if_none", False),
        )

    def key(self) -> str:
        """Summary key: the name plus the parameter that changes its result."""
        if self.name == "qvalue":
            return f"qvalue_{self.comparison}{self.threshold:g}"
        if self.name == "retrieval_step":
            return f"retrieval_step{self.budget}"
        if self.name == "early_stop" and self.empty_if_none:
            return "early_stop_empty"
        return self.name


def _dedup(seq: list[int]) -> list[int]:
    seen: set[int] = set()
    out = []
    for i in seq:
        if i not in seen:
            seen.add(i)
            out.append(i)
    return out


def filter_indices(record: Mapping[str, Any], spec: FilterSpec) -> list[int]:
    """Kept chunk indices, in retrieval order (``gt``: in ``sf_idx`` order, duplicates dropped)."""
    pred = list(record.get("pred_idx") or [])
    gold = list(record.get("sf_idx") or [])
    name = spec.name
    if name == "none":
        return pred
    if name == "gt":
        return _dedup(gold)
    if name == "no_noise":
        g = set(gold)
        return [i for i in pred if i in g]
    if name == "early_stop":
        g = set(gold)
        last = max((t for t, i in enumerate(pred) if i in g), default=-1)
        if last < 0:
            return [] if spec.empty_if_none else pred
        return pred[: last + 1]
    if name == "qvalue":
        if spec.comparison not in ("le", "lt"):
            raise ValueError(f"qvalue comparison must be 'le' or 'lt', got {spec.comparison!r}")
        q = list(record.get("q_values") or [])
        if len(q) < len(pred):
            raise ValueError(f"record {record.get('id')!r}: {len(q)} q_values for {len(pred)} retrieved chunks")
        for t, v in enumerate(q[: len(pred)]):
            stop = v <= spec.threshold if spec.comparison == "le" else v < spec.threshold
            if stop:
                return pred[:t]
        return pred
    if name == "retrieval_step":
        if spec.budget is None or spec.budget < 0:
            raise ValueError("the retrieval_step filter needs --max_retrieval_budget >= 0")
        return pred[: spec.budget]
    if name == "llm":
        raise NotImplementedError("chunk filter 'llm' is not implemented (DESIGN §9.3)")
    raise ValueError(f"unknown chunk filter {name!r}; choose one of {', '.join(FILTERS)}")


def index_to_text(record: Mapping[str, Any]) -> dict[int, str]:
    """Map chunk index -> text from the record's two (index, text) lists."""
    table: dict[int, str] = {}
    for idx_key, txt_key in (("sf_idx", "sf_texts"), ("pred_idx", "pred_texts")):
        idx, txt = record.get(idx_key) or [], record.get(txt_key) or []
        if len(idx) != len(txt):
            raise ValueError(
                f"record {record.get('id')!r}: {idx_key} has {len(idx)} entries but {txt_key} has {len(txt)}"
            )
        table.update(zip(idx, txt))
    return table


def apply_filter(
    record: Mapping[str, Any], spec: FilterSpec, sort_by_index: bool = False
) -> tuple[list[int], list[str]]:
    """(kept indices, their texts). ``sort_by_index`` re-sorts to document order (BabiLong reader);
    the open-QA reader keeps retrieval order."""
    kept = filter_indices(record, spec)
    if sort_by_index:
        kept = sorted(kept)
    table = index_to_text(record)
    missing = [i for i in kept if i not in table]
    if missing:
        raise ValueError(f"record {record.get('id')!r}: no text for chunk indices {missing}")
    return kept, [table[i] for i in kept]
