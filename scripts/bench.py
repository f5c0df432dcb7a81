"""Speed benchmark (BENCH.md workloads W1-W6) through the project's real training/eval code.

    python scripts/bench.py [--workloads W1,W2,W3,W4] [--precision auto|tf32|bf16] [--encoder bert-base-random]
                            [--objective pqn|sft] [--set speed.cuda_graphs=false ...] [--ablate]
    python scripts/bench.py --workloads W6 [--w6-sentences 400000] [--w6-questions 8]
    python scripts/bench.py --workloads W5 [--warmup 10] [--set steps_count=20 ...]

W5 is the CPU demo (``train_q_rag.py experiment=demo``, its MiniLM and data; ``--set`` shortens
it) run whole by the trainer in a temporary run folder: seconds per optimiser step, per evaluation
sample and per checkpoint write, the wall time, peak RSS, the fact F1 before and after, and the
machine (CPU model, cores, torch threads, 1-minute load average at the start and the end: a busy
machine shows).

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
import contextlib
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf, open_dict

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
from rl.run.train import Trainer

SIZES = {"W2": 1200, "W3": 40000, "W4": 400000}


# random-weight encoders built on the fly: bert-base (contriever's shape) for timings, and a BERT
# of width 64 for counting ops per step on a CPU (the count does not depend on the width)
RANDOM_ENCODERS = {
    "bert-base-random": {},
    "bert-tiny-random": {"hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 128},
}


def bert_base_random_folder(tokenizer: str, encoder: str = "bert-base-random") -> str:
    """A local folder with the BertConfig of ``encoder`` (RANDOM_ENCODERS) + an uncased WordPiece tokenizer."""
    from transformers import AutoTokenizer, BertConfig

    from rl.model.embedder import resolve_model_path

    out = Path(tempfile.mkdtemp(prefix=f"{encoder}-"))
    BertConfig(**RANDOM_ENCODERS[encoder]).save_pretrained(out)
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
        "tree": args.tree,
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
        ds,
        build_feedback(cfg.feedback, cfg.envs, "train"),
        int(cfg.envs_parallel),  # E (W1: 1; --set envs_parallel=16 as a qa3 run)
        6,
        PositionSettings.from_cfg(cfg.envs),
        True,
        device,
        0,
    )
    learner = build_learner(qnet, env, cfg)
    learner.start_slots()
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
    if args.torch_profile:
        kernel_profile(learner.micro_step, device, args.torch_profile)
    syncs = count_syncs(learner.micro_step, device, args.sync_debug) if args.sync_debug else None
    return {
        "workload": "W1 train-babilong-100",
        "objective": args.objective,
        "s_per_iter_mean": statistics.mean(times),
        "s_per_iter_median": statistics.median(times),
        "cpu_s_per_iter_mean": statistics.mean(cpu_times),
        "torch_threads": torch.get_num_threads(),
        "iters": len(times),
        "peak_gib": peak(device),
        **({} if syncs is None else {"syncs_per_iter": syncs}),
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


def bench_questions(args: argparse.Namespace, model: str, extra: list[str], label: str) -> dict:
    """W6: Q questions over one text of N sentences, as ``QRAGRetriever.retrieve_batch`` runs them
    (samples without gold holding the same chunk list, evaluation's greedy loop) in groups of one,
    so each question is timed alone: the first one tokenises and embeds the text, the others
    reuse that (QNetwork.prepare(..., share=True)) and cost their state steps."""
    n, n_q = args.w6_sentences, args.w6_questions
    if n_q < 2:
        raise SystemExit("--w6-questions must be ≥ 2 (the first question embeds the text, the others are timed)")
    cfg = compose_cfg(args, model, [*extra, f"envs.num_sentences={n}"])
    seed_everything(0)
    device = pick_device(args.device)
    Precision.resolve(str(cfg.precision), device).apply()
    qnet = qnet_from_cfg(cfg, device)
    t0 = time.perf_counter()
    chunks = list(build_dataset(cfg.envs, "test", 0)[0]["chunks"])
    build_s = time.perf_counter() - t0
    small = OmegaConf.merge(cfg.envs, {"num_sentences": 20})  # the questions only: real ones, cheap to build
    asked = build_dataset(small, "test", 0)
    questions = [asked[k % len(asked)]["question"] for k in range(n_q)]
    settings = eval_settings(cfg)
    settings.group_size = 1
    fb = build_feedback(cfg.feedback, cfg.envs, "test")

    def samples(text: list[str], qs: list[str]) -> list[dict]:
        return [
            {"id": k, "question": q, "answer": "", "chunks": text, "sf_idx": [], "sf_known": False}
            for k, q in enumerate(qs)
        ]

    warm = samples(chunks[: min(len(chunks), 2048)], questions[:2])  # another list: graphs and kernels warmed
    list(greedy_episodes(qnet, warm, range(len(warm)), fb, settings))
    data = samples(chunks, questions)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds, tokens = [], []
    sync(device)
    t0 = time.perf_counter()
    for rec in greedy_episodes(qnet, data, range(n_q), fb, settings):  # one record per question, as it ends
        sync(device)
        seconds.append(time.perf_counter() - t0)
        tokens.append(rec["text_len"])
        t0 = time.perf_counter()
    extra_s = seconds[1:]
    return {
        "workload": f"W6 questions-over-one-haystack-{n}",
        "num_sentences": n,
        "num_chunks": len(chunks),
        "questions": n_q,
        "tokens_per_episode": statistics.mean(tokens),
        "s_first_question": seconds[0],
        "s_per_extra_question": statistics.mean(extra_s),
        "s_per_extra_question_max": max(extra_s),
        "steps_per_question": int(settings.max_steps),
        "haystack_build_s": build_s,
        "peak_gib": peak(device),
        **base_info(device, args, cfg, label),
    }


def record_calls(obj, name: str, calls: list[tuple[float, Any]], note: Callable[..., Any]) -> None:
    """Time every call of ``obj.name`` (a bound method): (seconds, ``note(*its arguments)`` taken
    after the call) appended to ``calls``."""
    method = getattr(obj, name)

    def timed(*a, **kw):
        t0 = time.perf_counter()
        out = method(*a, **kw)
        calls.append((time.perf_counter() - t0, note(*a, **kw)))
        return out

    setattr(obj, name, timed)


def step_seconds(micro: list[tuple[float, int]]) -> list[float]:
    """Seconds per optimiser step from (seconds, optimiser steps after) of each micro-step: the
    micro-steps that did not complete a step (accumulation, filling the buffer before
    learning_start) count towards the next one."""
    steps, pending, done = [], 0.0, 0
    for seconds, after in micro:
        pending += seconds
        if after > done:
            steps.append(pending)
            pending, done = 0.0, after
    return steps


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown"


def demo_result(
    micro: list[tuple[float, int]],
    evals: list[tuple[float, tuple[str, int]]],
    saves: list[tuple[float, str]],
    warmup: int,
) -> dict:
    """W5's timings from the recorded calls: the median step after ``warmup`` steps, seconds per
    evaluation sample by phase (validation / test) and per checkpoint write by file."""
    steps = step_seconds(micro)
    if len(steps) <= warmup:
        raise SystemExit(f"W5: {len(steps)} optimiser steps, not more than --warmup {warmup}: nothing to time")
    per_sample: dict[str, list[float]] = {}
    for seconds, (phase, n) in evals:
        per_sample.setdefault(phase, []).append(seconds / n)
    per_save: dict[str, list[float]] = {}
    for seconds, name in saves:
        per_save.setdefault(name, []).append(seconds)
    return {
        "steps": len(steps),
        "s_per_step_median": statistics.median(steps[warmup:]),
        "s_per_step_mean": statistics.mean(steps[warmup:]),
        "s_first_steps": sum(steps[:warmup]),
        "s_per_eval_sample": {k: statistics.median(v) for k, v in per_sample.items()},
        "eval_phases": {k: len(v) for k, v in per_sample.items()},
        "s_per_save": {k: statistics.median(v) for k, v in per_save.items()},
        "saves": {k: len(v) for k, v in per_save.items()},
    }


def bench_demo(args: argparse.Namespace, extra: list[str], label: str) -> dict:
    """W5: ``train_q_rag.py experiment=demo`` (+ ``--set``) run whole by the trainer, its calls timed."""
    load = os.getloadavg()[0]
    t_start = time.perf_counter()
    cfg = compose_config("training", ["experiment=demo", "logger.progress_bar=false", *args.set, *extra])
    run_dir = Path(tempfile.mkdtemp(prefix="bench-demo-"))
    with open_dict(cfg):
        cfg.run_dir = str(run_dir / "run")
    micro, evals, saves = [], [], []
    try:
        trainer = Trainer(cfg)
        counters = trainer.learner.counters
        record_calls(trainer.learner, "micro_step", micro, lambda: counters.optimizer_steps)
        record_calls(trainer.evals, "evaluate", evals, lambda _qnet, _ds, indices, phase, *_: (phase, len(indices)))
        record_calls(trainer, "save", saves, lambda name: name)
        with contextlib.redirect_stdout(sys.stderr):  # the trainer's result line: stdout holds JSON lines only
            summary = trainer.train()
        model_last_mib = (run_dir / "run" / "model_last.pt").stat().st_size / 2**20
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    return {
        "workload": "W5 cpu-demo",
        **demo_result(micro, evals, saves, args.warmup),
        "wall_s": time.perf_counter() - t_start,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,  # KiB on Linux
        "model_last_mib": model_last_mib,
        "untrained_fact_f1": summary.get("untrained/fact_f1"),
        "trained_fact_f1": summary.get("trained/fact_f1"),
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_1min_at_start": load,
        "load_1min_at_end": os.getloadavg()[0],  # other work that started during the run
        **base_info(trainer.device, args, cfg, label),
        "encoder": str(cfg.algo.model.name),  # the demo's, whatever --encoder says
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
    """cProfile of the timed part on stderr: top functions by own time, then by cumulative time
    (where the host's time goes along the call tree)."""
    if prof is not None:
        import pstats

        prof.disable()
        stats = pstats.Stats(prof, stream=sys.stderr)
        stats.sort_stats("tottime").print_stats(25)
        stats.sort_stats("cumulative").print_stats(40)


def kernel_profile(step, device: torch.device, n: int) -> None:
    """torch.profiler over ``n`` more calls of ``step``: the GPU kernels by total time and the
    number of launches per call, on stderr (where a training step's GPU time goes)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        for _ in range(n):
            step()
        sync(device)
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    events = prof.key_averages()
    kernels = [e for e in events if device.type != "cuda" or e.device_type.name == "CUDA"]
    total = sum(getattr(e, key) for e in kernels)
    print(
        f"[torch-profile] {n} calls: {total / n / 1e3:.2f} ms of {key} per call, "
        f"{sum(e.count for e in kernels) / n:.0f} launches per call",
        file=sys.stderr,
    )
    print(events.table(sort_by=key, row_limit=30), file=sys.stderr)


def count_syncs(step, device: torch.device, n: int) -> float | None:
    """Host-device synchronisations per call of ``step`` over ``n`` more calls (CUDA's sync debug
    mode warns at each: reading a value back, a blocking copy); None off a GPU. Each one makes the
    host wait for the card's queue, the longer the more processes share the card."""
    if device.type != "cuda":
        return None
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(n):
                step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    sync(device)
    hits = [w for w in caught if "synchroniz" in str(w.message)]
    return len(hits) / n


def peak(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def git_tree() -> str:
    import subprocess

    try:
        out = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return "project"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "project"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="W1,W2,W3,W4")
    ap.add_argument(
        "--encoder",
        default="bert-base-random",
        help="bert-base-random, bert-tiny-random (width 64: op counts on a CPU) or a model folder",
    )
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
    ap.add_argument("--warmup", type=int, default=10, help="W1: iterations, W5: optimiser steps left out of the timing")
    ap.add_argument("--episodes", type=int, default=3)
    ap.add_argument("--w6-sentences", type=int, default=400000, help="W6: sentences of the one text (W4's size)")
    ap.add_argument("--w6-questions", type=int, default=8, help="W6: questions asked of it (≥ 2)")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override, e.g. speed.cuda_graphs=false; W5: of the demo's config, e.g. steps_count=20 (repeatable)",
    )
    ap.add_argument("--ablate", action="store_true", help="also each switch off alone, then all off")
    ap.add_argument("--profile", action="store_true", help="cProfile the timed iterations/episodes (stderr)")
    ap.add_argument(
        "--torch-profile",
        type=int,
        default=0,
        metavar="N",
        help="W1: after timing, torch.profiler over N more iterations: kernels by GPU time, launches per step (stderr)",
    )
    ap.add_argument(
        "--sync-debug",
        type=int,
        default=0,
        metavar="N",
        help="W1 on a GPU: after timing, count host-device synchronisations over N more iterations (syncs_per_iter)",
    )
    ap.add_argument(
        "--tree", default=git_tree(), help="label of the code tree in the JSON (default: its git commit, or 'project')"
    )
    args = ap.parse_args()
    args.random_init = args.encoder in RANDOM_ENCODERS
    wids = [w.strip() for w in args.workloads.split(",") if w.strip()]
    built = args.random_init and wids != ["W5"]  # W5 runs the demo's own MiniLM
    model = bert_base_random_folder(args.tokenizer, args.encoder) if built else args.encoder
    try:
        for wid in wids:
            for label, extra in variants(args, model):
                if wid == "W1":
                    result = bench_train(args, model, extra, label)
                elif wid == "W5":
                    result = bench_demo(args, extra, label)
                elif wid == "W6":
                    result = bench_questions(args, model, extra, label)
                else:
                    result = bench_eval(args, model, wid, extra, label)
                print(json.dumps(result), flush=True)
                if args.device != "cpu" and torch.cuda.is_available():
                    torch.cuda.empty_cache()
    finally:
        if built:
            shutil.rmtree(model, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
