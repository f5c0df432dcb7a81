"""A packed variable-length encoder for gradient-free embedding (``speed.packed_encoder``).

The padded path runs the Hugging Face module on ``[rows, width]`` batches. Here the same weights run
over every sequence of a call laid end to end, ``[total_tokens, hidden]``, with per-sequence position
ids and attention over ``cu_seqlens`` (rl/model/fast/varlen.py): no padding waste, one QKV matmul per
layer over the concatenated Q, K, V weights, and the per-layer elementwise work (bias + GELU,
residual + LayerNorm, the casts of bf16 autocast) in two small functions that ``torch.compile``
fuses (``speed.packed_compile``). Then the Embedder's own pooling, normalisation and scale.

Arithmetic as in the module under ``torch.autocast`` (matmuls and attention in the autocast dtype,
the residual stream and LayerNorms in fp32), so the embeddings equal the padded path's within
rounding (tests/rl/test_packed.py). Weights are read from the module at every call (optimiser,
EMA and ``load_state_dict`` updates are seen; nothing is copied between calls).

Memory stays flat: a call is cut into slices of at most ``SLICE_TOKENS`` tokens, only the pooled
embeddings are kept. Compiled, each slice is padded up to one of four token counts with filler
sequences (their rows are never pooled), so a handful of static shapes serve every call and the
compiled functions are never traced again per call.

Supported: BERT (MiniLM, contriever, BERT-base) and RoBERTa / XLM-RoBERTa (multilingual-E5)
encoders in evaluation mode (or without dropout). Anything else (remote-code models, decoders,
left-padded BERT, whose absolute positions then depend on the batch width, MPNet, whose attention
adds a relative-position bias that the packed kernels cannot) keeps the padded path, with one log
line saying why.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rl.model.fast.staging import to_device
from rl.model.fast.varlen import BACKENDS, Packing, pick_attention
from rl.model.tokens.ragged import as_seq_set

log = logging.getLogger(__name__)

SLICE_TOKENS = 1 << 17  # tokens per slice: activations of a few GB at BERT-base in bf16 (estimate)
# compiled shapes: MIN_BUCKET * 4^k up to SLICE_TOKENS (2 K, 8 K, 32 K, 128 K): few shapes, so
# little compile time; a call's padding stays under MIN_BUCKET + one sequence per slice
MIN_BUCKET = 1 << 11
FILLER_LEN = 64  # filler sequences are this long, so their attention costs next to nothing
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
_POSITIONS = {"bert": "absolute", "roberta": "after_pad", "xlm-roberta": "after_pad"}
# Encoders this path does not compute, and why (the log line names it): MPNet (all-mpnet-base-v2)
# adds to every attention score a learned bias per head and bucket of the relative position j - i
# (transformers' MPNetModel); the flash varlen and nested SDPA kernels take no additive bias.
_NOT_PACKED = {
    "mpnet": "its attention adds a learned relative-position bias, which the packed attention kernels do not take"
}


def unsupported_reason(encoder: nn.Module, left_pad: bool) -> str | None:
    """Why the packed path cannot reproduce ``encoder`` (an Embedder), or None."""
    backbone = getattr(encoder, "backbone", None)
    cfg = getattr(backbone, "config", None)
    kind = getattr(cfg, "model_type", None)
    if kind in _NOT_PACKED:
        return f"model type {kind!r}: {_NOT_PACKED[kind]}"
    if kind not in _POSITIONS:
        return f"model type {kind!r} (packed path: bert, roberta, xlm-roberta)"
    if getattr(cfg, "is_decoder", False) or getattr(cfg, "add_cross_attention", False):
        return "a decoder configuration"
    if getattr(cfg, "position_embedding_type", "absolute") != "absolute":
        return f"position_embedding_type={cfg.position_embedding_type}"
    if getattr(cfg, "hidden_act", None) not in ACTIVATIONS:
        return f"hidden_act={getattr(cfg, 'hidden_act', None)!r}"
    if left_pad and _POSITIONS[kind] == "absolute":
        return "left padding with absolute positions (the padded path's positions depend on the batch width)"
    try:
        _ = [(b.attention.self.query, b.attention.output.LayerNorm, b.output.dense) for b in backbone.encoder.layer]
        _ = backbone.embeddings.token_type_embeddings, backbone.embeddings.LayerNorm
    except AttributeError as e:
        return f"unexpected module layout ({e})"
    return None


class Slice(NamedTuple):
    """Sequences ``[lo, hi)`` of a call, run as ``width`` packed tokens (the rest filler)."""

    lo: int
    hi: int
    width: int


def plan_packed_slices(lens: np.ndarray, cap: int, buckets: tuple[int, ...] | None) -> list[Slice]:
    """Cut sequences (in input order) into slices of at most ``cap`` tokens. With ``buckets``
    (ascending token counts) each slice is filled up to the largest bucket that the remaining
    tokens reach and run at the smallest bucket holding it, so the padding is at most the last
    slice's shortfall below ``buckets[0]`` plus less than one sequence per slice (sequences are
    at most 512 tokens, ``buckets[0]`` 2 K; a longer one runs alone at the bucket holding it)."""
    csum = np.concatenate(([0], np.cumsum(lens)))
    n, out, lo = len(lens), [], 0
    while lo < n:
        room = cap
        if buckets:
            left = int(csum[n] - csum[lo])
            room = max([b for b in buckets if b <= min(left, cap)], default=buckets[0])
        hi = max(lo + 1, int(np.searchsorted(csum, csum[lo] + room, side="right")) - 1)
        tokens = int(csum[hi] - csum[lo])
        width = min([b for b in buckets if b >= tokens], default=tokens) if buckets else tokens
        out.append(Slice(lo, hi, width))
        lo = hi
    return out


def _activation(x: torch.Tensor, act: str) -> torch.Tensor:
    if act == "gelu":
        return F.gelu(x)
    if act == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    return F.relu(x)


def embed_tokens(
    ids: torch.Tensor,
    pos: torch.Tensor,
    word: torch.Tensor,
    position: torch.Tensor,
    type0: torch.Tensor,
    ln_w: torch.Tensor,
    ln_b: torch.Tensor,
    eps: float,
    dt: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Input embeddings (word + token type 0, + position; then LayerNorm, as the module adds
    them): the fp32 residual stream and its copy in the matmul dtype."""
    x = F.embedding(ids, word) + type0
    x = F.layer_norm(x + F.embedding(pos, position), (x.shape[-1],), ln_w, ln_b, eps)
    return x, x.to(dt)


