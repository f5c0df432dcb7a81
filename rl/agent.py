"""The Q-RAG agent: encoders, chunk-embedding caches and the Q-function over a sample (SPEC §2-4).

Five roles, three modules (SPEC §2.1): E_s and E_a are trained; E_s′ and E_a′ are EMA targets;
the acting state encoder E_s^π is E_s itself (weights change only at optimiser steps, so an
alias equals the reference's hard copy), run in the dropout mode chosen for acting.
"""
from __future__ import annotations

import copy
import logging
from typing import Any, Sequence

import torch
from torch import nn

from envs.env import Episode, PositionSettings
from rl.encoders import (
    Embedder,
    SampleTokens,
    TokenLayout,
    action_ids,
    embed_sequences,
    load_backbone,
    load_tokenizer,
    state_ids,
    token_layout,
    tokenize_sample,
)
from rl.qfunc import q_all
from rl.rotary import HalfRotary

log = logging.getLogger(__name__)

_IGNORED_MODEL_KEYS = ("hidden_dim", "output_dim")


def autocast_dtype(precision: str) -> torch.dtype | None:
    if precision == "bf16":
        return torch.bfloat16
    if precision in ("tf32", "fp32"):
        return None
    raise ValueError(f"precision must be tf32, fp32 or bf16, got {precision!r}")


