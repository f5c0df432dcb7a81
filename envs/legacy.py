"""The ``legacy`` switches (DESIGN §11): each restores one defect of the reference (or of an earlier
round of this project: #49-50), all off by default.

:class:`Legacy` is their one statement: a field per switch with its doc. A run reads the composed
``legacy`` node once, with :meth:`Legacy.from_cfg`, where its objects are built (rl/run/), and hands
each component the booleans it reads at construction. The ConfigStore node ``legacy/none``
(rl/run/config.py) is :meth:`Legacy.defaults`; configs/legacy/ref.yaml turns every switch on.
A run folder saved before a switch existed lacks its key, which then reads as off.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any


def switch(doc: str) -> Any:
    """A legacy switch: off by default, with a one-line doc (its DESIGN §11 number first)."""
    return dataclasses.field(default=False, metadata={"doc": doc})


class LegacyError(ValueError):
    """Bad ``legacy`` values; ``lines`` holds one message per value."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


@dataclasses.dataclass(frozen=True)
class Legacy:
    """The run's switches; a field per switch, in DESIGN §11's order."""

    lambda_return_off_by_one: bool = switch("#1 λ-return's first recursion step uses V_L")
    drop_last_transition: bool = switch("#2 step L+1 times, never train the last transition")
    dropout_in_targets: bool = switch("#3 target encoders in train mode (noisy TD targets)")
    target_topk_before_mask: bool = switch("#4 target top-k over all chunks, then masked")
    oracle_stop: bool = switch("#6 test episodes stop when all gold chunks are held")
    repeat_llm_reward: bool = switch("#7 LLM reward paid at every step")
    silent_llm_failures: bool = switch("#9 LLM errors become silent zero rewards")
    babi_drop_last_question: bool = switch("#11 the last question of each bAbI file is unreachable")
    fixed_noise_seed: bool = switch("#12 noise sampler seeded 42, stateful")
    niah_raw_sf: bool = switch("#14 NIAH sf_idx with duplicates / the question's index")
    eval_resample: bool = switch("#22 eval samples redrawn with replacement at every evaluation")
    select_on_test: bool = switch("#22b best checkpoint chosen on the test split")
    prompt_extra_question_mark: bool = switch("#24 BabiLong prompt repeats the question mark")
    qa_f1_empty_conventions: bool = switch("#27 non-SQuAD empty-string F1")
    ignore_answer_aliases: bool = switch("#28 MuSiQue aliases ignored in answer metrics")
    sft_binary_loss: bool = switch("#49 SFT: per-chunk binary cross-entropy of Q (round 4)")
    sft_stop_at_first_miss: bool = switch("#50 SFT: no hop trained after the first wrong greedy pick (round 4)")
    best_keeps_earliest_tie: bool = switch("#51 model_best.pt kept on a tied evaluation return (strict >)")

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def defaults(cls) -> dict[str, bool]:
        """The node of ``legacy=none`` (what ConfigStore holds): every switch off."""
        return dataclasses.asdict(cls())

    @classmethod
    def reference(cls) -> Legacy:
        """Every reference behaviour restored (``legacy=ref``)."""
        return cls(**{name: True for name in cls.names()})

    @classmethod
    def errors(cls, node: Any) -> list[str]:
        """One line per value of the ``legacy`` node that is not a boolean and per key that is no
        switch (rl/run/validate.py reports them with the other keys)."""
        items = _items(node)
        if items is None:
            return [f"legacy={node!r}: expected the legacy switches (legacy=none, legacy=ref, legacy.<name>=true)"]
        out = []
        for key, value in items:
            if key not in cls.names():
                out.append(f"legacy.{key}: no such legacy switch; known: {', '.join(sorted(cls.names()))}")
            elif not isinstance(value, bool):
                out.append(f"legacy.{key}={value!r}: expected true or false")
        return out

    @classmethod
    def from_cfg(cls, node: Any) -> Legacy:
        """The switches of a composed ``legacy`` node (None or a missing key: off); a non-boolean
        value or an unknown key raises :class:`LegacyError`, one line each."""
        lines = cls.errors(node)
        if lines:
            raise LegacyError(lines)
        return cls(**dict(_items(node) or []))

    def pick(self, names: Iterable[str]) -> dict[str, bool]:
        """``{name: value}`` of the switches a component reads (its constructor's keywords)."""
        return {name: getattr(self, name) for name in names}


ALL_OFF = Legacy()  # the default of a builder's ``legacy`` argument: every switch off


def _items(node: Any) -> list[tuple[str, Any]] | None:
    """(key, value) of a plain or OmegaConf mapping, resolved; none for a null node; None for a
    node that is no mapping."""
    from omegaconf import OmegaConf

    if node is None:
        return []
    if OmegaConf.is_dict(node):
        node = OmegaConf.to_container(node, resolve=True)
    if not isinstance(node, dict):
        return None
    return [(str(k), v) for k, v in node.items()]
