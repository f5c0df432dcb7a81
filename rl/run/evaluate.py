"""Retriever evaluation of a trained run: ``run(cfg) -> summary`` (entry point: eval_retriever.py).

The merge rule (DESIGN §8.6) is rl/run/eval_config.py, the output files (DESIGN §9.1) and their
checks rl/run/eval_records.py, loading the checkpoint rl/run/load_run.py; this module drives one
evaluation. For each sample index of the seed-permuted test set, one episode (greedy, or Plan Q-RAG
beam search) is run and one JSON line appended to ``<run>/<stem>.jsonl``; ``<stem>.summary.json``
holds the means and ``<stem>.jsonl.meta.json`` the settings the file was produced with. Re-running
resumes: samples whose position in the permuted test set (``index``) is already in the file are
skipped; a file made with other settings (checkpoint, T, stopping, planner, caps, ...) is refused.
Records are keyed on ``index`` only, never on a sample field such as ``id`` (RULER's ``index`` field
repeats, and keying on it once dropped distinct samples as "repeated"). Files written before
``record_format`` 2 (records keyed by id, no token lengths) are refused for resuming with a message;
the reader scripts still read them.

Under torchrun / accelerate launch (docs/DISTRIBUTED.md) the pending samples are dealt out over
the ranks; rank r appends to ``<stem>.rank{r}.jsonl`` and rank 0 merges the part files into
``<stem>.jsonl`` (sample order) after a barrier. Part files left by an interrupted run, of any
world size, are merged in before anything else, so no record is lost or duplicated.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from envs.data.registry import build_dataset, dataset_spec
from envs.feedback import build_feedback
from envs.legacy import Legacy
from rl import distributed as dist
from rl.eval.beam import beam_episodes
from rl.eval.greedy import greedy_episodes, summarize
from rl.model.precision import Precision
from rl.run.build import eval_settings
from rl.run.config import seed_everything
from rl.run.eval_config import EvalError, merge_eval_config
from rl.run.eval_records import (
    check_meta,
    eval_meta,
    eval_stem,
    file_fingerprint,
    merge_parts,
    output_lock,
    part_files,
    part_path,
    write_json,
)
from rl.run.haystack_cache import CachedDataset, maybe_cached
from rl.run.load_run import checkpoint_path, qnet_and_provenance
from rl.run.progress import progress
from rl.run.validate import check_eval
from runstore import (
    DISK_FULL,
    DiskFullError,
    FolderLock,
    disk_full_message,
    remove_stale_tmp,
)


def prepare_files(cfg: DictConfig, out_path: Path, meta_path: Path, summary_path: Path) -> tuple:
    """(checkpoint, meta, records present). Only rank 0 touches the files before the episodes."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_tmp(out_path.parent, (out_path.name, meta_path.name, summary_path.name))  # killed mid-write
    if cfg.overwrite:
        for p in (out_path, meta_path, summary_path, *part_files(out_path)):
            p.unlink(missing_ok=True)
    ckpt = checkpoint_path(cfg)
    meta = eval_meta(cfg, ckpt, file_fingerprint(ckpt))
    for p in (out_path, *part_files(out_path)):  # before any expensive work: refuse stale files at once
        check_meta(meta_path, p, meta)
    records = merge_parts(out_path)  # records of an interrupted sharded run included
    write_json(meta_path, meta)
    return ckpt, meta, records


def run(cfg: DictConfig) -> dict[str, Any]:
    dist.setup()
    cfg = merge_eval_config(cfg)
    check_eval(cfg)  # every value checked before anything is written
    locks: list[FolderLock] = []  # rank 0 holds the output's lock for the whole run
    try:
        return _run(cfg, locks)
    finally:
        for lock in locks:
            lock.release()


