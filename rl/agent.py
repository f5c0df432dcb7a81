"""The Q-RAG agent: encoders, chunk-embedding caches and the Q-function over a sample (SPEC §2-4).

Five roles, three modules (SPEC §2.1): E_s and E_a are trained; E_s′ and E_a′ are EMA targets;
the acting state encoder E_s^π is E_s itself (weights change only at optimiser steps, so an
alias equals the reference's hard copy), run in the dropout mode chosen for acting.
"""
from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from envs.env import Episode, PositionSettings
from rl.cuda_graphs import GraphedEncoder
from rl.encoders import (
    Embedder,
    SampleTokens,
    TokenLayout,
    action_ids,
    assemble_tokens,
    embed_sequences,
    encode_texts,
    load_backbone,
    load_tokenizer,
    state_ids,
    stream_chunk_tokens,
    token_layout,
    tokenize_sample,
)
from rl.qfunc import q_all
from rl.ragged import FramedIds, RaggedIds
from rl.rotary import HalfRotary
from rl.speed import SpeedSwitches

log = logging.getLogger(__name__)

_IGNORED_MODEL_KEYS = ("hidden_dim", "output_dim")


def autocast_dtype(precision: str, device: torch.device | None = None) -> torch.dtype | None:
    """bf16 autocast in the encoders, or None (fp32 weights and activations; tf32 matmuls).
    ``auto`` = bf16 on a GPU (shown not to change learning: docs/BENCH.md, parity), tf32 on CPU."""
    if precision == "auto":
        precision = "bf16" if device is not None and device.type == "cuda" else "tf32"
    if precision == "bf16":
        return torch.bfloat16
    if precision in ("tf32", "fp32"):
        return None
    raise ValueError(f"precision must be auto, tf32, fp32 or bf16, got {precision!r}")


