"""The special tokens and caps a state and an action are framed with (DESIGN §2.6)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TokenLayout:
    """Special tokens and caps used to frame chunks and splice states. What is derived from them
    (the special tokens per text, the content caps) is computed once, when the layout is built (the
    network binds them then)."""

    bos: int | None  # [CLS] (or BOS) at the start of a sequence
    sep: int  # separator after every segment ([SEP], else EOS)
    pad: int
    action_cap: int  # max_action_length (specials included)
    memory_cap: int  # max_action_length_in_memory (specials included)
    state_cap: int  # whole-state cap
    padding_side: str = "right"
    # special tokens around a text encoded alone, [CLS] text [SEP] (text [SEP] without a CLS or BOS
    # token): an action's frame, and what each text adds to the records' text length
    n_special: int = field(init=False)
    action_content: int = field(init=False)  # content ids an action keeps
    memory_content: int = field(init=False)  # content ids a state segment keeps
    content_cut: int = field(init=False)  # content ids are kept up to the largest cap any phase needs

    def __post_init__(self) -> None:
        n_special = 2 if self.bos is not None else 1
        action = max(1, self.action_cap - n_special)
        memory = max(1, self.memory_cap - 2)
        object.__setattr__(self, "n_special", n_special)
        object.__setattr__(self, "action_content", action)
        object.__setattr__(self, "memory_content", memory)
        object.__setattr__(self, "content_cut", max(action, memory))


def token_layout(
    tokenizer: Any, action_cap: int, memory_cap: int, state_cap: int | None, model_max: int
) -> TokenLayout:
    bos = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    sep = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    if sep is None:
        raise ValueError("the tokenizer has neither a SEP nor an EOS token to separate state segments")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else sep
    cap = int(state_cap) if state_cap else int(model_max)
    return TokenLayout(
        bos, sep, pad, int(action_cap), int(memory_cap), cap, getattr(tokenizer, "padding_side", "right")
    )
