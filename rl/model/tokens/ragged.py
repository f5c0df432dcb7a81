"""Token ids of many chunks stored flat, and padded encoder batches cut from them with numpy.

A 1M-token haystack is 40 000 chunks: as Python lists, building, cutting, framing and padding
them cost more CPU time than the GPU takes to embed them. Here the ids live in one int32 array
with per-chunk starts and lengths; a padded batch for any subset of chunks is a few vectorised
gathers. Item access still returns a plain list (states are spliced from a handful of chunks).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from rl.model.tokens.layout import TokenLayout


class RaggedIds(Sequence):
    """Id lists ``flat[starts[j] : starts[j] + lens[j]]``, j < n."""

    __slots__ = ("flat", "starts", "lens")

    def __init__(self, flat: np.ndarray, starts: np.ndarray, lens: np.ndarray):
        self.flat, self.starts, self.lens = flat, starts, lens

    @classmethod
    def tiling(cls, flat: np.ndarray, lens: np.ndarray) -> RaggedIds:
        """Items of lengths ``lens`` laid end to end in ``flat``."""
        starts = np.zeros(len(lens), dtype=np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        return cls(flat, starts, lens)

    @classmethod
    def from_lists(cls, lists: Sequence[Sequence[int]]) -> RaggedIds:
        if isinstance(lists, RaggedIds):
            return lists
        lens = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
        flat = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int32, count=int(lens.sum()))
        return cls.tiling(flat, lens)

    @classmethod
    def concat(cls, parts: Sequence[Sequence[Sequence[int]]]) -> RaggedIds:
        """The items of every part (a RaggedIds or any sequence of id lists) in order; one
        RaggedIds part is returned as it is."""
        if len(parts) == 1:
            return cls.from_lists(parts[0])
        dense = [cls.from_lists(p).compact() for p in parts]
        lens = np.concatenate([p.lens for p in dense]) if dense else np.zeros(0, np.int64)
        flat = np.concatenate([p.flat for p in dense]) if dense else np.zeros(0, np.int32)
        return cls.tiling(flat, lens)

    def compact(self) -> RaggedIds:
        """The same items tiling a fresh ``flat`` in order (one vectorised gather)."""
        tiled = RaggedIds.tiling(self.flat, self.lens)
        if len(self.flat) == int(self.lens.sum()) and np.array_equal(tiled.starts, self.starts):
            return self
        pos = np.arange(int(self.lens.sum())) + np.repeat(self.starts - tiled.starts, self.lens)
        return RaggedIds.tiling(self.flat[pos], self.lens.copy())

    def cut(self, n: int) -> RaggedIds:
        """Every item cut to its first ``n`` ids (shares ``flat``)."""
        return RaggedIds(self.flat, self.starts, np.minimum(self.lens, n))

    def __len__(self) -> int:
        return len(self.lens)

    def __getitem__(self, j: Any) -> Any:
        if isinstance(j, slice):
            return [self[i] for i in range(*j.indices(len(self)))]
        s = int(self.starts[j])
        return self.flat[s : s + int(self.lens[j])].tolist()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or len(other) != len(self):
            return False
        return all(list(self[i]) == list(other[i]) for i in range(len(self)))

    __hash__ = None  # type: ignore[assignment]


class IdLists:
    """A set of id lists to embed (states, or chunks already framed)."""

    def __init__(self, seqs: Sequence[Sequence[int]]):
        self.seqs = seqs
        self.lens = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))

    def __len__(self) -> int:
        return len(self.seqs)

    def rows(self, idx: np.ndarray, width: int, pad: int, left: bool) -> tuple[np.ndarray, np.ndarray]:
        lens = self.lens[idx]
        mask = _mask(lens, width, left)
        ids = np.full((len(idx), width), pad, dtype=np.int64)
        ids[mask] = np.fromiter(
            itertools.chain.from_iterable(self.seqs[i] for i in idx), dtype=np.int64, count=int(lens.sum())
        )  # row-major fill keeps each sequence's order
        return ids, mask

    def packed(self, lo: int, hi: int) -> np.ndarray:
        """Sequences ``[lo, hi)`` laid end to end, no padding (the packed encoder's input)."""
        return np.fromiter(
            itertools.chain.from_iterable(self.seqs[i] for i in range(lo, hi)),
            dtype=np.int64,
            count=int(self.lens[lo:hi].sum()),
        )


class FramedIds:
    """Chunks framed as actions, ``[bos] content[:action_content] [sep]`` of ``layout``, on the fly
    from a RaggedIds."""

    def __init__(self, content: RaggedIds, layout: TokenLayout):
        self.content, self.bos, self.sep = content, layout.bos, layout.sep
        self.body = np.minimum(content.lens, layout.action_content)
        self.lens = self.body + layout.n_special

    def __len__(self) -> int:
        return len(self.body)

    def rows(self, idx: np.ndarray, width: int, pad: int, left: bool) -> tuple[np.ndarray, np.ndarray]:
        lens, body = self.lens[idx], self.body[idx]
        mask = _mask(lens, width, left)
        ids = np.full((len(idx), width), pad, dtype=np.int64)
        first = (width - lens if left else np.zeros_like(lens))[:, None]  # column of each row's first token
        off = first + (1 if self.bos is not None else 0)
        cols = np.arange(width)[None, :]
        inside = (cols >= off) & (cols < off + body[:, None])
        src = self.content.starts[idx][:, None] + (cols - off)
        ids[inside] = self.content.flat[src[inside]]
        rows = np.arange(len(idx))
        if self.bos is not None:
            ids[rows, first[:, 0]] = self.bos
        ids[rows, (off + body[:, None])[:, 0]] = self.sep
        return ids, mask

    def packed(self, lo: int, hi: int) -> np.ndarray:
        """Framed chunks ``[lo, hi)`` laid end to end, no padding (the packed encoder's input)."""
        lens, body = self.lens[lo:hi], self.body[lo:hi]
        first = np.concatenate(([0], np.cumsum(lens[:-1])))  # each chunk's first position
        at = np.arange(int(lens.sum())) - np.repeat(first, lens)  # position inside its chunk
        row = np.repeat(np.arange(hi - lo), lens)
        k = at - (1 if self.bos is not None else 0)  # index into the content
        inside = (k >= 0) & (k < body[row])
        ids = np.full(len(at), self.sep, dtype=np.int64)  # whatever is neither [bos] nor content
        ids[inside] = self.content.flat[self.content.starts[lo:hi][row[inside]] + k[inside]]
        if self.bos is not None:
            ids[first] = self.bos
        return ids


def _mask(lens: np.ndarray, width: int, left: bool) -> np.ndarray:
    cols = np.arange(width)
    return cols >= (width - lens)[:, None] if left else cols < lens[:, None]


def as_seq_set(seqs: Any) -> Any:
    """IdLists / FramedIds pass through; anything else is a sequence of id lists."""
    return seqs if isinstance(seqs, (IdLists, FramedIds)) else IdLists(seqs)