class QRAGAgent(nn.Module):
    def __init__(self, model_cfg: Any, layout_cfg: dict[str, Any], device: torch.device, precision: str = "tf32",
                 embed_batch_size: int = 10000, speed: SpeedSwitches | None = None):
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
        self.amp = autocast_dtype(precision, device)
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
        self.speed = speed or SpeedSwitches()
        if device.type == "cuda":
            # cuDNN's attention builds a plan for every new shape (~10 ms each); bucketed
            # haystack slices have many shapes. Flash / memory-efficient kernels need no plan.
            torch.backends.cuda.enable_cudnn_sdp(False)
        encoders = (self.state_enc, self.action_enc, self.target_state, self.target_action)
        self._compiled: dict[int, Any] = {}
        if self.speed.compile:
            for enc in encoders:
                self._compiled[id(enc)] = torch.compile(enc, dynamic=True)
        self._graphed: dict[int, GraphedEncoder] = {}
        if self.speed.cuda_graphs and device.type == "cuda" and not self.speed.compile:
            pool = torch.cuda.graph_pool_handle()
            for enc in encoders:
                self._graphed[id(enc)] = GraphedEncoder(enc, self.layout.pad, self.left_pad, self.amp, pool,
                                                        pin=self.speed.pinned_transfers)
        self.weights_version = 0  # bumped at every optimiser step: cached embeddings go stale
        self.tick = 0  # bumped at every rollout start; keys the chunk cache when it is off
        self.state_truncations = 0

    # -- tokens ---------------------------------------------------------------------------
    def tokens(self, ep: Episode) -> SampleTokens:
        """Content ids of the episode's sample, tokenised once per episode and cached on it
        (``speed.token_cache=false``: the question and each chunk are tokenised again at every
        use, as the reference re-tokenises every state; the ids are the same)."""
        cached = getattr(ep, "_tokens", None)
        if cached is None:
            s = ep.sample
            cached = s.get("_tokens")  # pre-tokenised by the evaluation haystack cache
            if cached is None and not self.speed.token_cache:
                return self._retokenizing(ep)
            if cached is None:
                cached = tokenize_sample(self.tokenizer, s["question"], s["chunks"], self.layout,
                                         self.query_prefix, self.passage_prefix)
            ep._tokens = cached  # type: ignore[attr-defined]
        return cached

    def _retokenizing(self, ep: Episode) -> SampleTokens:
        s, cut = ep.sample, max(self.layout.action_content, self.layout.memory_content)
        one = lambda text: encode_texts(self.tokenizer, [text], cut)[0][0]  # noqa: E731  (a list)
        chunks = _Retokenized(lambda j: one(s["chunks"][j]), len(s["chunks"]))
        actions = _Retokenized(lambda j: one(self.passage_prefix + s["chunks"][j]), len(s["chunks"])) if self.passage_prefix else chunks
        q_ids, q_len = encode_texts(self.tokenizer, [self.query_prefix + s["question"]], cut)
        return SampleTokens(q_ids[0], chunks, actions, self._text_len(ep, q_len))  # type: ignore[arg-type]

    def _text_len(self, ep: Episode, q_len: int) -> int:
        """SPEC §2.7 text length from uncut counts (token_cache=false), computed once per episode."""
        cached = getattr(ep, "_text_len", None)
        if cached is None:
            n_special = 2 if self.layout.bos is not None else 1
            chunk_len = encode_texts(self.tokenizer, ep.sample["chunks"], 1)[1] if ep.sample["chunks"] else 0
            cached = q_len + chunk_len + n_special * (len(ep.sample["chunks"]) + 1)
            ep._text_len = cached  # type: ignore[attr-defined]
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

    def embed(self, encoder: Embedder, seqs: Any, train: bool, grad: bool = False,
              out: torch.Tensor | None = None, chunks: bool = False, bucket_grad: bool = False) -> torch.Tensor:
        """Embeddings [len(seqs), d] fp32. Gradient-free calls may replay a CUDA graph or run
        compiled; ``chunks`` marks action sequences (padded to max_action_length when
        ``speed.length_bucketing`` is off, as the reference does). Gradient calls run as one
        padded batch unless ``bucket_grad`` (many sequences of mixed lengths, e.g. the SFT loss's
        chunk sets): then they are length-bucketed like gradient-free ones."""
        self.set_mode(encoder, train)
        if not grad and seqs:
            graphed = self._graphed.get(id(encoder))
            e = graphed(seqs) if graphed is not None else None
            if e is not None:
                return e if out is None else out.copy_(e)
        fn = encoder if grad else self._compiled.get(id(encoder), encoder)
        bucket = self.speed.length_bucketing and (bucket_grad or not grad)
        pad_to = self.layout.action_cap if chunks and not self.speed.length_bucketing else None
        with torch.set_grad_enabled(grad):
            return embed_sequences(fn, seqs, self.layout.pad, self.device, self.embed_batch_size, self.amp,
                                   left=self.left_pad, bucket=bucket, pad_to=pad_to,
                                   pin=self.speed.pinned_transfers, out=out)

    def chunk_embeddings(self, ep: Episode, which: str, train: bool) -> torch.Tensor:
        """Un-rotated embeddings of every chunk of the episode's sample, cached on the episode
        until the weights change (SPEC §3.4). ``which`` is 'online' or 'target'."""
        self.ensure_chunk_embeddings([ep], which, train)
        return getattr(ep, f"_emb_{which}")[1]

    def ensure_chunk_embeddings(self, eps: Sequence[Episode], which: str, train: bool) -> None:
        """Fill the caches of several episodes with one encoder pass over all their chunks."""
        key = f"_emb_{which}"
        stamp = (self.weights_version, train, 0 if self.speed.chunk_cache else self.tick)
        todo, seen = [], set()
        for ep in eps:
            hit = getattr(ep, key, None)
            if (hit is None or hit[0] != stamp) and id(ep) not in seen:
                todo.append(ep)
                seen.add(id(ep))
        if not todo:
            return
        enc = self.action_enc if which == "online" else self.target_action
        if not self.speed.batch_envs and len(todo) > 1:
            for ep in todo:
                self.ensure_chunk_embeddings([ep], which, train)
            return
        if len(todo) == 1 and self._stream_haystack(todo[0]):
            setattr(todo[0], key, (stamp, self._tokenize_and_embed(todo[0], enc, train)))
            return
        content = RaggedIds.concat([RaggedIds.from_lists(self.tokens(ep).action_chunks) for ep in todo])
        bounds = np.concatenate(([0], np.cumsum([ep.n_chunks for ep in todo]))).tolist()
        seqs = FramedIds(content, self.layout.bos, self.layout.sep, self.layout.action_content)
        emb = self.embed(enc, seqs, train, chunks=True)
        for k, ep in enumerate(todo):
            setattr(ep, key, (stamp, emb[bounds[k]:bounds[k + 1]]))

    # haystacks this large are tokenised on a CPU thread while the GPU embeds what is ready,
    # in slices doubling from STREAM_FIRST_SLICE chunks. Smaller values were measured slower
    # (H200: W2 0.12 s vs 0.066 s with 1024 / 256): more, smaller eager encoder calls.
    STREAM_MIN_CHUNKS = 8192
    STREAM_FIRST_SLICE = 2048

    def _stream_haystack(self, ep: Episode) -> bool:
        return (self.speed.overlap_tokenization and self.speed.token_cache and self.device.type == "cuda"
                and ep.n_chunks >= self.STREAM_MIN_CHUNKS and getattr(ep, "_tokens", None) is None
                and ep.sample.get("_tokens") is None)

    def _tokenize_and_embed(self, ep: Episode, enc: Embedder, train: bool) -> torch.Tensor:
        """Tokenise and embed a large haystack in overlapping slices; caches the tokens on ``ep``
        (the same ids as :meth:`tokens`)."""
        s = ep.sample
        emb = torch.empty((ep.n_chunks, self.dim), device=self.device)
        parts = []
        for part in stream_chunk_tokens(self.tokenizer, s["chunks"], self.layout, self.passage_prefix,
                                        first=self.STREAM_FIRST_SLICE):
            start, ids, act = part[0], part[1], part[2] if part[2] is not None else part[1]
            seqs = FramedIds(act, self.layout.bos, self.layout.sep, self.layout.action_content)
            self.embed(enc, seqs, train, out=emb[start:start + len(ids)], chunks=True)
            parts.append(part)
        ep._tokens = assemble_tokens(self.tokenizer, s["question"], parts, self.layout, self.query_prefix)  # type: ignore[attr-defined]
        return emb

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
            # one multi-tensor kernel per encoder instead of ~200 lerp_ launches (same formula)
            torch._foreach_lerp_(list(target.parameters()), [p.detach() for p in online.parameters()], tau)
            for b, tb in zip(online.buffers(), target.buffers()):
                tb.copy_(b)

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [*self.state_enc.parameters(), *self.action_enc.parameters()]


class _Retokenized(Sequence):
    """Content ids computed again at every access (``speed.token_cache=false``)."""

    def __init__(self, fn: Any, n: int):
        self.fn, self.n = fn, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, j: Any) -> Any:
        if isinstance(j, slice):
            return [self.fn(i) for i in range(*j.indices(self.n))]
        return self.fn(j)
