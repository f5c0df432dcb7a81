"""GPU self-check of the packed encoder (rl/model/fast/packed.py, ``speed.packed_encoder``).

    python experiments/bench/check_packed_encoder.py [--device cuda] [--no-compile] [--tokens 1000000] [--minilm FOLDER]

Run it first on a GPU machine (well under 2 minutes on an H100, compilation included). Prints JSON
lines:

* ``"check": "setup"``: card, torch, whether ``torch.nn.attention.varlen`` exists, the attention
  backend the packed encoder picked (varlen / nested / grouped) and whether it is compiled;
* ``"check": "equal"``: the real MiniLM and a random BERT-base (the benchmark's encoder) on random
  ids of chunk-like lengths (1 to 512 tokens) at a few sizes: the packed and the padded path in
  bf16 autocast against each other (max abs diff, min cosine) and each against fp32 (padded, no
  tf32); ``ok`` when the packed path's error is at most twice the padded path's + 2e-3 of the scale;
* ``"check": "time"``: a haystack of ``--tokens`` tokens in W3-like chunks (~32 tokens) embedded by
  the padded path (today's: length-bucketed calls), the packed path eager and compiled: seconds
  per 1M tokens (mean of 3 after a warm-up that includes compilation), compile seconds, peak memory;
  the compiled packed path also at 4x the tokens (memory stays flat).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time

import numpy as np
import torch

from rl.model.embedder import Embedder, load_backbone
from rl.model.fast.batching import embed_sequences
from rl.model.fast.packed import PackedEncoder
from rl.model.model_keys import ModelKeys
from rl.model.tokens.layout import TokenLayout
from rl.model.tokens.ragged import FramedIds, RaggedIds

CLS, SEP, PAD = 101, 102, 0  # the uncased WordPiece vocabulary of MiniLM and BERT-base


START = time.perf_counter()


def emit(**row) -> None:
    print(json.dumps({**row, "elapsed_s": round(time.perf_counter() - START, 1)}), flush=True)


def chunks(n: int, seed: int, mean_len: float = 30.0, longest: int = 510) -> FramedIds:
    """``n`` framed chunks of random ids: lengths log-normal around ``mean_len``, one of 1 content
    token and one of ``longest`` (framed: 512)."""
    rng = np.random.default_rng(seed)
    lens = np.clip(rng.lognormal(np.log(mean_len), 0.5, n), 1, longest).astype(np.int64)
    lens[0], lens[-1] = 1, longest
    flat = rng.integers(1000, 30000, int(lens.sum())).astype(np.int32)
    frame = TokenLayout(CLS, SEP, PAD, action_cap=longest + 2, memory_cap=longest + 2, state_cap=longest + 2)
    return FramedIds(RaggedIds.tiling(flat, lens), frame)


def encoders(device: torch.device, minilm_name: str) -> list[tuple[str, Embedder]]:
    from transformers import BertConfig, BertModel

    minilm = load_backbone(ModelKeys(name=minilm_name))
    torch.manual_seed(0)
    base = BertModel(BertConfig(), add_pooling_layer=False)
    return [
        (name, Embedder(m.float()).to(device).eval()) for name, m in (("minilm", minilm), ("bert-base-random", base))
    ]


def padded(enc: Embedder, seqs, device: torch.device, amp: torch.dtype | None) -> torch.Tensor:
    """Today's path: length-bucketed padded calls of the Hugging Face module (as EncodingPath)."""
    with torch.no_grad():
        return embed_sequences(enc, seqs, PAD, device, 10000, amp)


