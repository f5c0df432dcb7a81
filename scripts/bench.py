"""Speed benchmark (BENCH.md workloads W1-W4) through the project's real training/eval code.

    python scripts/bench.py [--workloads W1,W2,W3,W4] [--precision auto|tf32|bf16] [--encoder bert-base-random]
                            [--objective pqn|sft] [--set speed.cuda_graphs=false ...] [--ablate]

Prints one JSON line per workload: seconds (mean/median), peak GPU memory, card, torch version,
every speed switch in force (the ``speed`` block of the config, rl/model/fast/switches.py) and what
served the gradient-free encoder calls (``packed_encoder``: its attention kernel and whether it was
compiled, or ``packed_off``: why the padded path did). ``--ablate``
runs each workload with all switches as configured, then with each switch that is on turned off
alone, then with all of them off (the reference's schedule). ``--encoder bert-base-random`` builds a randomly initialised
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

import rl.run.config  # noqa: F401  (registers ${qrag_root:})
from envs.data.registry import build_dataset
from envs.env import PositionSettings, VecRetrievalEnv
from envs.feedback import build_feedback
from rl.distributed import pick_device
from rl.eval.greedy import greedy_episodes
from rl.model.fast.switches import SpeedSwitches
from rl.model.precision import PRECISIONS, Precision
from rl.run.build import build_learner, eval_settings, qnet_from_cfg, skip_length_counts
from rl.run.config import PROJECT_ROOT, compose_config, seed_everything

SIZES = {"W2": 1200, "W3": 40000, "W4": 400000}


def bert_base_random_folder(tokenizer: str) -> str:
    """A local folder with BertConfig() (bert-base) + an uncased WordPiece tokenizer."""
    from transformers import AutoTokenizer, BertConfig

    from rl.model.embedder import resolve_model_path

    out = Path(tempfile.mkdtemp(prefix="bert-base-random-"))
    BertConfig().save_pretrained(out)
    AutoTokenizer.from_pretrained(resolve_model_path(tokenizer)).save_pretrained(out)
    return str(out)


def compose_cfg(args: argparse.Namespace, model: str, extra: list[str]):
    """The reference W1 settings (BENCH.md) + --set overrides + the workload's extras."""
    overrides = [
        f"paths.data_root={args.data_root}",
        f"envs.task={args.task}",
        f"algo.model.name={model}",
        f"algo.model.random_init={str(args.random_init).lower()}",
        f"algo.model.predictor.num_layers={args.layers}",
        "envs.num_sentences=100",
        "envs.max_steps=6",
        "batch_size=64",
        "accumulate_grads=1",
        "max_action_length=64",
        "max_action_length_in_memory=64",
        "envs_parallel=1",
        "envs.positions_processor=relative",
        f"device={args.device}",
        *([] if args.precision is None else [f"precision={args.precision}"]),
        "feedback.ground_truth.penalize_extra_steps=true",
        "feedback.ground_truth.never_terminate=true",
        "steps_count=100000",
        "learning_start=0",
        f"learner={args.objective}",
        *args.set,
        *extra,
    ]
    return compose_config("training", overrides)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def base_info(device: torch.device, args: argparse.Namespace, cfg, label: str) -> dict:
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {
        "run": label,
        "card": card,
        "torch": torch.__version__,
        "encoder": args.encoder,
        "precision": str(cfg.precision),
        "autocast": str(Precision.resolve(str(cfg.precision), device).autocast),
        "switches": SpeedSwitches.from_run_cfg(cfg).as_dict(),
    }


def bench_train(args: argparse.Namespace, model: str, extra: list[str], label: str) -> dict:
    cfg = compose_cfg(args, model, extra)
    seed_everything(0)
    device = pick_device(args.device)
    Precision.resolve(str(cfg.precision), device).apply()
    qnet = qnet_from_cfg(cfg, device)
    ds = build_dataset(cfg.envs, "train", 0)
    skip_length_counts(ds)  # as rl.run.build.train_env does for training runs
    env = VecRetrievalEnv(
        ds, build_feedback(cfg.feedback, cfg.envs, "train"), 1, 6, PositionSettings.from_cfg(cfg.envs), True, device, 0
    )
    learner = build_learner(qnet, env, cfg)
    env.reset_all()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times, cpu_times, prof = [], [], None
    for i in range(args.warmup + args.iters):
        if i == args.warmup:
            prof = start_profile(args)
        sync(device)
        t0, c0 = time.perf_counter(), time.process_time()
        learner.micro_step()
        sync(device)
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
    stop_profile(prof)
    return {
        "workload": "W1 train-babilong-100",
        "objective": args.objective,
        "s_per_iter_mean": statistics.mean(times),
        "s_per_iter_median": statistics.median(times),
        "cpu_s_per_iter_mean": statistics.mean(cpu_times),
        "torch_threads": torch.get_num_threads(),
        "iters": len(times),
        "peak_gib": peak(device),
        **base_info(device, args, cfg, label),
        **qnet.encoding.describe(),
    }


