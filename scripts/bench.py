"""Speed benchmark (BENCH.md workloads W1-W4) through the project's real training/eval code.

    python scripts/bench.py [--workloads W1,W2,W3,W4] [--precision tf32|bf16] [--encoder bert-base-random]

Prints one JSON line per workload: seconds (mean/median), peak GPU memory, card, torch version
and every speed switch in force. ``--encoder bert-base-random`` builds a randomly initialised
BERT-base (contriever's shape) with the MiniLM package's uncased WordPiece tokenizer, so no
download is needed (weights do not change speed); any local model folder works too.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

import rl.config  # noqa: F401  (registers ${qrag_root:})
from envs.data.registry import build_dataset
from envs.env import PositionSettings, VecRetrievalEnv
from envs.feedback import build_feedback
from rl.config import PROJECT_ROOT, pick_device, seed_everything, set_precision
from rl.evaluate import greedy_episodes
from rl.pqn import PQNLearner
from rl.trainer import agent_from_cfg, eval_settings

SIZES = {"W2": 1200, "W3": 40000, "W4": 400000}


def bert_base_random_folder(tokenizer: str) -> str:
    """A local folder with BertConfig() (bert-base) + an uncased WordPiece tokenizer."""
    from transformers import AutoTokenizer, BertConfig

    from rl.encoders import resolve_model_path

    out = Path(tempfile.mkdtemp(prefix="bert-base-random-"))
    BertConfig().save_pretrained(out)
    AutoTokenizer.from_pretrained(resolve_model_path(tokenizer)).save_pretrained(out)
    return str(out)


def compose_cfg(args: argparse.Namespace, model: str, extra: list[str]):
    overrides = [
        f"paths.data_root={args.data_root}", f"envs.task={args.task}", f"algo.model.name={model}",
        f"algo.model.random_init={str(args.random_init).lower()}", f"algo.model.predictor.num_layers={args.layers}",
        "envs.num_sentences=100", "envs.max_steps=6", "batch_size=64", "accumulate_grads=1",
        "max_action_length=64", "max_action_length_in_memory=64", "envs_parallel=1",
        "envs.positions_processor=relative", f"precision={args.precision}", f"device={args.device}",
        "feedback.ground_truth.penalize_extra_steps=true", "feedback.ground_truth.never_terminate=true",
        "steps_count=100000", "learning_start=0", f"compile_encoders={str(args.compile).lower()}", *extra,
    ]
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "configs"), version_base="1.3"):
        return compose("training", overrides=overrides)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def base_info(device: torch.device, args: argparse.Namespace) -> dict:
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"card": card, "torch": torch.__version__, "encoder": args.encoder,
            "switches": {"precision": args.precision, "compile_encoders": args.compile, "chunk_cache": True, "post_hoc_batched_targets": True,
                         "skip_masked_targets": True, "length_bucketing": True, "single_encoder_eval": True,
                         "pinned_transfers": device.type == "cuda"}}


def bench_train(args: argparse.Namespace, model: str) -> dict:
    cfg = compose_cfg(args, model, [])
    seed_everything(0)
    set_precision(args.precision)
    device = pick_device(args.device)
    agent = agent_from_cfg(cfg, device)
    ds = build_dataset(cfg.envs, "train", 0, 0.0, None)
    env = VecRetrievalEnv(ds, build_feedback(cfg.feedback, cfg.envs, "train"), 1, 6,
                          PositionSettings.from_cfg(cfg.envs), True, device, 0)
    learner = PQNLearner(agent, env, cfg.algo, cfg, None)
    env.reset_all()
    times = []
    prof = None
    for i in range(args.warmup + args.iters):
        if args.profile and i == args.warmup:
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        sync(device)
        t0 = time.perf_counter()
        learner.micro_step()
        sync(device)
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
    if prof is not None:
        import pstats

        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    return {"workload": "W1 train-babilong-100", "s_per_iter_mean": statistics.mean(times),
            "s_per_iter_median": statistics.median(times), "iters": len(times),
            "peak_gib": peak(device), **base_info(device, args)}


def bench_eval(args: argparse.Namespace, model: str, wid: str) -> dict:
    n = SIZES[wid]
    cfg = compose_cfg(args, model, [f"envs.num_sentences={n}"])
    seed_everything(0)
    set_precision(args.precision)
    device = pick_device(args.device)
    agent = agent_from_cfg(cfg, device)
    ds = build_dataset(cfg.envs, "test", 0, 0.0, None)
    settings = eval_settings(cfg)
    settings.group_size = 1
    fb = build_feedback(cfg.feedback, cfg.envs, "test")
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times, build = [], []
    for i in range(1 + args.episodes):  # the first episode is warm-up
        t0 = time.perf_counter()
        ds[i]  # haystack assembly, timed separately (cacheable on disk)
        build.append(time.perf_counter() - t0)
        sync(device)
        t0 = time.perf_counter()
        list(greedy_episodes(agent, ds, [i], fb, settings))
        sync(device)
        if i:
            times.append(time.perf_counter() - t0)
    return {"workload": f"{wid} eval-{n}", "num_sentences": n, "s_per_episode_mean": statistics.mean(times),
            "episodes": len(times), "haystack_build_s": statistics.mean(build[1:]), "peak_gib": peak(device),
            **base_info(device, args)}


def peak(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="W1,W2,W3,W4")
    ap.add_argument("--encoder", default="bert-base-random", help="bert-base-random or a model folder")
    ap.add_argument("--tokenizer", default="offline:minilm", help="tokenizer for bert-base-random")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--precision", default="bf16", choices=["tf32", "fp32", "bf16"])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--data-root", default=str(PROJECT_ROOT / "data"), help="folder holding babilong/...")
    ap.add_argument("--task", default="qa2_two-supporting-facts")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--episodes", type=int, default=3)
    ap.add_argument("--compile", action="store_true", help="compile_encoders=true (torch.compile, dynamic shapes)")
    ap.add_argument("--profile", action="store_true", help="cProfile the timed W1 iterations (stderr)")
    args = ap.parse_args()
    args.random_init = args.encoder == "bert-base-random"
    model = bert_base_random_folder(args.tokenizer) if args.random_init else args.encoder
    try:
        for wid in [w.strip() for w in args.workloads.split(",") if w.strip()]:
            result = bench_train(args, model) if wid == "W1" else bench_eval(args, model, wid)
            print(json.dumps(result), flush=True)
    finally:
        if args.random_init:
            shutil.rmtree(model, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
