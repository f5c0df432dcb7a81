"""Token ids of chunks and states (DESIGN §2.6).

Chunks are tokenised once per sample (content ids without special tokens, cut at the largest cap
any phase needs) and every state is spliced from those cached segments:
``[CLS] q [SEP] c1 [SEP] … cm [SEP]``, never by joining and re-splitting text (DESIGN §11 #20).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rl.model.fast.ragged import RaggedIds
from rl.model.fast.tokenize import TokenSlice, encode_texts, stream_chunk_tokens


@dataclass
class TokenLayout:
    """Special tokens and caps used to frame chunks and splice states."""

    bos: int | None  # [CLS] (or BOS) at the start of a sequence
    sep: int  # separator after every segment ([SEP], else EOS)
    pad: int
    action_cap: int  # max_action_length (specials included)
    memory_cap: int  # max_action_length_in_memory (specials included)
    state_cap: int  # whole-state cap
    padding_side: str = "right"

    @property
    def action_content(self) -> int:
        return max(1, self.action_cap - (2 if self.bos is not None else 1))

    @property
    def memory_content(self) -> int:
        return max(1, self.memory_cap - 2)

    @property
    def content_cut(self) -> int:
        """Content ids are kept up to the largest cap any phase needs."""
        return max(self.action_content, self.memory_content)


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


class SampleTokens:
    """Content token ids (no specials) of one sample's question and chunks, cut once. Chunks are
    a RaggedIds (flat arrays) or any sequence of id lists.

    ``text_len`` is the exact encoder-token length of question + chunks with their special
    tokens (DESIGN §2.7), counted before the cut; None when unknown (then recomputed from the cut ids).
    """

    __slots__ = ("question", "chunks", "action_chunks", "text_len")

    def __init__(
        self,
        question: list[int],
        chunks: Sequence[list[int]],
        action_chunks: Sequence[list[int]] | None = None,
        text_len: int | None = None,
    ):
        self.question, self.chunks = question, chunks
        self.action_chunks = action_chunks if action_chunks is not None else chunks
        self.text_len = text_len


class HaystackTokens:
    """Content token ids (no specials) of a chunk list alone, cut once: what every question asked of
    the same chunks shares (:func:`with_question` adds one question).

    ``count`` is the chunks' token total before the cut (None when unknown)."""

    __slots__ = ("chunks", "action_chunks", "count")

    def __init__(self, chunks: Sequence[list[int]], action_chunks: Sequence[list[int]], count: int | None):
        self.chunks, self.action_chunks, self.count = chunks, action_chunks, count


def tokenize_sample(
    tokenizer: Any,
    question: str,
    chunks: Sequence[str],
    layout: TokenLayout,
    query_prefix: str = "",
    passage_prefix: str = "",
    batch: int = 50000,
) -> SampleTokens:
    """Tokenise a sample once: question + every chunk, content ids cut at the largest cap."""
    hay = tokenize_chunks(tokenizer, chunks, layout, passage_prefix, batch)
    return with_question(tokenizer, question, hay, layout, query_prefix)


def tokenize_chunks(
    tokenizer: Any, chunks: Sequence[str], layout: TokenLayout, passage_prefix: str = "", batch: int = 50000
) -> HaystackTokens:
    """Tokenise a chunk list once, content ids cut at the largest cap."""
    parts = stream_chunk_tokens(
        tokenizer, chunks, layout.content_cut, passage_prefix, first=batch, largest=batch, ahead=False
    )
    return haystack_tokens(list(parts))


def assemble_tokens(
    tokenizer: Any, question: str, parts: Sequence[TokenSlice], layout: TokenLayout, query_prefix: str = ""
) -> SampleTokens:
    """A SampleTokens from the question and the chunk slices of :func:`rl.model.fast.tokenize.stream_chunk_tokens`."""
    return with_question(tokenizer, question, haystack_tokens(parts), layout, query_prefix)


def haystack_tokens(parts: Sequence[TokenSlice]) -> HaystackTokens:
    """A HaystackTokens from the chunk slices of :func:`rl.model.fast.tokenize.stream_chunk_tokens`."""
    chunk_ids = RaggedIds.concat([part.ids for part in parts]) if parts else RaggedIds.from_lists([])
    action = (
        RaggedIds.concat([part.action_ids for part in parts]) if parts and parts[0].action_ids is not None else None
    )
    return HaystackTokens(chunk_ids, chunk_ids if action is None else action, sum(part.count for part in parts))


def with_question(
    tokenizer: Any, question: str, hay: HaystackTokens, layout: TokenLayout, query_prefix: str = ""
) -> SampleTokens:
    """One question's SampleTokens over shared chunk ids (the id arrays are not copied)."""
    q, q_count = encode_texts(tokenizer, [query_prefix + question], layout.content_cut)
    n_special = 2 if layout.bos is not None else 1
    text_len = None if hay.count is None else q_count + hay.count + n_special * (len(hay.chunks) + 1)
    return SampleTokens(q[0], hay.chunks, hay.action_chunks, text_len)


def state_ids(
    tokens: SampleTokens, selected: Sequence[int], layout: TokenLayout, memory_content: int
) -> tuple[list[int], bool]:
    """Splice ``[CLS] q [SEP] c_j1 [SEP] …`` and apply the whole-state cap.

    Returns (ids, truncated). Over the cap, the first cap−1 tokens are kept and the separator
    appended (DESIGN §2.6).
    """
    ids: list[int] = [] if layout.bos is None else [layout.bos]
    ids += tokens.question[:memory_content]
    ids.append(layout.sep)
    for j in selected:
        ids += tokens.chunks[j][:memory_content]
        ids.append(layout.sep)
    if len(ids) > layout.state_cap:
        return ids[: layout.state_cap - 1] + [layout.sep], True
    return ids, False


def action_ids(tokens: SampleTokens, j: int, layout: TokenLayout) -> list[int]:
    body = tokens.action_chunks[j][: layout.action_content]
    return ([] if layout.bos is None else [layout.bos]) + body + [layout.sep]


def text_length(tokens: SampleTokens, n_special: int) -> int:
    """Encoder-token length of question + every chunk, each with its special tokens (DESIGN §2.7)."""
    if tokens.text_len is not None:
        return tokens.text_len
    return len(tokens.question) + n_special + sum(len(c) + n_special for c in tokens.chunks)
