"""A sample's token ids and the states and actions spliced from them (DESIGN §2.6).

Chunks are tokenised once per sample (content ids without special tokens, cut at the largest cap
any phase needs, rl/model/tokens/tokenize.py) and every state is spliced from those cached segments:
``[CLS] q [SEP] c1 [SEP] … cm [SEP]``, never by joining and re-splitting text (DESIGN §11 #20).
"""

from __future__ import annotations

from collections.abc import Sequence

from rl.model.tokens.layout import TokenLayout


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
