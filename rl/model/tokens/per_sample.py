"""What is kept per object and dropped with it (DESIGN §3.4): a cache keyed by an object's identity,
and the chunk lists several episodes share.

Entries are keyed by the identity of the object they describe (an episode, a sample the evaluation
haystack cache loaded, or a :class:`Haystack` several episodes share) and dropped when that object
is garbage collected, so a finished episode's token ids (rl/model/tokens/sample_input.py) and chunk
embeddings (rl/model/caches.py) die with it, as they would if they were attributes of the episode,
without the Q-network writing onto the environment's objects.

Many questions over one haystack: evaluation and the retriever tool join the episodes whose
samples hold the same chunk list (the same list object, or an equal one) to one :class:`Haystack`
(:meth:`rl.model.qnetwork.QNetwork.prepare` with ``share``), which owns the chunks' token ids and their
un-rotated embeddings u_j once for all of them. Sharing u_j is exact: u_j depends on the chunk's
ids and the action encoder only; each question's positions rotate it at every step
(``QNetwork._rotate``). Training never joins episodes (with dropout on, each episode's chunk
embeddings are a draw of their own).
"""

from __future__ import annotations

import weakref
from typing import Generic, TypeVar

from envs.env import Episode
from rl.model.tokens.tokenize import HaystackTokens

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
    (compared in full, so two lists that differ in one chunk are two haystacks); and the haystack
    each joined episode shares. Held weakly: a haystack lives while an episode joined to it, or a
    caller, holds it."""

    def __init__(self) -> None:
        self._live: dict[tuple[int, int, int], list[weakref.ref[Haystack]]] = {}
        self.joined: IdentityCache[Episode, Haystack] = IdentityCache()  # episode -> the haystack it joined

    def join(self, ep: Episode) -> Haystack:
        """The haystack of the episode's chunk list, shared with every live episode over the same
        list object or an equal list; the episode is joined to it (once)."""
        hay = self.joined.get(ep)
        if hay is None:
            hay = self.find_or_add(ep.sample["chunks"])
            self.joined.put(ep, hay)
        return hay

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
