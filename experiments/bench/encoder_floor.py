"""What the card allows: the floors under W1 and W3/W4 (docs/BENCH.md), measured piece by piece.

    python experiments/bench/encoder_floor.py [--tokens 131072] [--repeats 5] [--steps 64] [--tree LABEL] [--device cpu]

GPU only; about a minute on an H100/H200 (compilation included). A random BERT-base (the benchmark's
encoder) in bf16, one JSON line per measurement, each with card, torch and tree:

* ``"part": "gemm"``: the encoder's matmuls alone (per layer QKV 768→2304, output 768→768, FFN
  768→3072→768; 12 layers) over ``--tokens`` packed tokens: s per 1 M tokens and TFLOP/s, what
  the card's matmul library delivers for BERT-base's matmuls (compare with the card's dense peak);
* ``"part": "attention"``: the packed encoder's attention kernel (rl/model/fast/varlen.py) over
  chunk-like sequences (~37 tokens), 12 layers;
* ``"part": "layer_tail"`` and ``"embed"``: the packed encoder's compiled per-layer tail (output
  projection, FFN, residuals, LayerNorms, GELU) and input embedding; ``elementwise_s_per_1m_tokens``
  is the tail minus its three matmuls;
* ``"part": "packed"``: the whole packed encoder (``speed.packed_encoder``, compiled) over the same
  tokens, as W3/W4 run it; ``"part": "bandwidth"``: a device-to-device copy (GB/s);
* ``"part": "acting"``: 64 sequential acting-sized encoder calls (one state of 192 tokens) each
  followed by a host sync, as W1's rollout makes them: CUDA-graph replays and eager calls.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from rl.model.embedder import Embedder
from rl.model.fast.cuda_graphs import GraphedEncoder
from rl.model.fast.packed import PackedEncoder, _compiled, embed_tokens, layer_tail
from rl.model.fast.varlen import BACKENDS, Packing, pick_attention
from rl.model.tokens.layout import TokenLayout
from rl.model.tokens.ragged import FramedIds, RaggedIds
from rl.run.config import code_version

HIDDEN, INTER, LAYERS, HEADS = 768, 3072, 12, 12


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed(fn, repeats: int, dev: torch.device) -> float:
    """Mean seconds of ``fn()`` after one warm-up call (the device's queue drained around it)."""
    fn()
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync(dev)
    return (time.perf_counter() - t0) / repeats


def chunk_lens(tokens: int, seed: int = 0) -> np.ndarray:
    """Chunk-like sequence lengths (log-normal around 34, 3 to 512) summing to about ``tokens``."""
    rng = np.random.default_rng(seed)
    lens = np.clip(rng.lognormal(np.log(32), 0.5, tokens // 20), 1, 510).astype(np.int64) + 2
    return lens[: int(np.searchsorted(np.cumsum(lens), tokens))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=1 << 17, help="packed tokens per call (the packed slice)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tree", default=None, help="label of the code tree (default: its git commit)")
    ap.add_argument("--steps", type=int, default=64, help="acting steps of the rollout (W1: 64)")
    ap.add_argument("--device", default="cuda", help="cuda; cpu only checks that the script runs (tests)")
    args = ap.parse_args()
    dev = torch.device(args.device)
    gpu = dev.type == "cuda"
    if gpu and not torch.cuda.is_available():
        print("encoder_floor.py needs a CUDA GPU (--device cpu only checks that it runs)")
        return 2
    from transformers import BertConfig, BertModel

    dt = torch.bfloat16
    torch.backends.cuda.enable_cudnn_sdp(False)
    compile_backend = "inductor" if gpu else None  # on the CPU: eager (no C++ toolchain needed)
    tree = args.tree or code_version()
    meta = dict(card=torch.cuda.get_device_name(dev) if gpu else "cpu", torch=torch.__version__, tree=tree)

    def emit(part: str, seconds: float, tokens: int, **extra) -> None:
        row = dict(part=part, tokens=tokens, s=seconds, s_per_1m_tokens=seconds / tokens * 1e6, **extra, **meta)
        print(json.dumps(row), flush=True)

    lens = chunk_lens(args.tokens)
    n_tok = int(lens.sum())
    gen = torch.Generator(device=dev).manual_seed(0)

    def rand(*shape):  # bf16 on the device, at a weight-like scale
        return (torch.randn(*shape, device=dev, generator=gen) * 0.02).to(dt)

    x, h = rand(n_tok, HIDDEN), rand(n_tok, INTER)
    w = dict(qkv=rand(3 * HIDDEN, HIDDEN), o=rand(HIDDEN, HIDDEN), up=rand(INTER, HIDDEN), down=rand(HIDDEN, INTER))

    def gemms(which=("qkv", "o", "up", "down")):
        for _ in range(LAYERS):
            for k in which:
                F.linear(h if k == "down" else x, w[k])

    flops = 2 * n_tok * LAYERS * (3 * HIDDEN * HIDDEN + HIDDEN * HIDDEN + 2 * HIDDEN * INTER)
    s = timed(gemms, args.repeats, dev)
    emit("gemm", s, n_tok, tflops=flops / s / 1e12)
    s_tail_gemm = timed(lambda: gemms(("o", "up", "down")), args.repeats, dev)

    cu = torch.from_numpy(np.concatenate(([0], np.cumsum(lens)))).to(dev, torch.int32)
    packing = Packing(cu, lens)
    backend = pick_attention(dev, dt)
    attend = BACKENDS[backend]
    q, k, v = rand(n_tok, HEADS, 64), rand(n_tok, HEADS, 64), rand(n_tok, HEADS, 64)
    s = timed(lambda: [attend(q, k, v, packing) for _ in range(LAYERS)], args.repeats, dev)
    emit("attention", s, n_tok, backend=backend, sequences=len(lens))

    torch.manual_seed(0)
    enc = Embedder(BertModel(BertConfig(), add_pooling_layer=False)).to(dev).eval()
    packed = PackedEncoder(enc, pad=0, compile_backend=compile_backend)
    embed, tail = _compiled(compile_backend) if gpu else (embed_tokens, layer_tail)
    head, layers = packed._weights(dt)
    ids = torch.randint(1000, 30000, (n_tok,), device=dev, generator=gen)
    pos = torch.from_numpy(np.concatenate([np.arange(n) for n in lens])).to(dev)
    xf = x.float()
    s = timed(lambda: embed(ids, pos, *head, packed.eps, dt), args.repeats, dev)
    emit("embed", s, n_tok)
    s = timed(lambda: [tail(x, xf, rest, packed.eps, packed.act, dt) for _, _, rest in layers], args.repeats, dev)
    emit("layer_tail", s, n_tok, elementwise_s_per_1m_tokens=(s - s_tail_gemm) / n_tok * 1e6)

    rng = np.random.default_rng(1)
    content = RaggedIds.tiling(rng.integers(1000, 30000, int((lens - 2).sum())).astype(np.int32), lens - 2)
    seqs = FramedIds(content, TokenLayout(101, 102, 0, action_cap=512, memory_cap=512, state_cap=512))
    emit("packed", timed(lambda: packed(seqs, dtype=dt), args.repeats, dev), n_tok, sequences=len(lens))

    size = 1 << (30 if gpu else 24)
    big, dst = torch.empty(size, dtype=torch.uint8, device=dev), torch.empty(size, dtype=torch.uint8, device=dev)
    s = timed(lambda: dst.copy_(big), args.repeats, dev)
    emit("bandwidth", s, n_tok, gb_per_s=2 * size / s / 1e9, note=f"read + write of {size >> 20} MiB")

    state = [rng.integers(1000, 30000, 190).tolist()]
    enc.train()  # acting embeds states with dropout (train mode)

    def rollout(call) -> float:
        call()
        sync(dev)
        t0 = time.perf_counter()
        for _ in range(args.steps):
            float(call().sum())  # the policy's read-back: one sync per acting step
        return time.perf_counter() - t0

    ids1 = torch.tensor(state, device=dev)
    mask1 = torch.ones_like(ids1)

    def eager():
        with torch.no_grad(), torch.autocast(dev.type, dtype=dt):
            return enc(ids1, mask1, False)

    if gpu:
        graphed = GraphedEncoder(enc, pad=0, left=False, amp=dt, pool=torch.cuda.graph_pool_handle())
        emit("acting", rollout(lambda: graphed(state)), 192 * args.steps, path="cuda_graph", steps=args.steps)
    emit("acting", rollout(eager), 192 * args.steps, path="eager", steps=args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