class QRAGAgent(nn.Module):
    def __init__(self, model_cfg: Any, layout_cfg: dict[str, Any], device: torch.device, precision: str = "tf32",
                 embed_batch_size: int = 10000, compile_encoders: bool = False):
        super().__init__()
        predictor = model_cfg.get("predictor", {}) or {}
        if any(predictor.get(k) is not None for k in _IGNORED_MODEL_KEYS):
            log.warning("algo.model.predictor.hidden_dim/output_dim are accepted and ignored: "
                        "Q-RAG applies no head to the pooled embedding (SPEC §2.4)")
        self.tokenizer = load_tokenizer(model_cfg)
        backbone = load_backbone(model_cfg)
        pooling = str(model_cfg.get("pooling", "mean"))
        self.state_enc = Embedder(backbone, pooling, float(model_cfg.get("pool_scale", 0.1)),
                                  bool(model_cfg.get("normalize", False)))
        self.action_enc = copy.deepcopy(self.state_enc)  # load once, deep-copy (SPEC §2.1)
        self.target_state = copy.deepcopy(self.state_enc).requires_grad_(False)
        self.target_action = copy.deepcopy(self.state_enc).requires_grad_(False)
        self.dim = self.state_enc.dim
        self.rope = HalfRotary(self.dim, interpolate_factor=float(predictor.get("interpolate_factor", 1)))
        model_max = int(getattr(backbone.config, "max_position_embeddings", 512))
        if getattr(backbone.config, "model_type", "") in ("xlm-roberta", "roberta"):
            model_max -= 2  # position ids start after the padding index
        self.layout: TokenLayout = token_layout(
            self.tokenizer, layout_cfg["max_action_length"], layout_cfg["max_action_length_in_memory"],
            layout_cfg.get("max_state_length"), model_max)
        eval_mem = layout_cfg.get("eval_max_action_length_in_memory")
        self.eval_memory_content = max(1, int(eval_mem) - 2) if eval_mem else self.layout.memory_content
        self.query_prefix = str(model_cfg.get("query_prefix", "") or "")
        self.passage_prefix = str(model_cfg.get("passage_prefix", "") or "")
        self.left_pad = pooling == "last" and self.layout.padding_side == "left"
        self.device = device
        self.amp = autocast_dtype(precision)
        self.embed_batch_size = int(embed_batch_size)
        self.to(device)
        # from_pretrained returns the backbone in eval mode inside a wrapper that says "train":
        # make every encoder's flag true for all its submodules, since set_mode trusts it.
        self.state_enc.train()
        self.action_enc.train()
        self.target_state.eval()
        self.target_action.eval()
        # Gradient-free passes (acting, chunk and target embeddings) may run through
        # torch.compile (dynamic shapes): less Python and launch overhead per forward. Kept in a
        # plain dict so the compiled wrappers stay out of state_dict; they share the weights.
        self._compiled: dict[int, Any] = {}
        if compile_encoders:
            for enc in (self.state_enc, self.action_enc, self.target_state, self.target_action):
                self._compiled[id(enc)] = torch.compile(enc, dynamic=True)
        self.weights_version = 0  # bumped at every optimiser step: cached embeddings go stale
        self.state_truncations = 0

    # -- tokens ---------------------------------------------------------------------------
    def tokens(self, ep: Episode) -> SampleTokens:
        """Content ids of the episode's sample, tokenised once per episode and cached on it."""
        cached = getattr(ep, "_tokens", None)
        if cached is None:
            s = ep.sample
            cached = s.get("_tokens")  # pre-tokenised by the evaluation haystack cache
            if cached is None:
                cached = tokenize_sample(self.tokenizer, s["question"], s["chunks"], self.layout,
                                         self.query_prefix, self.passage_prefix)
            ep._tokens = cached  # type: ignore[attr-defined]
        return cached

    def state_ids(self, ep: Episode, sort_by_index: bool, evaluation: bool = False,
                  selected: Sequence[int] | None = None) -> list[int]:
        """Token ids of the state holding ``selected`` (default: the episode's current selection),
        with the evaluation or the rollout segment cap."""
        sel = ep.selected if selected is None else selected
        order = sorted(sel) if sort_by_index else list(sel)
        mem = self.eval_memory_content if evaluation else self.layout.memory_content
        ids, truncated = state_ids(self.tokens(ep), order, self.layout, mem)
        self.state_truncations += int(truncated)
        return ids

    def action_ids(self, ep: Episode, j: int) -> list[int]:
        return action_ids(self.tokens(ep), j, self.layout)

    # -- embeddings -----------------------------------------------------------------------
    @staticmethod
    def set_mode(module: nn.Module, train: bool) -> None:
        """Switch dropout mode only when it differs: ``train()`` walks every submodule, which
        dominated the acting loop when done twice per encoder call."""
        if module.training != train:
            module.train(train)

    def embed(self, encoder: Embedder, seqs: Sequence[Sequence[int]], train: bool, grad: bool = False) -> torch.Tensor:
        self.set_mode(encoder, train)
        fn = encoder if grad else self._compiled.get(id(encoder), encoder)
        with torch.set_grad_enabled(grad):
            return embed_sequences(fn, seqs, self.layout.pad, self.device,
                                   self.embed_batch_size, self.amp, left=self.left_pad, bucket=not grad)

    def chunk_embeddings(self, ep: Episode, which: str, train: bool) -> torch.Tensor:
        """Un-rotated embeddings of every chunk of the episode's sample, cached on the episode
        until the weights change (SPEC §3.4). ``which`` is 'online' or 'target'."""
        self.ensure_chunk_embeddings([ep], which, train)
        return getattr(ep, f"_emb_{which}")[2]

    def ensure_chunk_embeddings(self, eps: Sequence[Episode], which: str, train: bool) -> None:
        """Fill the caches of several episodes with one encoder pass over all their chunks."""
        key = f"_emb_{which}"
        todo, seen = [], set()
        for ep in eps:
            hit = getattr(ep, key, None)
            if (hit is None or hit[0] != self.weights_version or hit[1] != train) and id(ep) not in seen:
                todo.append(ep)
                seen.add(id(ep))
        if not todo:
            return
        seqs: list[list[int]] = []
        bounds = [0]
        for ep in todo:
            toks = self.tokens(ep)
            seqs += [action_ids(toks, j, self.layout) for j in range(len(toks.chunks))]
            bounds.append(len(seqs))
        enc = self.action_enc if which == "online" else self.target_action
        emb = self.embed(enc, seqs, train)
        for k, ep in enumerate(todo):
            setattr(ep, key, (self.weights_version, train, emb[bounds[k]:bounds[k + 1]]))

    def rotate(self, emb: torch.Tensor, codes: torch.Tensor | None) -> torch.Tensor:
        return emb.float() if codes is None else self.rope(emb, codes)

    def q_values(self, ep: Episode, state_emb: torch.Tensor, pos: PositionSettings, train: bool) -> torch.Tensor:
        """Q(s_t, ·) for every chunk of the episode: one matrix-vector product."""
        u = self.chunk_embeddings(ep, "online", train)
        return q_all(state_emb, self.rotate(u, ep.codes(pos)))

    # -- target updates -------------------------------------------------------------------
    @torch.no_grad()
    def update_targets(self, tau: float) -> None:
        """θ′ ← τ·θ + (1 − τ)·θ′ for both target encoders; buffers copied (SPEC §5.5 step 6)."""
        for online, target in ((self.state_enc, self.target_state), (self.action_enc, self.target_action)):
            for p, tp in zip(online.parameters(), target.parameters()):
                tp.lerp_(p.detach(), tau)
            for b, tb in zip(online.buffers(), target.buffers()):
                tb.copy_(b)

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [*self.state_enc.parameters(), *self.action_enc.parameters()]
