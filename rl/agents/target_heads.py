"""Both heads of the target Q-network for every chunk of many states, one encoder pass.

SARSA needs Q′(s, a) of one chosen chunk, SAC-D the soft value over the policy's support; both
start from the same [S, 2, N] head scores of the target encoders, grouped by sample (the chunk
embeddings of a sample are computed once and rotated per state, as PQN's target values do).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from envs.env import Episode


@torch.no_grad()
def target_head_groups(
    learner, items: list[tuple[Episode, list[int]]], train: bool = False
) -> Iterator[tuple[list[int], torch.Tensor, torch.Tensor]]:
    """For the states ``items`` = (episode, chunks held) yield, per sample, (the items' indices,
    head scores [S, 2, N] float32 of the target network, availability [S, N] bool)."""
    agent = learner.agent
    if not items:
        return
    states = [agent.state_ids(ep, learner.sort_by_index, selected=sel) for ep, sel in items]
    s_emb = agent.embed(agent.target_state, states, train=train).float()
    groups: dict[int, list[int]] = {}
    for i, (ep, _) in enumerate(items):
        groups.setdefault(id(ep), []).append(i)
    agent.ensure_chunk_embeddings([ep for ep, _ in items], "target", train)
    h = s_emb.shape[-1] // 2
    for idx in groups.values():
        ep = items[idx[0]][0]
        u = agent.chunk_embeddings(ep, "target", train)
        avail_np = np.ones((len(idx), ep.n_chunks), dtype=bool)
        for row, i in enumerate(idx):
            avail_np[row, items[i][1]] = False
        avail = torch.from_numpy(avail_np).to(agent.device, non_blocking=True)
        rotated = agent.rotate(u.expand(len(idx), -1, -1), ep.codes(learner.env.pos, avail)).float()  # [S, N, d]
        s = s_emb[idx]
        heads = torch.stack(
            (
                torch.einsum("snd,sd->sn", rotated[..., :h], s[:, :h]),
                torch.einsum("snd,sd->sn", rotated[..., h:], s[:, h:]),
            ),
            dim=1,
        )
        yield idx, heads, avail