def _run(cfg: DictConfig, locks: list[FolderLock]) -> dict[str, Any]:
    seed = int(cfg.seed)
    seed_everything(seed)
    device = dist.device(str(cfg.device))
    Precision.resolve(str(cfg.precision), device).apply()
    out_dir = Path(cfg.output_dir or cfg.pretrained_path)
    stem = eval_stem(cfg)
    out_path = out_dir / f"{stem}.jsonl"
    meta_path = out_dir / f"{stem}.jsonl.meta.json"
    summary_path = out_dir / f"{stem}.summary.json"
    if out_path.resolve().parent != out_dir.resolve():  # the stem is built from config values
        raise EvalError(
            f"output name {stem!r} (from the config) leaves {out_dir}; use plain names for the "
            f"values in it (seed, envs.num_sentences, envs.test_split, ...)"
        )
    main = dist.is_main()
    if main:
        print(
            f"[eval] {cfg.envs.name}/{cfg.envs.task}: {dataset_spec(str(cfg.envs.name)).describe(cfg.envs)}, "
            f"T = {cfg.envs.max_steps}, planner {cfg.eval.planner} -> {out_path}",
            flush=True,
        )

    def prepare() -> tuple:
        locks.append(output_lock(out_path).acquire())
        return prepare_files(cfg, out_path, meta_path, summary_path)

    ckpt, meta, records = dist.run_on_main(prepare)
    qnet, provenance = qnet_and_provenance(cfg, ckpt, device)

    legacy = Legacy.from_cfg(cfg.legacy)  # the switches the evaluation's objects are built with
    split = str(cfg.envs.test_split)
    dataset = build_dataset(cfg.envs, split, seed, 0.0, legacy)
    inputs = qnet.inputs
    cut = max(inputs.layout.action_content, inputs.layout.memory_content)
    dataset = maybe_cached(dataset, cfg, legacy, split, seed, inputs.tokenize, inputs.adopt_tokens, cut)
    n = int(cfg.num_samples)
    indices = list(range(len(dataset) if n < 0 else min(n, len(dataset))))
    done_index = {r["index"] for r in records}
    todo = [i for i in indices if i not in done_index]
    n_todo = len(todo)

    settings = eval_settings(cfg)
    group = cfg.eval.group_size
    if group is not None:
        settings.group_size = int(group)
    write_path = out_path
    if dist.enabled():  # rank r takes every world-th group of pending samples and writes its own part file
        g = max(1, settings.group_size)  # whole groups: each sample is batched with the same neighbours as in
        todo = [i for k in range(dist.rank() * g, len(todo), dist.world() * g) for i in todo[k : k + g]]  # 1 process
        write_path = part_path(out_path, dist.rank())
    feedback = build_feedback(cfg.feedback, cfg.envs, "test", str(cfg.envs.task), legacy)
    if str(cfg.eval.planner) == "beam":
        episodes = beam_episodes(
            qnet,
            dataset,
            todo,
            feedback,
            settings,
            int(cfg.eval.beam_width),
            int(cfg.eval.beam_expand),
            str(cfg.eval.beam_score),
        )
    elif str(cfg.eval.planner) == "greedy":
        episodes = greedy_episodes(qnet, dataset, todo, feedback, settings)
    else:
        raise EvalError(f"eval.planner must be 'greedy' or 'beam', got {cfg.eval.planner!r}")

    if records and main:
        print(f"[eval] resuming {out_path.name}: {len(records)} records present, {n_todo} samples to go", flush=True)
    if dist.enabled() and main:
        print(f"[eval] {n_todo} samples over {dist.world()} ranks -> {part_path(out_path, 0).name} ...", flush=True)
    t0 = time.perf_counter()
    try:
        with progress(
            total=len(todo), desc=f"eval {stem}", dynamic_ncols=True, disable=not cfg.progress_bar or not main
        ) as bar:
            _append_records(write_path, todo, episodes, records, bar)
    except OSError as e:
        if e.errno in DISK_FULL:
            raise DiskFullError(
                disk_full_message(write_path, f"its {len(records)} complete records are kept")
            ) from None
        raise
    cache = (dataset.hits, dataset.misses, dataset.writes) if isinstance(dataset, CachedDataset) else None
    if dist.enabled():
        caches = dist.gather_object(cache)
        dist.barrier()  # every part file is complete
        if not main:
            return dist.broadcast_object(None)
        records = merge_parts(out_path)
        cache = None if cache is None else tuple(sum(c[k] for c in caches) for k in range(3))  # type: ignore
        summary = _summarize(cfg, records, indices, out_path, summary_path, meta, n, t0, cache, provenance)
        return dist.broadcast_object(summary)
    return _summarize(cfg, records, indices, out_path, summary_path, meta, n, t0, cache, provenance)


def _append_records(write_path: Path, todo: list[int], episodes: Any, records: list[dict[str, Any]], bar: Any) -> None:
    """One line per finished episode, flushed at once (a kill loses at most the episode running).
    ``todo`` holds only indices without a record, and the output lock keeps other writers out, so
    no sample is written twice."""
    with open(write_path, "a", encoding="utf-8") as f:
        for index, rec in zip(todo, episodes):
            rec["index"] = index
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            f.flush()
            records.append(rec)
            bar.update(1)
            bar.set_postfix(f1=f"{rec['f1']:.3f}" if rec.get("f1") is not None else "n/a")


def _summarize(
    cfg: DictConfig,
    records: list[dict[str, Any]],
    indices: list[int],
    out_path: Path,
    summary_path: Path,
    meta: dict[str, Any],
    n: int,
    t0: float,
    cache: tuple | None,
    provenance: dict[str, Any],
) -> dict[str, Any]:
    stem = out_path.stem
    wanted = set(indices)
    chosen = [r for r in records if r.get("index") in wanted]
    summary = summarize(chosen)
    summary.update(
        {
            "max_steps": int(cfg.envs.max_steps),
            "n_in_file": len(records),
            "file": out_path.name,
            "wall_s": time.perf_counter() - t0,
            "settings": meta,
            "num_samples": n,
            "run": str(cfg.pretrained_path),
            "checkpoint": provenance,
        }
    )
    if cache is not None:
        summary["haystack_cache"] = dict(zip(("hits", "misses", "writes"), cache))
    write_json(summary_path, summary)
    print(
        f"[eval] {stem}: n={summary['n']} fact_em={_fmt(summary['fact_em'])} fact_f1={_fmt(summary['fact_f1'])} "
        f"return={summary['return']:.3f}±{summary['return_std']:.3f} text_len={_fmt(summary['mean_text_len'], 0)} "
        f"s/episode={_fmt(summary['episode_s_mean'], 2)} -> {summary_path}",
        flush=True,
    )
    return summary


def _fmt(x: Any, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"