def check_equal(name: str, enc: Embedder, packed: PackedEncoder, device: torch.device, sizes: list[int]) -> None:
    for n in sizes:
        seqs = chunks(n, seed=n)
        torch.backends.cuda.matmul.allow_tf32 = False
        exact = padded(enc, seqs, device, None)
        torch.backends.cuda.matmul.allow_tf32 = True
        eager = padded(enc, seqs, device, torch.bfloat16)
        got = packed(seqs, dtype=torch.bfloat16)
        err_eager, err_packed = float((eager - exact).abs().max()), float((got - exact).abs().max())
        scale = float(exact.abs().max())
        emit(
            check="equal",
            model=name,
            sequences=n,
            tokens=int(seqs.lens.sum()),
            max_abs_diff_packed_vs_padded=float((got - eager).abs().max()),
            min_cosine_packed_vs_padded=float(torch.nn.functional.cosine_similarity(got, eager).min()),
            max_abs_err_vs_fp32_padded_bf16=err_eager,
            max_abs_err_vs_fp32_packed_bf16=err_packed,
            embedding_scale=scale,
            ok=bool(err_packed <= 2 * err_eager + 2e-3 * scale),
        )


def timed(fn, arg, device: torch.device, repeats: int = 3) -> tuple[float, list[float], float]:
    """(warm-up seconds, timed seconds, peak GiB) of ``fn(arg)``."""
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    fn(arg)
    torch.cuda.synchronize(device)
    warm = time.perf_counter() - t0
    torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(arg)
        torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    return warm, times, torch.cuda.max_memory_allocated(device) / 2**30


def check_time(enc: Embedder, device: torch.device, tokens: int, compile_backend: str | None) -> None:
    n = int(tokens / 34)  # ~32 content tokens + [CLS] [SEP] per chunk
    seqs = chunks(n, seed=1)
    n_tok = int(seqs.lens.sum())
    runs = [("padded", None, lambda s: padded(enc, s, device, torch.bfloat16))]
    eager = PackedEncoder(enc, PAD)
    runs.append(("packed-eager", eager, lambda s: eager(s, dtype=torch.bfloat16)))
    if compile_backend is not None:
        comp = PackedEncoder(enc, PAD, compile_backend=compile_backend)
        runs.append(("packed-compiled", comp, lambda s: comp(s, dtype=torch.bfloat16)))
    for label, p, fn in runs:
        warm, times, peak = timed(fn, seqs, device)
        emit(
            check="time",
            path=label,
            tokens=n_tok,
            chunks=n,
            s_per_1m_tokens=statistics.mean(times) / n_tok * 1e6,
            s_runs=times,
            warmup_s=warm,
            peak_gib=peak,
            **({} if p is None else p.describe(device, torch.bfloat16)),
        )
    big = chunks(4 * n, seed=2)
    warm, times, peak = timed(runs[-1][2], big, device, repeats=1)
    emit(
        check="time",
        path=runs[-1][0],
        tokens=int(big.lens.sum()),
        s_per_1m_tokens=times[0] / int(big.lens.sum()) * 1e6,
        peak_gib=peak,
        note="4x the haystack: peak memory should match the line above",
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--no-compile", action="store_true", help="the packed path eager only")
    ap.add_argument("--sizes", default="300,3000", help="sequence counts of the equality checks")
    ap.add_argument("--tokens", type=int, default=1_000_000, help="haystack tokens of the timing")
    ap.add_argument("--minilm", default="offline:minilm", help="the MiniLM: offline:minilm or a local folder")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type != "cuda" or not torch.cuda.is_available():
        print("check_packed_encoder.py needs a CUDA device (tests/rl/test_packed.py checks the CPU path)")
        return 2
    torch.backends.cuda.enable_cudnn_sdp(False)  # as EncodingPath: no per-shape cuDNN plans
    backend = None if args.no_compile else "inductor"
    has_varlen = importlib.util.find_spec("torch.nn.attention.varlen") is not None
    models = encoders(device, args.minilm)
    t0 = time.perf_counter()
    packers = {name: PackedEncoder(enc, PAD, compile_backend=backend) for name, enc in models}
    emit(
        check="setup",
        card=torch.cuda.get_device_name(device),
        torch=torch.__version__,
        has_varlen_attn=has_varlen,
        **packers["minilm"].describe(device, torch.bfloat16),
        probe_s=time.perf_counter() - t0,
    )
    for name, enc in models:
        check_equal(name, enc, packers[name], device, [int(s) for s in args.sizes.split(",")])
    check_time(dict(models)["bert-base-random"], device, args.tokens, backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
