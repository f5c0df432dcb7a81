"""Factorised Q-function with twin heads, behaviour policy and soft target values (DESIGN §4).

Q(s, a) = ⟨e_s, ẽ_a⟩ = q1 + q2, where head h takes the h-th half of both vectors. Acting and
greedy evaluation use Q; the loss regresses each head to half of the λ-return; the target value
is V = V_1 + V_2 with V_h a top-k soft maximum of the target head h over available chunks.
"""

from __future__ import annotations

import torch

NEG_INF = float("-inf")


def q_all(state_emb: torch.Tensor, action_emb: torch.Tensor) -> torch.Tensor:
    """Q for every chunk: [d] · [N, d] -> [N] (one matrix-vector product)."""
    return action_emb.float() @ state_emb.float()


def twin_heads(state_emb: torch.Tensor, action_emb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-transition heads: [B, d] × [B, d] -> (q1 [B], q2 [B])."""
    h = state_emb.shape[-1] // 2
    prod = state_emb.float() * action_emb.float()
    return prod[:, :h].sum(-1), prod[:, h:].sum(-1)


def masked_topk(scores: torch.Tensor, available: torch.Tensor, k: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-min(k, |A|) available chunks: (values, indices); k None = all available."""
    n_avail = int(available.sum())
    kk = n_avail if k is None else min(int(k), n_avail)
    masked = scores.masked_fill(~available, NEG_INF)
    return torch.topk(masked, kk, dim=-1)


def rotated_scores(rotated: torch.Tensor, state_emb: torch.Tensor, heads: bool) -> torch.Tensor:
    """Scores of S states against their rotated chunks ã [S, N, d], state embeddings [S, d]:
    Q(s, a) = ⟨s, ã⟩ [S, N], or with ``heads`` both heads q_h = ⟨s_h, ã_h⟩ [S, 2, N] (h = each
    half of the vectors). One batched product per head for all states."""
    rotated, s = rotated.float(), state_emb.float()
    if not heads:
        return torch.einsum("snd,sd->sn", rotated, s)
    h = s.shape[-1] // 2
    halves = (
        torch.einsum("snd,sd->sn", rotated[..., :h], s[:, :h]),
        torch.einsum("snd,sd->sn", rotated[..., h:], s[:, h:]),
    )
    return torch.stack(halves, dim=1)


def soft_topk_probs(
    q: torch.Tensor, available: torch.Tensor, k: int | None, alpha: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The soft top-k behaviour policy (DESIGN §4.2) of R states at once, from Q [R, N] and
    availability [R, N] (pads unavailable): (probs [R, kk] float64, chunk indices [R, kk], support
    [R]) with kk = min(k, N). Row r's first support[r] = min(k, |A_r|) entries are its top chunks
    by Q, probs ∝ exp((Q − Q_max)/α); the rest have probability 0."""
    n = q.shape[-1]
    kk = n if k is None else min(int(k), n)
    vals, idx = torch.topk(q.masked_fill(~available, NEG_INF), kk, dim=-1)
    support = torch.clamp(available.sum(-1), max=kk)
    logits = (vals - vals[:, :1]) / alpha  # the tail past the support is -inf: probability 0
    return torch.softmax(logits.double(), -1), idx, support


def soft_topk_draws(
    q: torch.Tensor, available: torch.Tensor, k: int | None, alpha: float, generator: torch.Generator | None
) -> list[int]:
    """One chunk per row drawn from :func:`soft_topk_probs`, rows in order, each from its
    support's probabilities alone on the CPU ``generator`` (a draw consumes randomness per
    category, so the stream is that of one draw per state over its top-min(k, |A|)). Every row
    needs an available chunk. One device-to-host copy for all rows."""
    probs, idx, support = soft_topk_probs(q, available, k, alpha)
    kk = probs.shape[1]
    host = torch.cat([probs, idx.double(), support.double().unsqueeze(1)], 1).cpu()
    chunks, sizes = host[:, kk:-1].long().tolist(), host[:, -1].long().tolist()
    picks = []
    for r, n in enumerate(sizes):
        if n == 0:
            raise ValueError("the soft top-k policy needs an available chunk in every state")
        pick = torch.multinomial(host[r, :n], 1, generator=generator).item()
        picks.append(chunks[r][pick])
    return picks


def sample_policy(
    q: torch.Tensor, available: torch.Tensor, k: int | None, alpha: float, generator: torch.Generator | None
) -> int:
    """Soft top-k behaviour policy (DESIGN §4.2) of one state: softmax((Q − Q_max)/α) over the top-k available."""
    return soft_topk_draws(q.unsqueeze(0), available.unsqueeze(0), k, alpha, generator)[0]


def soft_values(
    heads: torch.Tensor,
    available: torch.Tensor,
    k: int | None,
    alpha: float,
    soft: bool = True,
    legacy_topk_before_mask: bool = False,
) -> torch.Tensor:
    """V(s) = V_1 + V_2 of the target network (DESIGN §4.4) for S states, from both heads
    q′_h [S, 2, N] of every chunk and availability A [S, N] bool:

    soft: V_h = M + α·log Σ_{a ∈ C_h} exp((q′_h(a) − M)/α), C_h = the top-min(k, |A|) available
    chunks by q′_h, M = their largest q′_h (k None: all available).
    not soft ("w/o Soft-Q"): V_h = max_{a ∈ A} q′_h(a).
    legacy_topk_before_mask: the reference's top-k over all N chunks, then intersected with A.
    A state with nothing available has V = 0.
    """
    avail = available.unsqueeze(1).expand_as(heads)
    n = heads.shape[-1]
    any_avail = available.any(-1)
    if not soft:
        v = heads.masked_fill(~avail, NEG_INF).amax(-1)
    elif legacy_topk_before_mask:
        kk = n if k is None else min(int(k), n)
        vals, idx = torch.topk(heads, kk, dim=-1)
        keep = torch.gather(avail, -1, idx)
        m = vals.amax(-1, keepdim=True)
        mass = torch.exp((vals - m) / alpha).masked_fill(~keep, 0.0).sum(-1)
        v = m.squeeze(-1) + alpha * torch.log(torch.clamp(mass, min=1e-10))
    else:
        n_avail = available.sum(-1)
        kk = n if k is None else min(int(k), n)
        vals, _ = torch.topk(heads.masked_fill(~avail, NEG_INF), kk, dim=-1)
        # states with fewer than k available chunks: the tail of the top-k is -inf -> weight 0
        rank_ok = torch.arange(kk, device=vals.device) < n_avail.view(-1, 1, 1)
        vals = vals.masked_fill(~rank_ok, NEG_INF)
        m = vals[..., :1]
        m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        v = m_safe.squeeze(-1) + alpha * torch.logsumexp((vals - m_safe) / alpha, -1)
    v = v.sum(1)
    return torch.where(any_avail, v, torch.zeros_like(v))
