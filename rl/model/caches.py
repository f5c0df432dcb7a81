"""What the Q-network computes once per sample and keeps of its own: chunk embeddings (DESIGN §3.4).

The token ids they are embedded from are the sample input's (rl/model/tokens/sample_input.py). Both
are keyed by the identity of the object they describe, an episode or a :class:`Haystack` several
episodes share, and die with it (rl/model/tokens/per_sample.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from envs.env import Episode
from rl.model.tokens.per_sample import Haystack, IdentityCache


@dataclass
class ChunkEmbeddings:
    """Un-rotated embeddings u_j of every chunk of a sample, valid while ``stamp`` holds."""

    stamp: tuple[int, bool, int]  # (weights version, dropout mode, rollout tick or 0)
    emb: torch.Tensor  # [N, d]


class QNetworkCaches:
    """The Q-network's per-sample state: chunk embeddings per episode (or per shared haystack) for
    the online and the target action encoder."""

    def __init__(self) -> None:
        self.chunks: dict[str, IdentityCache[Episode | Haystack, ChunkEmbeddings]] = {
            "online": IdentityCache(),
            "target": IdentityCache(),
        }

    def sizes(self) -> dict[str, int]:
        """Entries held (for tests and memory checks)."""
        return {f"chunks_{k}": len(v) for k, v in self.chunks.items()}
