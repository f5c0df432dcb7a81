"""What the Q-network computes once per sample and keeps: content token ids and chunk embeddings (DESIGN §3.4).

The caches belong to the Q-network and are keyed by the identity of the object they describe (an
episode, a sample the evaluation haystack cache loaded, or a :class:`Haystack` several episodes
share). An entry is dropped when its key object is garbage collected, so a finished episode's
tokens and embeddings die with it, as they would if they were attributes of the episode, without
the Q-network writing onto the environment's objects.

Many questions over one haystack: evaluation and the retriever tool join the episodes whose
samples hold the same chunk list (the same list object, or an equal one) to one :class:`Haystack`
(:meth:`rl.model.qnetwork.QNetwork.prepare` with ``share``), which owns the chunks' token ids and their
un-rotated embeddings u_j once for all of them. Sharing u_j is exact: u_j depends on the chunk's
ids and the action encoder only; each question's positions rotate it at every step
(``QNetwork.rotate``). Training never joins episodes (with dropout on, each episode's chunk
embeddings are a draw of their own).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

from envs.env import Episode
from rl.model.tokens.tokenize import HaystackTokens, SampleTokens

K = TypeVar("K")
V = TypeVar("V")


class IdentityCache(Generic[K, V]):
    """``key -> value`` by ``id(key)``, the entry removed when ``key`` is collected. Keys must
    support weak references (plain dicts do not; a dict subclass does)."""

    def __init__(self) -> None:
        self._items: dict[int, tuple[V, weakref.finalize]] = {}

    def get(self, key: K) -> V | None:
        item = self._items.get(id(key))
        return None if item is None else item[0]

    def put(self, key: K, value: V) -> None:
        k = id(key)
        item = self._items.get(k)
        if item is not None:  # the same live object: keep its finalizer
            self._items[k] = (value, item[1])
            return
        try:
            # the id is free for reuse only after the object is gone, i.e. after this has run
            done = weakref.finalize(key, self._items.pop, k, None)
        except TypeError:
            raise TypeError(
                f"{type(key).__name__} objects cannot be weakly referenced, so a cache keyed by "
                f"them could not drop its entries; key it by an object that can"
            ) from None
        done.atexit = False
        self._items[k] = (value, done)

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        for _, done in list(self._items.values()):
            done.detach()
        self._items.clear()


@dataclass
class ChunkEmbeddings:
    """Un-rotated embeddings u_j of every chunk of a sample, valid while ``stamp`` holds."""

    stamp: tuple[int, bool, int]  # (weights version, dropout mode, rollout tick or 0)
    emb: torch.Tensor  # [N, d]


class Haystack:
    """A chunk list that several episodes' samples hold: its token ids (``tokens``, set when first
    needed) once; its chunk embeddings are the Q-network's chunk cache entry keyed by this object.
    It keeps the list itself, so the list's identity cannot pass to another object while it lives."""

    __slots__ = ("chunks", "tokens", "__weakref__")

    def __init__(self, chunks: list[str]):
        self.chunks = chunks
        self.tokens: HaystackTokens | None = None


class SharedHaystacks:
    """The live :class:`Haystack` objects, found by content: the same list object, or an equal list
    (compared in full, so two lists that differ in one chunk are two haystacks). Held weakly: a
    haystack lives while an episode joined to it, or a caller, holds it."""

    def __init__(self) -> None:
        self._live: dict[tuple[int, int, int], list[weakref.ref[Haystack]]] = {}

    def find_or_add(self, chunks: list[str]) -> Haystack:
        # a cheap fingerprint narrows the candidates; the full comparison decides
        key = (len(chunks), hash(chunks[0]), hash(chunks[-1])) if chunks else (0, 0, 0)
        bucket = self._live.setdefault(key, [])
        for ref in bucket:
            h = ref()
            if h is not None and (h.chunks is chunks or h.chunks == chunks):
                return h
        h = Haystack(chunks)
        bucket.append(weakref.ref(h, lambda ref, key=key: self._drop(key, ref)))
        return h

    def _drop(self, key: tuple[int, int, int], ref: weakref.ref[Haystack]) -> None:
        bucket = self._live.get(key, [])
        if ref in bucket:
            bucket.remove(ref)
        if not bucket:
            self._live.pop(key, None)

    def __len__(self) -> int:
        return sum(ref() is not None for bucket in self._live.values() for ref in bucket)


class QNetworkCaches:
    """The Q-network's per-sample state: tokens per episode, tokens handed over per sample by the
    evaluation haystack cache, the haystack each joined episode shares, and chunk embeddings per
    episode (or per shared haystack) for the online and the target action encoder."""

    def __init__(self) -> None:
        self.tokens: IdentityCache[Episode, SampleTokens] = IdentityCache()
        self.pretokenized: IdentityCache[dict, SampleTokens] = IdentityCache()
        self.haystack_of: IdentityCache[Episode, Haystack] = IdentityCache()
        self.haystacks = SharedHaystacks()
        self.chunks: dict[str, IdentityCache[Episode | Haystack, ChunkEmbeddings]] = {
            "online": IdentityCache(),
            "target": IdentityCache(),
        }

    def join_haystack(self, ep: Episode) -> Haystack:
        """The haystack of the episode's chunk list, shared with every live episode over the same
        list object or an equal list; the episode is joined to it (once)."""
        hay = self.haystack_of.get(ep)
        if hay is None:
            hay = self.haystacks.find_or_add(ep.sample["chunks"])
            self.haystack_of.put(ep, hay)
        return hay

    def sizes(self) -> dict[str, int]:
        """Entries held (for tests and memory checks)."""
        return {
            "tokens": len(self.tokens),
            "pretokenized": len(self.pretokenized),
            **{f"chunks_{k}": len(v) for k, v in self.chunks.items()},
        }
