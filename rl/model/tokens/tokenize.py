"""A sample's token ids (``SampleTokens``; a shared chunk list's, ``HaystackTokens``) and the code
that builds them: many chunks tokenised fast (the Rust backend called directly), and slices tokenised
on a worker thread while the caller (the GPU) works on the previous slice
(``speed.overlap_tokenization``).

The ids are exactly those of the tokenizer's Python API with ``add_special_tokens=False`` and no
truncation (tests/rl/test_speed.py compares them).
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np

from rl.model.tokens.layout import TokenLayout
from rl.model.tokens.ragged import RaggedIds


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


class TokenSlice(NamedTuple):
    """Content ids of chunks ``[start, start + len(ids))``, cut at the largest cap."""

    start: int
    ids: RaggedIds
    action_ids: RaggedIds | None  # with the passage prefix; None when there is none (= ids)
    count: int  # tokens before the cut (for the text length, docs/EVALUATION.md)


# One Rust encoder per tokenizer object, built on first use and dropped with the tokenizer.
_RUST_ENCODERS: weakref.WeakKeyDictionary[Any, Callable[[list[str]], RaggedIds]] = weakref.WeakKeyDictionary()


def _rust_encoder(tokenizer: Any) -> Callable[[list[str]], RaggedIds] | None:
    """Encode texts with the Rust backend of a fast tokenizer directly (no truncation, no
    padding, no offsets): several times faster than the Python wrapper at 10^5 chunks."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    cached = _RUST_ENCODERS.get(tokenizer)
    if cached is not None:
        return cached
    from tokenizers import Tokenizer

    raw = Tokenizer.from_str(backend.to_str())  # a private copy: the shared tokenizer keeps its settings
    raw.no_truncation()
    raw.no_padding()
    encode = getattr(raw, "encode_batch_fast", raw.encode_batch)

    def run(texts: list[str]) -> RaggedIds:
        encs = encode(texts, add_special_tokens=False)
        lens = np.fromiter((len(e) for e in encs), dtype=np.int64, count=len(encs))
        flat = np.fromiter(itertools.chain.from_iterable(e.ids for e in encs), dtype=np.int32, count=int(lens.sum()))
        return RaggedIds.tiling(flat, lens)

    _RUST_ENCODERS[tokenizer] = run
    return run


def encode_texts(tokenizer: Any, texts: Sequence[str], cut: int) -> tuple[RaggedIds, int]:
    """Content ids of ``texts`` cut at ``cut`` tokens, and their total length before the cut."""
    fast = _rust_encoder(tokenizer)
    if fast is not None:
        ids = fast(list(texts))
    else:
        ids = RaggedIds.from_lists(
            tokenizer(list(texts), add_special_tokens=False, truncation=False, verbose=False)["input_ids"]
        )
    return ids.cut(cut), int(ids.lens.sum())


def stream_chunk_tokens(
    tokenizer: Any,
    chunks: Sequence[str],
    cut: int,
    passage_prefix: str = "",
    first: int = 2048,
    largest: int = 65536,
    ahead: bool = True,
) -> Iterator[TokenSlice]:
    """The chunks' ids in slices that double from ``first`` to ``largest`` chunks. With ``ahead``
    the next slice is tokenised on a worker thread while the caller works on this one (the Rust
    tokenizer releases the GIL), so a GPU can embed slice k while the CPU tokenises slice k + 1. Ids
    are cut at ``cut`` tokens (TokenLayout.content_cut)."""

    def work(lo: int, hi: int) -> TokenSlice:
        ids, count = encode_texts(tokenizer, chunks[lo:hi], cut)
        act = encode_texts(tokenizer, [passage_prefix + c for c in chunks[lo:hi]], cut)[0] if passage_prefix else None
        return TokenSlice(lo, ids, act, count)

    bounds, lo, size = [], 0, max(1, first)
    while lo < len(chunks):
        bounds.append((lo, min(len(chunks), lo + size)))
        lo, size = lo + size, min(size * 2, max(first, largest))
    if not ahead:
        yield from (work(lo, hi) for lo, hi in bounds)
        return
    pending = _TOKENIZE_POOL.submit(work, *bounds[0]) if bounds else None
    for k in range(len(bounds)):
        part = pending.result()
        pending = _TOKENIZE_POOL.submit(work, *bounds[k + 1]) if k + 1 < len(bounds) else None
        yield part


# one long-lived worker (joining a fresh pool's thread at the end of every haystack cost time)
_TOKENIZE_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qrag-tokenize")


# -- a sample tokenised once ------------------------------------------------------------------
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
    """A SampleTokens from the question and the chunk slices of :func:`stream_chunk_tokens`."""
    return with_question(tokenizer, question, haystack_tokens(parts), layout, query_prefix)


def haystack_tokens(parts: Sequence[TokenSlice]) -> HaystackTokens:
    """A HaystackTokens from the chunk slices of :func:`stream_chunk_tokens`."""
    chunk_ids = RaggedIds.concat([part.ids for part in parts])
    action = (
        RaggedIds.concat([part.action_ids for part in parts]) if parts and parts[0].action_ids is not None else None
    )
    return HaystackTokens(chunk_ids, chunk_ids if action is None else action, sum(part.count for part in parts))


def with_question(
    tokenizer: Any, question: str, hay: HaystackTokens, layout: TokenLayout, query_prefix: str = ""
) -> SampleTokens:
    """One question's SampleTokens over shared chunk ids (the id arrays are not copied)."""
    q, q_count = question_ids(tokenizer, question, layout, query_prefix)
    text_len = None if hay.count is None else q_count + hay.count + layout.n_special * (len(hay.chunks) + 1)
    return SampleTokens(q, hay.chunks, hay.action_chunks, text_len)


def question_ids(tokenizer: Any, question: str, layout: TokenLayout, query_prefix: str = "") -> tuple[list[int], int]:
    """A question's content ids (the query prefix first), cut at the largest cap as every state
    holds them, and its token count before the cut."""
    ids, count = encode_texts(tokenizer, [query_prefix + question], layout.content_cut)
    return ids[0], count
