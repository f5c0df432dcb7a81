"""The Q-network's encoding path, chosen once when the Q-network is built (:class:`EncodingPath`).

The Q-network asks for embeddings of id sequences; this decides how the encoder runs: CUDA-graph
replays or ``torch.compile`` for gradient-free calls, the packed variable-length encoder for
the gradient-free calls the graphs do not take (chunk sets, haystacks), length-bucketed or
reference-padded batches, pinned host-to-device copies, several samples' chunks in one pass, and
large haystacks tokenised on a CPU thread while the GPU embeds. None of it changes the embeddings
beyond rounding (tests/rl/test_speed.py, tests/rl/test_packed.py).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from rl.model.fast.batching import embed_sequences
from rl.model.fast.cuda_graphs import GraphedEncoder
from rl.model.fast.packed import PackedEncoder, unsupported_reason
from rl.model.fast.switches import SpeedSwitches
from rl.model.tokens.layout import TokenLayout
from rl.model.tokens.ragged import FramedIds, RaggedIds
from rl.model.tokens.tokenize import HaystackTokens, SampleTokens, haystack_tokens, stream_chunk_tokens

# Haystacks this large are tokenised on a CPU thread while the GPU embeds what is ready, in
# slices doubling from STREAM_FIRST_SLICE chunks. Smaller values are slower (more, smaller eager
# encoder calls; docs/BENCH.md, W2).
STREAM_MIN_CHUNKS = 8192
STREAM_FIRST_SLICE = 2048

log = logging.getLogger(__name__)


class EncodingPath:
    """Runs the Q-network's encoders on id sequences; every choice is made here, once."""

    def __init__(
        self,
        encoders: Sequence[nn.Module],
        switches: SpeedSwitches,
        layout: TokenLayout,
        left_pad: bool,
        device: torch.device,
        amp: torch.dtype | None,
        max_batch: int,
    ):
        self.layout, self.left_pad, self.device, self.amp = layout, left_pad, device, amp
        self.max_batch = int(max_batch)
        self.bucket = switches.length_bucketing
        # without bucketing, chunks are padded to max_action_length as the reference pads them
        self.chunk_width = None if switches.length_bucketing else layout.action_cap
        self.streaming = switches.overlap_tokenization and device.type == "cuda"
        if device.type == "cuda":
            # cuDNN's attention builds a plan for every new shape (docs/BENCH.md); bucketed
            # haystack slices have many shapes. Flash / memory-efficient kernels need no plan.
            torch.backends.cuda.enable_cudnn_sdp(False)
        # gradient-free passes (acting, chunk and target embeddings) only: the compiled wrappers
        # and graphs share the encoders' weights, so optimiser and EMA updates are seen
        self.compiled: dict[nn.Module, Any] = {}
        self.graphs: dict[nn.Module, GraphedEncoder] = {}
        if switches.compile:
            self.compiled = {enc: torch.compile(enc, dynamic=True) for enc in encoders}
        elif switches.cuda_graphs and device.type == "cuda":
            pool = torch.cuda.graph_pool_handle()
            self.graphs = {enc: GraphedEncoder(enc, layout.pad, left_pad, amp, pool) for enc in encoders}
        self.packed: dict[nn.Module, PackedEncoder] = {}
        self.packed_off = "speed.packed_encoder=false" if not switches.packed_encoder else "not on a GPU"
        if switches.packed_encoder and device.type == "cuda":
            self.use_packed(encoders, "inductor" if switches.packed_compile else None)

    def use_packed(self, encoders: Sequence[nn.Module], compile_backend: Any, **kw: Any) -> None:
        """Serve the gradient-free calls that the CUDA graphs do not take with the packed encoder
        (rl/model/fast/packed.py), where it supports the model; else say once why not. ``kw``:
        :class:`PackedEncoder`'s options (tests force its CPU backends)."""
        why = unsupported_reason(encoders[0], self.left_pad)
        if why is not None:
            self.packed_off = why
            log.info("packed encoder off: %s; gradient-free calls keep the padded path", why)
            return
        self.packed = {
            enc: PackedEncoder(enc, self.layout.pad, self.left_pad, compile_backend, **kw) for enc in encoders
        }
        self.packed_off = None

    def describe(self) -> dict[str, Any]:
        """What serves the gradient-free calls (for the benchmark's JSON lines)."""
        if not self.packed:
            return {"packed_encoder": None, "packed_off": self.packed_off}
        first = next(iter(self.packed.values()))
        return {"packed_encoder": first.describe(self.device, self.amp or torch.float32)}

    def __call__(
        self,
        encoder: nn.Module,
        seqs: Any,
        grad: bool = False,
        out: torch.Tensor | None = None,
        chunks: bool = False,
        bucket_grad: bool = False,
    ) -> torch.Tensor:
        """Embeddings [len(seqs), d] fp32 of id lists (or an IdLists/FramedIds set), in the
        encoder's current dropout mode. ``chunks`` marks action sequences. Gradient calls run
        as one padded batch unless ``bucket_grad`` (many sequences of mixed lengths, e.g. the
        SFT loss's chunk sets)."""
        if not grad and len(seqs):
            graphed = self.graphs.get(encoder)
            e = graphed(seqs) if graphed is not None else None
            if e is not None:
                return e if out is None else out.copy_(e)
            packed = self.packed.get(encoder)
            if packed is not None and packed.serves():
                return packed(seqs, out, self.amp)
        fn = encoder if grad else self.compiled.get(encoder, encoder)
        with torch.set_grad_enabled(grad):
            return embed_sequences(
                fn,
                seqs,
                self.layout.pad,
                self.device,
                self.max_batch,
                self.amp,
                left=self.left_pad,
                bucket=self.bucket and (bucket_grad or not grad),
                pad_to=self.chunk_width if chunks else None,
                out=out,
            )

    def chunk_sets(self, encoder: nn.Module, token_sets: Sequence[SampleTokens]) -> list[torch.Tensor]:
        """Un-rotated chunk embeddings of several samples from one gradient-free pass over all
        their chunks (framed ``[bos] ids [sep]`` as :func:`rl.model.tokens.action_ids` frames them)."""
        content = RaggedIds.concat([t.action_chunks for t in token_sets])
        bounds = np.concatenate(([0], np.cumsum([len(t.action_chunks) for t in token_sets]))).tolist()
        framed = FramedIds(content, self.layout)
        emb = self(encoder, framed, chunks=True)
        return [emb[bounds[k] : bounds[k + 1]] for k in range(len(token_sets))]

    def streams(self, n_chunks: int) -> bool:
        """Whether a haystack of ``n_chunks`` is tokenised while it is embedded."""
        return self.streaming and n_chunks >= STREAM_MIN_CHUNKS

    def tokenize_and_embed(
        self, encoder: nn.Module, tokenizer: Any, chunks: Sequence[str], dim: int, passage_prefix: str
    ) -> tuple[HaystackTokens, torch.Tensor]:
        """A large haystack's tokens (the same ids as :func:`rl.model.tokens.tokenize_chunks`) and
        its chunk embeddings, tokenised slice by slice on a CPU thread while the GPU embeds."""
        emb = torch.empty((len(chunks), dim), device=self.device)
        parts = []
        for part in stream_chunk_tokens(
            tokenizer, chunks, self.layout.content_cut, passage_prefix, first=STREAM_FIRST_SLICE
        ):
            act = part.action_ids if part.action_ids is not None else part.ids
            framed = FramedIds(act, self.layout)
            self(encoder, framed, out=emb[part.start : part.start + len(part.ids)], chunks=True)
            parts.append(part)
        return haystack_tokens(parts), emb
