"""What the Q-network computes once per sample and keeps: content token ids and chunk embeddings (DESIGN §3.4).

The caches belong to the Q-network and are keyed by the identity of the object they describe (an
episode, or a sample the evaluation haystack cache loaded). An entry is dropped when its key
object is garbage collected, so a finished episode's tokens and embeddings die with it, as
they would if they were attributes of the episode, without the Q-network writing onto the
environment's objects.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

from envs.env import Episode
from rl.model.tokens import SampleTokens

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


class QNetworkCaches:
    """The Q-network's per-sample state: tokens per episode, tokens handed over per sample by the
    evaluation haystack cache, and chunk embeddings per episode for the online and the target
    action encoder."""

    def __init__(self) -> None:
        self.tokens: IdentityCache[Episode, SampleTokens] = IdentityCache()
        self.pretokenized: IdentityCache[dict, SampleTokens] = IdentityCache()
        self.chunks: dict[str, IdentityCache[Episode, ChunkEmbeddings]] = {
            "online": IdentityCache(),
            "target": IdentityCache(),
        }

    def sizes(self) -> dict[str, int]:
        """Entries held (for tests and memory checks)."""
        return {
            "tokens": len(self.tokens),
            "pretokenized": len(self.pretokenized),
            **{f"chunks_{k}": len(v) for k, v in self.chunks.items()},
        }