def layer_tail(
    attn: torch.Tensor,
    x: torch.Tensor,
    w: tuple[torch.Tensor, ...],
    eps: float,
    act: str,
    dt: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Everything of a layer after attention: output projection, residual + LayerNorm, the
    feed-forward block with its residual + LayerNorm (residuals and LayerNorms in fp32)."""
    wo, bo, ln1_w, ln1_b, w1, b1, w2, b2, ln2_w, ln2_b = w
    hidden = (x.shape[-1],)
    x = F.layer_norm(F.linear(attn, wo, bo).float() + x, hidden, ln1_w, ln1_b, eps)
    h = _activation(F.linear(x.to(dt), w1, b1), act)
    x = F.layer_norm(F.linear(h, w2, b2).float() + x, hidden, ln2_w, ln2_b, eps)
    return x, x.to(dt)


_COMPILED: dict[Any, tuple[Any, Any]] = {}


def _compiled(backend: Any) -> tuple[Any, Any]:
    """The two elementwise-heavy functions compiled once per process (every encoder and layer
    shares them: weights are arguments, so one static shape = one graph)."""
    if backend not in _COMPILED:
        _COMPILED[backend] = tuple(torch.compile(f, dynamic=False, backend=backend) for f in (embed_tokens, layer_tail))
    return _COMPILED[backend]


def _graph_limit(n: int) -> Any:
    """Dynamo's graphs-per-function limit raised to ``n`` (named cache_size_limit before torch 2.7)."""
    cfg = torch._dynamo.config
    return cfg.patch(**{"recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit": n})


class PackedEncoder:
    """Runs an Embedder (BERT / XLM-R backbone + pooling) over packed sequences; see the module doc."""

    def __init__(
        self,
        encoder: nn.Module,
        pad: int,
        left_pad: bool = False,
        compile_backend: Any = None,
        attention: str | None = None,
        buckets: bool | None = None,
    ):
        """``pad``/``left_pad``: the padded path's pad id and side (the filler uses the pad id).
        ``compile_backend``: None = eager, else a torch.compile backend ("inductor").
        ``attention``: a backend of rl/model/fast/varlen.py (default: picked for the device).
        ``buckets``: pad slices to the bucketed shapes (default: when compiled)."""
        why = unsupported_reason(encoder, left_pad)
        if why is not None:
            raise ValueError(f"packed encoder: unsupported encoder: {why}")
        self.encoder, self.pad = encoder, pad
        cfg = encoder.backbone.config
        self.eps, self.act = float(cfg.layer_norm_eps), ACTIVATIONS[cfg.hidden_act]
        self.heads = int(cfg.num_attention_heads)
        # RoBERTa-style position ids count from padding_idx + 1 (the module derives them from
        # the non-pad tokens, which gives the same ids when no content token is the pad id)
        self.pos_offset = 0 if _POSITIONS[cfg.model_type] == "absolute" else int(cfg.pad_token_id) + 1
        self.dropout = max(float(cfg.hidden_dropout_prob), float(cfg.attention_probs_dropout_prob))
        self.compile_backend = compile_backend
        self.attention = attention
        self.buckets = (
            tuple(b for b in (MIN_BUCKET * 4**k for k in range(16)) if b <= SLICE_TOKENS)
            if (compile_backend is not None if buckets is None else buckets)
            else None
        )

    def serves(self) -> bool:
        """Whether the encoder's current mode is one this path computes (no dropout drawn)."""
        return not (self.encoder.training and self.dropout > 0)

    def describe(self, device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
        return {"attention": self._attention_name(device, dtype), "compiled": self.compile_backend is not None}

    def _attention_name(self, device: torch.device, dtype: torch.dtype) -> str:
        return self.attention or pick_attention(device, dtype)

    @torch.no_grad()
    def __call__(self, seqs: Any, out: torch.Tensor | None = None, dtype: torch.dtype | None = None) -> torch.Tensor:
        """[len(seqs), d] fp32 embeddings of id sequences (lists, or an IdLists/FramedIds set);
        matmuls and attention in ``dtype`` (the autocast dtype; None = fp32)."""
        seqs = as_seq_set(seqs)
        dt = dtype or torch.float32
        word = self.encoder.backbone.embeddings.word_embeddings.weight
        device = word.device
        if out is None:
            out = torch.empty((len(seqs), self.encoder.dim), device=device, dtype=torch.float32)
        if len(seqs) == 0:
            return out
        weights = self._weights(dt)
        attend = BACKENDS[self._attention_name(device, dt)]
        for s in plan_packed_slices(seqs.lens, SLICE_TOKENS, self.buckets):
            ids, pos, seg, packing = self._stage(seqs, s, device)
            x = self._run(ids, pos, packing, weights, attend, dt)
            out[s.lo : s.hi] = self._pool(x, seg, packing.cu, s.hi - s.lo)
        return out

    def _weights(self, dt: torch.dtype) -> tuple[tuple[torch.Tensor, ...], list[tuple]]:
        """The module's weights now (detached: the compiled functions then see one kind of
        input), matmul weights in ``dt``; Q, K, V concatenated. Built per call, not cached: at
        BERT-base it reads ~340 MB, estimated well under a millisecond on a GPU against tens of
        milliseconds per full slice (not measured)."""
        emb = self.encoder.backbone.embeddings
        head = tuple(
            t.detach()
            for t in (
                emb.word_embeddings.weight,
                emb.position_embeddings.weight,
                emb.token_type_embeddings.weight[0],
                emb.LayerNorm.weight,
                emb.LayerNorm.bias,
            )
        )
        layers = []
        for block in self.encoder.backbone.encoder.layer:
            a = block.attention
            qkv = (a.self.query, a.self.key, a.self.value)
            w_qkv = torch.cat([m.weight.detach() for m in qkv]).to(dt)
            b_qkv = torch.cat([m.bias.detach() for m in qkv]).to(dt)
            tail = (
                a.output.dense.weight.detach().to(dt),
                a.output.dense.bias.detach().to(dt),
                a.output.LayerNorm.weight.detach(),
                a.output.LayerNorm.bias.detach(),
                block.intermediate.dense.weight.detach().to(dt),
                block.intermediate.dense.bias.detach().to(dt),
                block.output.dense.weight.detach().to(dt),
                block.output.dense.bias.detach().to(dt),
                block.output.LayerNorm.weight.detach(),
                block.output.LayerNorm.bias.detach(),
            )
            layers.append((w_qkv, b_qkv, tail))
        return head, layers

    def _stage(
        self, seqs: Any, s: Slice, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Packing]:
        """Token ids, position ids (restarting at every sequence), each real token's sequence
        index, and the packing (filler sequences of FILLER_LEN pad tokens up to ``s.width``), on
        ``device`` in one host-to-device copy."""
        lens = seqs.lens[s.lo : s.hi]
        tokens = int(lens.sum())
        fill = s.width - tokens
        all_lens = np.concatenate(
            (lens, np.full(fill // FILLER_LEN, FILLER_LEN), [fill % FILLER_LEN] * bool(fill % FILLER_LEN))
        )
        all_lens = all_lens.astype(np.int64)
        cu = np.concatenate(([0], np.cumsum(all_lens)))
        pos = np.arange(s.width) - np.repeat(cu[:-1], all_lens) + self.pos_offset
        ids = np.concatenate((seqs.packed(s.lo, s.hi), np.full(fill, self.pad, dtype=np.int64)))
        seg = np.repeat(np.arange(s.hi - s.lo), lens)
        flat = to_device(np.concatenate((ids, pos, seg, cu)), device)
        w = s.width
        cu_t = flat[2 * w + tokens :].to(torch.int32)
        return flat[:w], flat[w : 2 * w], flat[2 * w : 2 * w + tokens], Packing(cu_t, all_lens)

    def _run(
        self,
        ids: torch.Tensor,
        pos: torch.Tensor,
        packing: Packing,
        weights: tuple,
        attend: Any,
        dt: torch.dtype,
    ) -> torch.Tensor:
        """The backbone's last hidden state [tokens, hidden] fp32 (filler rows included)."""
        if self.compile_backend is not None:
            try:
                # one graph per (bucket, model shape, dtype): a few models or dtypes in one process
                # (the GPU check runs two) would pass dynamo's default of 8 per function and run eagerly
                with _graph_limit(64):
                    return self._layers(ids, pos, packing, weights, attend, dt, _compiled(self.compile_backend))
            except torch.OutOfMemoryError:
                raise
            except Exception as e:  # noqa: BLE001 — a compiler failure: run eagerly from now on
                log.warning("packed encoder: torch.compile failed (%s: %s); running it eagerly", type(e).__name__, e)
                self.compile_backend = None
        return self._layers(ids, pos, packing, weights, attend, dt, (embed_tokens, layer_tail))

    def _layers(
        self,
        ids: torch.Tensor,
        pos: torch.Tensor,
        packing: Packing,
        weights: tuple,
        attend: Any,
        dt: torch.dtype,
        fns: tuple[Any, Any],
    ) -> torch.Tensor:
        embed, tail = fns
        head, layers = weights
        x, xd = embed(ids, pos, *head, self.eps, dt)
        n_tok = x.shape[0]
        for w_qkv, b_qkv, rest in layers:
            q, k, v = F.linear(xd, w_qkv, b_qkv).view(n_tok, 3, self.heads, -1).unbind(1)
            x, xd = tail(attend(q, k, v, packing).reshape(n_tok, -1), x, rest, self.eps, self.act, dt)
        return x

    def _pool(self, x: torch.Tensor, seg: torch.Tensor, cu: torch.Tensor, n: int) -> torch.Tensor:
        """The Embedder's pooling over each real sequence (filler rows are never read), then its
        normalisation and scale."""
        enc = self.encoder
        first, end = cu[:n].long(), cu[1 : n + 1].long()
        if enc.pooling == "mean":
            e = torch.zeros((n, x.shape[1]), device=x.device, dtype=x.dtype).index_add_(0, seg, x[: seg.shape[0]])
            e = e / (end - first).unsqueeze(1).to(x.dtype)
        elif enc.pooling == "cls":
            e = x[first]
        else:
            e = x[end - 1]
        e = e.float()
        if enc.normalize:
            e = F.normalize(e, dim=-1)
        return e * enc.pool_scale
