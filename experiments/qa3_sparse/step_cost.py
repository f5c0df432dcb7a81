"""What sparse training haystacks cost a qa3 step, against the recipe (experiments/qa3_sparse/README.md, "Cost").

    python experiments/qa3_sparse/step_cost.py haystacks 100 '[100,1000]' '[100,300]' 300   # model-free, ~1 min
    python experiments/qa3_sparse/step_cost.py steps 100 '[100,1000]' --steps 3 --warm 1     # CPU minutes per step
    python experiments/qa3_sparse/step_cost.py wave experiments/qa3_sparse/cost/haystacks.jsonl  # the GPU estimate

Each argument is a value of ``envs.num_sentences`` given to the recipe (``experiment=offline_babilong_qa3``,
run seed 1); ``100`` is the recipe itself.

``haystacks``: over the training questions (every ``--stride``-th; default all: the qa3 file holds five questions
per story, each longer than the one before, so a stride that is a multiple of 5 picks only the shortest), the
chunks and the MiniLM tokens of each haystack as the chunk cache embeds it (each chunk framed as an action, cut at
max_action_length, with its two special tokens), the share drawn at 1 000 sentences or more, and the noise
sentences per story fact of the stories of more than 86 facts (what 32K gives them and training does not:
experiments/qa3_32k/README.md, Table 10j); also the host seconds to build and to tokenise one haystack (this
machine: torch's threads set by ``--threads``, the tokeniser's its own).

``steps``: one learner per value in ONE process, built as rl/run/train.py builds it, stepped in turn (one
optimiser step of each, then the next round), so that every value sees the same machine load; ``--warm``
untimed rounds, then ``--steps`` timed ones (a multiple of 3: the 16 slots start together and reset together
every 6 environment steps, so 3 optimiser steps of 4 environment steps hold every phase). ``learning_start=0``:
every step acts on Q-values (the recipe acts uniformly for its first 6 steps only). One JSON line per value:
seconds per step, split into the learner's phases (acting, target values, the loss's forward and backward,
AdamW, the target EMA) and inside them the host's haystack building and tokenisation and every encoder call by
kind (rows, tokens and seconds per step): the dropout chunk sets of acting, the target encoder's chunk sets,
the gradient-free state passes and the loss's gradient passes.

``wave``: the README's time rule ("Memory and time, the rule") over ``haystacks``' output: for each mix, with
``--runs`` of it and ``--ctrl`` recipe runs a card, the step of one run alone and when its last run ends (start,
2 000 steps, 21 in-training evaluations), at the optimistic and the pessimistic end of every range.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from statistics import mean

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from envs.data.registry import build_dataset  # noqa: E402
from envs.feedback import build_feedback  # noqa: E402
from rl.learners import build_learner  # noqa: E402
from rl.model.tokens.ragged import FramedIds, as_seq_set  # noqa: E402
from rl.run.build import qnet_from_cfg, train_env  # noqa: E402
from rl.run.config import compose_config, seed_everything  # noqa: E402

LONG_STORY = 86  # facts: the 1K budget's limit; longer stories are the 27 "other" 32K questions


def recipe(value: str):
    return compose_config(
        "training",
        ["experiment=offline_babilong_qa3", "seed=1", "device=cpu", "learning_start=0", f"envs.num_sentences={value}"],
    )


def haystacks(values: list[str], stride: int) -> list[dict]:
    cfg = recipe(values[0])
    qnet = qnet_from_cfg(cfg, torch.device("cpu"))
    out = []
    for value in values:
        cfg = recipe(value)
        ds = build_dataset(cfg.envs, "train", 1)
        ds.record_num_tokens = False
        chunks, tokens, sparse, per_fact, build_s, tok_s = [], [], 0, [], 0.0, 0.0
        for i in range(0, len(ds), stride):
            t0 = time.perf_counter()
            s = ds[i]
            t1 = time.perf_counter()
            hay = qnet.inputs.tokenize_chunks(s["chunks"])
            t2 = time.perf_counter()
            build_s, tok_s = build_s + t1 - t0, tok_s + t2 - t1
            n, facts = len(s["chunks"]), len(s["facts_idx"])
            chunks.append(n)
            tokens.append(int(FramedIds(hay.action_chunks, qnet.inputs.layout).lens.sum()))  # as chunk_sets frames them
            sparse += n >= 1000
            if facts > LONG_STORY:
                per_fact.append((n - facts) / facts)
        k = len(chunks)
        out.append(
            {
                "num_sentences": value,
                "haystacks": k,
                "chunks_mean": round(mean(chunks), 1),
                "minilm_tokens_mean": round(mean(tokens)),
                "share_1000_or_more": round(sparse / k, 3),
                "long_stories": len(per_fact),
                "long_story_noise_per_fact_mean": round(mean(per_fact), 2) if per_fact else None,
                "long_story_share_with_3_or_more_noise_per_fact": (
                    round(sum(x >= 3 for x in per_fact) / len(per_fact), 3) if per_fact else None
                ),
                "build_ms_per_haystack": round(1000 * build_s / k, 2),
                "tokenise_ms_per_haystack": round(1000 * tok_s / k, 2),
            }
        )
    base = out[0]["minilm_tokens_mean"]
    for row in out:
        row["tokens_x_first"] = round(row["minilm_tokens_mean"] / base, 2)
    return out


class Meter:
    """Seconds of named phases and encoder calls of one learner, per timed step."""

    def __init__(self) -> None:
        self.on = False
        self.clock: dict[str, float] = defaultdict(float)
        self.calls: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])  # rows, tokens, seconds
        self.sizes: list[int] = []

    def wrap(self, obj, name: str, label: str) -> None:
        fn = getattr(obj, name)

        def timed(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                if self.on:
                    self.clock[label] += time.perf_counter() - t0

        setattr(obj, name, timed)

    def count_encoder(self, qnet) -> None:
        base, meter = type(qnet.encoding), self

        class Counted(base):
            def __call__(self, encoder, seqs, grad=False, out=None, chunks=False, bucket_grad=False):
                t0 = time.perf_counter()
                try:
                    return base.__call__(self, encoder, seqs, grad, out, chunks, bucket_grad)
                finally:
                    if meter.on:
                        c = meter.calls[kind(qnet, encoder, grad)]
                        lens = as_seq_set(seqs).lens
                        c[0], c[1], c[2] = c[0] + len(lens), c[1] + float(lens.sum()), c[2] + time.perf_counter() - t0

        qnet.encoding.__class__ = Counted


def kind(qnet, encoder, grad: bool) -> str:
    if grad:
        return "grad: states" if encoder is qnet.state_enc else "grad: chunks"
    names = {id(qnet.state_enc): "states", id(qnet.target_state): "target states", id(qnet.action_enc): "online chunks"}
    return names.get(id(encoder), "target chunks")


def rss_gib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def build(value: str):
    cfg = recipe(value)
    seed_everything(int(cfg.seed))
    device = torch.device("cpu")
    qnet = qnet_from_cfg(cfg, device)
    ds = build_dataset(cfg.envs, "train", int(cfg.seed), float(cfg.validation_fraction))
    env = train_env(cfg, ds, build_feedback(cfg.feedback, cfg.envs, "train"), device, int(cfg.seed))
    learner = build_learner(qnet, env, cfg)
    meter = Meter()
    reset = env.reset_random

    def reset_counted(slot):
        ep = reset(slot)
        if meter.on:
            meter.sizes.append(ep.n_chunks)
        return ep

    env.reset_random = reset_counted
    for label, obj, name in (
        ("acting", learner, "_act"),
        ("target values", learner, "_target_values"),
        ("loss fwd+bwd", learner, "regress_on"),
        ("adamw", learner, "optimizer_step"),
        ("target ema", qnet, "update_targets"),
        ("host: haystack build", env, "reset_random"),
        ("host: tokenise", qnet.inputs, "sample_tokens"),
    ):
        meter.wrap(obj, name, label)
    meter.count_encoder(qnet)
    learner.start_slots()
    return learner, meter


def steps(values: list[str], n_steps: int, warm: int) -> list[dict]:
    runs = [(v, *build(v)) for v in values]
    step_s: dict[str, list[float]] = defaultdict(list)
    for r in range(warm + n_steps):
        for value, learner, meter in runs:
            meter.on = r >= warm
            t0 = time.perf_counter()
            learner.micro_step()
            if meter.on:
                step_s[value].append(time.perf_counter() - t0)
            print(f"round {r} {value}: {time.perf_counter() - t0:.1f} s, rss {rss_gib():.2f} GiB", file=sys.stderr)
    out = []
    for value, _, meter in runs:
        s = step_s[value]
        out.append(
            {
                "num_sentences": value,
                "threads": torch.get_num_threads(),
                "steps": n_steps,
                "s_per_step": [round(x, 2) for x in s],
                "s_per_step_mean": round(mean(s), 2),
                "phases_s_per_step": {k: round(v / n_steps, 3) for k, v in meter.clock.items()},
                "encoder_per_step": {
                    k: {"rows": round(a / n_steps), "tokens": round(b / n_steps), "s": round(c / n_steps, 2)}
                    for k, (a, b, c) in meter.calls.items()
                },
                "reset_samples_per_step": round(len(meter.sizes) / n_steps, 1),
                "chunks_per_reset_sample": round(mean(meter.sizes), 1) if meter.sizes else None,
            }
        )
    base = out[0]["s_per_step_mean"]
    for row in out:
        row["step_x_first"] = round(row["s_per_step_mean"] / base, 2)
    return out


# The time rule's constants (README.md, "Memory and time, the rule"): one recipe step alone on an H200 is 0.155 s,
# 0.126 of it host, 0.014 GPU kernels apart from the chunk passes and 0.015 the chunk passes (docs/BENCH.md, round 4's
# kernel profile); 10.7 reset haystacks a step, 96 validation questions, 21 in-training evaluations of 6 s (round 10).
HOST, KERNELS, CHUNK_PASSES, RESETS, VALIDATION, EVALS, EVAL_S, START_S = 0.126, 0.014, 0.015, 10.7, 96, 21, 6.0, 60.0
ENDS = {  # (tokenise s a token, host growth, cost of an extra token, card capacity, GPU s a validation token)
    "optimistic": (0.7e-6, 1.0, 0.6, 1.3, 0.10e-6),
    "pessimistic": (1.5e-6, 1.15, 1.0, 1.0, 0.16e-6),
}
CONTENTION = 1.2  # 4 recipe runs a card step 1.2x slower than one alone (docs/BENCH.md)


def wave_estimate(tokens: float, recipe_tokens: float, runs: int, ctrl: int, end: str) -> tuple[float, float]:
    """(seconds a step of one run alone, seconds until a run of the mix ends) at one end of the ranges."""
    r, f, e, cap, val = ENDS[end]
    extra = tokens - recipe_tokens
    g = KERNELS + CHUNK_PASSES * (1 + (tokens / recipe_tokens - 1) * e)
    t = (f if extra else 1.0) * HOST + RESETS * extra * r + g
    g0, t0 = KERNELS + CHUNK_PASSES, HOST + KERNELS + CHUNK_PASSES
    stretch = max(CONTENTION, (runs * g / t + ctrl * g0 / t0) / cap)
    evals = EVALS * (EVAL_S + VALIDATION * (extra * r + tokens * val))
    return t, 2000 * t * stretch + evals + START_S


def wave(path: Path, runs: int, ctrl: int) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    base = next(r["minilm_tokens_mean"] for r in rows if r["num_sentences"] == "100")
    out = []
    for row in rows:
        est = {end: wave_estimate(row["minilm_tokens_mean"], base, runs, ctrl, end) for end in ENDS}
        out.append(
            {
                "num_sentences": row["num_sentences"],
                "runs_a_card": runs,
                "ctrl_a_card": ctrl,
                "step_alone_s": [round(est[e][0], 2) for e in ENDS],
                "run_ends_s": [round(est[e][1]) for e in ENDS],
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("haystacks", "steps", "wave"))
    ap.add_argument(
        "values", nargs="+", help="envs.num_sentences values, the reference first (100: the recipe); wave: the file"
    )
    ap.add_argument("--runs", type=int, default=3, help="wave: runs of the mix a card")
    ap.add_argument("--ctrl", type=int, default=2, help="wave: recipe runs a card beside them")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warm", type=int, default=1)
    ap.add_argument("--stride", type=int, default=1, help="haystacks: every k-th training question (1: all)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.what == "wave":
        for row in wave(Path(args.values[0]), args.runs, args.ctrl):
            print(json.dumps(row))
        return
    t0, load0 = time.time(), os.getloadavg()[0]
    rows = (
        haystacks(args.values, args.stride) if args.what == "haystacks" else steps(args.values, args.steps, args.warm)
    )
    for row in rows:
        row.update(wall_s=round(time.time() - t0), load_1min_start_end=[round(load0, 2), round(os.getloadavg()[0], 2)])
        print(json.dumps(row))


if __name__ == "__main__":
    main()