def bench_eval(args: argparse.Namespace, model: str, wid: str, extra: list[str], label: str) -> dict:
    n = SIZES[wid]
    cfg = compose_cfg(args, model, [*extra, f"envs.num_sentences={n}"])
    seed_everything(0)
    device = pick_device(args.device)
    Precision.resolve(str(cfg.precision), device).apply()
    qnet = qnet_from_cfg(cfg, device)
    ds = build_dataset(cfg.envs, "test", 0)
    settings = eval_settings(cfg)
    settings.group_size = 1
    fb = build_feedback(cfg.feedback, cfg.envs, "test")
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times, build, tokens = [], [], []
    prof = None
    for i in range(1 + args.episodes):  # the first episode is warm-up
        if i == 1:
            prof = start_profile(args)
        t0 = time.perf_counter()
        ds[i]  # haystack assembly, timed separately (cacheable on disk)
        build.append(time.perf_counter() - t0)
        sync(device)
        t0 = time.perf_counter()
        rec = list(greedy_episodes(qnet, ds, [i], fb, settings))[0]
        sync(device)
        if i:
            times.append(time.perf_counter() - t0)
            tokens.append(rec["text_len"])
    stop_profile(prof)
    return {
        "workload": f"{wid} eval-{n}",
        "num_sentences": n,
        "s_per_episode_mean": statistics.mean(times),
        "episodes": len(times),
        "tokens_per_episode": statistics.mean(tokens),
        "haystack_build_s": statistics.mean(build[1:]),
        "peak_gib": peak(device),
        **base_info(device, args, cfg, label),
        **qnet.encoding.describe(),
    }


def variants(args: argparse.Namespace, model: str) -> list[tuple[str, list[str]]]:
    """(label, overrides): as configured; with --ablate also each switch that is on turned off,
    then every switch off."""
    runs = [("as configured" + "".join(f" + {kv}" for kv in args.set), [])]
    if args.ablate:
        on = [k for k, v in SpeedSwitches.from_run_cfg(compose_cfg(args, model, [])).as_dict().items() if v]
        runs += [(f"speed.{k}=false", [f"speed.{k}=false"]) for k in on]
        runs.append(("all off", [f"speed.{k}=false" for k in SpeedSwitches().as_dict()]))
    return runs


def start_profile(args: argparse.Namespace):
    if not args.profile:
        return None
    import cProfile

    prof = cProfile.Profile()
    prof.enable()
    return prof


def stop_profile(prof) -> None:
    """cProfile of the timed part, top functions by own time, on stderr."""
    if prof is not None:
        import pstats

        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)


def peak(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="W1,W2,W3,W4")
    ap.add_argument("--encoder", default="bert-base-random", help="bert-base-random or a model folder")
    ap.add_argument("--tokenizer", default="offline:minilm", help="tokenizer for bert-base-random")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument(
        "--objective",
        default="pqn",
        choices=["pqn", "sft"],
        help="W1's learner: pqn (Q-RAG) or sft (the supervised baseline, rl/learners/sft.py)",
    )
    ap.add_argument("--precision", choices=PRECISIONS, help="overrides the config's precision (configs/training.yaml)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--data-root", default=str(PROJECT_ROOT / "data"), help="folder holding babilong/...")
    ap.add_argument("--task", default="qa2_two-supporting-facts")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--episodes", type=int, default=3)
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override, e.g. speed.cuda_graphs=false (repeatable)",
    )
    ap.add_argument("--ablate", action="store_true", help="also each switch off alone, then all off")
    ap.add_argument("--profile", action="store_true", help="cProfile the timed iterations/episodes (stderr)")
    args = ap.parse_args()
    args.random_init = args.encoder == "bert-base-random"
    model = bert_base_random_folder(args.tokenizer) if args.random_init else args.encoder
    try:
        for wid in [w.strip() for w in args.workloads.split(",") if w.strip()]:
            for label, extra in variants(args, model):
                result = (
                    bench_train(args, model, extra, label)
                    if wid == "W1"
                    else bench_eval(args, model, wid, extra, label)
                )
                print(json.dumps(result), flush=True)
                if args.device != "cpu" and torch.cuda.is_available():
                    torch.cuda.empty_cache()
    finally:
        if args.random_init:
            shutil.rmtree(model, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
