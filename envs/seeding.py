"""Per-component random generators (DESIGN §5.9).

Every sampler and builder derives its own generator from (run seed, component name, ...),
so no component depends on what another drew, and nothing reseeds numpy's global RNG.
"""

from __future__ import annotations

import hashlib

import numpy as np


def derive_seed(seed: int, *keys: object) -> int:
    """A stable 64-bit seed from the run seed and any number of keys (str/int)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(str(int(seed)).encode())
    for k in keys:
        h.update(b"\x1f")
        h.update(str(k).encode())
    return int.from_bytes(h.digest(), "little")


def derive_rng(seed: int, *keys: object) -> np.random.Generator:
    """A numpy Generator that depends only on (seed, *keys)."""
    return np.random.default_rng(derive_seed(seed, *keys))
