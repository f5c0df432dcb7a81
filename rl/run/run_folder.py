"""The run folder's lifecycle (DESIGN §8.1; docs/TRAINING.md, "The run folder"): one training per folder
(its lock), what a new start, a restart after an early kill and a resume find there, the config
files, and what a resume reads back from model_last.pt (checked before anything is loaded) with
metrics.jsonl rebuilt from it. The training loop that fills the folder is rl/run/train.py.
"""

from __future__ import annotations

import copy
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rl import distributed as dist
from rl.learners import LEARNERS
from rl.run.config import (
    ABSENT,
    PROJECT_ROOT,
    compose_config,
    config_differences,
    hydra_output_dir,
    upgrade_run_config,
    without_hydra,
)
from rl.run.eval_config import EvalError, check_yaml_size, first_line, read_run_config, vetted
from rl.run.validate import is_group
from runstore import (
    FolderLock,
    NotWritableError,
    atomic_write_text,
    load_checkpoint,
    not_writable_message,
    read_jsonl_rows,
    remove_stale_tmp,
    require_keys,
    write_jsonl,
)

log = logging.getLogger("qrag.train")
RUN_FILES = ("model_last.pt", "model_best.pt", "metrics.jsonl", "summary.json")
METRICS = "metrics.jsonl"
RESUME = "continue the run with resume=true"  # what to do after a full disk
# What resume reads from model_last.pt besides the learner's own entries (a KeyError otherwise).
RESUME_KEYS = ("config", "learner.agent", "learner.counters", "best", "rng", "eval_rng")
DAMAGED = "restore it from a copy, or start a new run in another folder (hydra.run.dir=...)"


class RunFolderError(RuntimeError):
    pass


# What a start writes before its first checkpoint besides the run files: Hydra's records and log,
# the lock. A folder holding nothing else held no run, and is removed again if the start fails.
START_FILES = (".hydra", ".lock", "train_q_rag.log")


def holds_no_run(run_dir: Path) -> bool:
    """True for a folder that does not exist yet or holds only what a start writes first."""
    if not run_dir.is_dir():
        return True
    return all(p.name in START_FILES for p in run_dir.iterdir())


def discard_failed_start(run_dir: Path) -> None:
    """Remove a folder made by a start that failed before its first checkpoint: Hydra's records,
    its log (the error was printed), then the folder if nothing else is in it."""
    if not holds_no_run(run_dir):
        return
    for p in run_dir.iterdir():
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    run_dir.rmdir()


def run_folder_lock(run_dir: Path) -> FolderLock:
    """The one-training-per-folder lock (also asked, before Hydra writes, by rl/run/callbacks.py)."""
    return FolderLock(
        run_dir / ".lock",
        f"run folder {run_dir}",
        "wait for that training to end, or choose another folder (hydra.run.dir=...)",
    )


def open_run_dir(cfg: DictConfig) -> tuple[Path, FolderLock, bool]:
    """(run folder, its lock, whether to resume). One training per folder; a folder whose run was
    killed before its first checkpoint holds nothing to resume and starts again from step 0."""
    run_dir = folder_of(cfg)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except PermissionError as exc:
        raise NotWritableError(not_writable_message(run_dir / ".lock", exc)) from None
    lock = run_folder_lock(run_dir).acquire()
    try:
        for p in remove_stale_tmp(run_dir, (*RUN_FILES, "config.yaml", "config_resolved.yaml")):
            log.warning("removed %s, a checkpoint left half-written by a killed run", p)
        has_ckpt = (run_dir / "model_last.pt").exists()
        if cfg.resume and not has_ckpt and not (run_dir / "config.yaml").exists():
            raise RunFolderError(
                f"resume=true but {run_dir} holds no run (no model_last.pt, no config.yaml); "
                f"point hydra.run.dir at the folder of the run to continue"
            )
        if not cfg.resume and has_ckpt:
            existing = [f for f in RUN_FILES if (run_dir / f).exists()]
            raise RunFolderError(
                f"run folder {run_dir} already holds a run ({', '.join(existing)}). Continue it with "
                f"resume=true, or choose a new folder (hydra.run.dir=...)"
            )
        leftovers = (
            [] if has_ckpt else [p for p in (*(run_dir / f for f in RUN_FILES), run_dir / "tb_logs") if p.exists()]
        )
        if leftovers and any(int(r.get("step", 0)) > 0 for r in read_jsonl_rows(run_dir / METRICS)):
            if (run_dir / "summary.json").exists():  # a finished sweep job pruned by keep_last_checkpoints
                raise RunFolderError(
                    f"{run_dir} holds a finished run without model_last.pt (removed by keep_last_checkpoints): "
                    f"it cannot be continued; evaluate its model_best.pt, or train again in another folder"
                )
            raise RunFolderError(  # trained past step 0, then model_last.pt went missing: not ours to delete
                f"{run_dir} holds a run trained past step 0 ({METRICS}) but no model_last.pt to continue it from. "
                f"Restore model_last.pt, or delete {', '.join(p.name for p in leftovers)} to start again"
            )
        if leftovers:
            log.warning(
                "%s has no model_last.pt: its run stopped before the first checkpoint. Removing %s and "
                "starting from step 0",
                run_dir,
                ", ".join(p.name for p in leftovers),
            )
            for p in leftovers:
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    except BaseException:
        lock.release()
        raise
    return run_dir, lock, has_ckpt


def folder_of(cfg: DictConfig) -> Path:
    """The run folder: Hydra's output folder, else ``run_dir`` (tests), else runs/unnamed."""
    return hydra_output_dir() or Path(cfg.get("run_dir") or "runs/unnamed")


def write_config(run_dir: Path, cfg: DictConfig) -> None:
    """config.yaml (unresolved: what evaluation merges) and config_resolved.yaml."""
    plain = without_hydra(cfg)
    atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(plain))
    atomic_write_text(run_dir / "config_resolved.yaml", OmegaConf.to_yaml(plain, resolve=True))


# What a resume may change (docs/TRAINING.md, "The run folder"): how long the run goes on, how often it
# evaluates, where and how visibly it runs; never what is learned from what (task, data, T,
# learner, model, ...). Keys below these count too (logger.progress_bar).
RESUME_MAY_CHANGE = (
    "steps_count",
    "eval_interval",
    "keep_last_checkpoints",
    "device",
    "logger",
    "speed",
    "embed_batch_size",
    "jobs_per_gpu",
)
RESUME_IGNORES = ("resume", "run_dir")  # they name the command and the folder, not the run
# The key naming a group's choice: `learner=pqn` changes a DQN run even where pqn is the default.
GROUP_KEYS = {"learner": "algo.objective", "envs": "envs.name"}


def _under(key: str, top: str) -> bool:
    return key == top or key.startswith(f"{top}.")


def _get(node: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        node = node.get(part, ABSENT) if isinstance(node, dict) else ABSENT
    return node


def _set(node: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = copy.deepcopy(value)


def run_choices(run_dir: Path) -> dict[str, str]:
    """The group choices the run was composed with (Hydra's .hydra/hydra.yaml, which a resume leaves
    as it was), or {} where the folder has no readable record of them."""
    path = run_dir / ".hydra" / "hydra.yaml"
    try:
        check_yaml_size(path)
        choices = yaml.safe_load(path.read_text(encoding="utf-8"))["hydra"]["runtime"]["choices"]
        return {str(k): str(v) for k, v in choices.items()}
    except Exception:  # noqa: BLE001 (missing, damaged or of another layout: compared by values instead)
        return {}


def command_line_keys(cfg: DictConfig, run_dir: Path) -> set[str] | None:
    """The dotted keys this command line sets: those of its key=value overrides and, for a group
    choice that is not the run's own (experiment=, algo=, ...; the run's choices from
    :func:`run_choices`), the keys it changes from the defaults and the key naming a chosen learner
    or env. None for a config composed in code (tests): every key then counts as set."""
    try:
        from hydra.core.hydra_config import HydraConfig

        overrides = list(HydraConfig.get().overrides.task)
    except (ImportError, ValueError):
        return None
    keys, groups, own = set(), [], run_choices(run_dir)
    for arg in overrides:
        key, _, option = arg.lstrip("+~").partition("=")
        key = key.split("@")[0]
        if not is_group(key, PROJECT_ROOT / "configs"):
            keys.add(key)
        elif own.get(key) != option:  # repeating the run's own choice changes nothing
            groups.append(arg)
            keys.add(GROUP_KEYS.get(key, ""))
    if groups:  # the keys (not the values) those choices change from the defaults
        defaults = OmegaConf.to_container(without_hydra(compose_config("training")), resolve=True)
        chosen = OmegaConf.to_container(without_hydra(compose_config("training", groups)), resolve=True)
        keys |= {k for k, _, _ in config_differences(defaults, chosen)}
    return keys - {""}


def resume_config(cfg: DictConfig, run_dir: Path) -> tuple[dict[str, Any], list[str]]:
    """The config a resume continues with (unresolved) and the keys the command line changed in it:
    the run's own config.yaml, vetted as evaluation vets a run config (no resolver reading this
    machine, no relative key), with the command line's values on top where a resume may change
    them (:data:`RESUME_MAY_CHANGE`). Any other change (task, data, T, learner, model, ...) is
    refused in one line before anything is written. Keys an older version's config lacks take the
    command's values (a warning)."""
    path = run_dir / "config.yaml"
    try:
        saved = read_run_config(path)
        saved = vetted(saved, path, saved.keys(), machine="resuming")
        saved_plain = OmegaConf.to_container(OmegaConf.create(saved), resolve=True)
    except EvalError as e:
        raise RunFolderError(str(e)) from None
    except OmegaConfBaseException as e:
        raise RunFolderError(f"{path}: cannot be resolved ({first_line(e)}); restore it from a copy") from None
    now = OmegaConf.to_container(without_hydra(cfg), resolve=False)
    now_plain = OmegaConf.to_container(without_hydra(cfg), resolve=True)
    touched = command_line_keys(cfg, run_dir)
    learner, env = saved_plain["algo"].get("objective", "pqn"), saved_plain["envs"].get("name")
    changed, filled, refused = [], [], []
    for key, old, new in config_differences(saved_plain, now_plain, ignore=RESUME_IGNORES):
        if old == ABSENT:  # a key added since the run's version, unless it belongs to another learner or env
            other_learner = _under(key, "algo") and key.split(".")[1] in set(LEARNERS) - {learner}
            if not other_learner and not (_under(key, "envs") and now_plain["envs"].get("name") != env):
                filled.append(key)
        elif touched is not None and not any(_under(key, t) or _under(t, key) for t in touched):
            continue  # a default of this command, not a choice: the run's own value stays
        elif _get(saved, key) == _get(now, key):
            continue  # the same interpolation, which follows a changed key (envs.facts_test_path: envs.task)
        elif new != ABSENT and any(_under(key, k) for k in RESUME_MAY_CHANGE):
            changed.append(key)
        else:
            refused.append((key, old, new))
    if refused:
        refused.sort(key=lambda d: (d[2] == ABSENT, d[0]))
        shown = "; ".join(f"{k}: {old!r} (run) -> {new!r}" for k, old, new in refused[:4])
        more = f"; and {len(refused) - 4} more" if len(refused) > 4 else ""
        raise RunFolderError(
            f"resume=true continues {run_dir} with its own config ({path.name}); this command changes "
            f"{shown}{more}. A resume may change only {', '.join(RESUME_MAY_CHANGE)}: drop the rest, or "
            f"start a new run in another folder (hydra.run.dir=...)"
        )
    for key in [*changed, *filled, *(k for k in RESUME_IGNORES if k in now)]:
        _set(saved, key, _get(now, key))
    if filled:
        log.warning(
            "%s lacks %s (another version of Q-RAG): resuming with this command's values", path, ", ".join(filled)
        )
    if changed:
        log.info("resuming with %s from the command line", ", ".join(f"{k}={_get(now_plain, k)!r}" for k in changed))
    return saved, changed


def read_resume_state(run_dir: Path, cfg: DictConfig) -> dict[str, Any]:
    """model_last.pt of the run to continue, checked: the entries resume reads, model_best.pt where
    it records a best evaluation, the same learner; a config that differs is named in a warning.
    The checkpoint's config is compared as plain data, never resolved (a checkpoint may come from
    anyone: resolving it would read this machine's environment into the log)."""
    path = run_dir / "model_last.pt"
    # Loaded onto the CPU: modules and optimisers copy their tensors onto their own device,
    # while RNG states (torch, CUDA, the policy generator) and the DQN replay rows must stay CPU
    # tensors (loading them onto a GPU made resume fail there: "RNG state must be a ByteTensor").
    state = load_checkpoint(path, map_location="cpu")
    require_keys(state, path, RESUME_KEYS, DAMAGED)
    best_path = run_dir / "model_best.pt"
    if float(state["best"]) > float("-inf") and not best_path.is_file():
        raise RunFolderError(
            f"{best_path} is missing, though {path.name} records a best evaluation (return "
            f"{float(state['best']):.3f}) saved there; restore it from a copy, or start a new run in "
            f"another folder (hydra.run.dir=...)"
        )
    old = upgrade_run_config(state["config"]) if isinstance(state["config"], dict) else {}
    algo = old.get("algo") if isinstance(old.get("algo"), dict) else {}
    trained_with, now = str(algo.get("objective", "pqn")), str(cfg.algo.objective)
    if trained_with != now:  # another learner's state has other entries (a bare KeyError otherwise)
        raise RunFolderError(
            f"{path} was trained with learner={trained_with}, this command has learner={now}: resume with "
            f"learner={trained_with}, or start a new run in another folder (hydra.run.dir=...)"
        )
    new = OmegaConf.to_container(without_hydra(cfg), resolve=True)
    diffs = [f"{k}: {a!r} -> {b!r}" for k, a, b in config_differences(old, new, ignore=RESUME_IGNORES)]
    if diffs and dist.is_main():
        log.warning("resuming with a config that differs from the checkpoint's:\n  %s", "\n  ".join(diffs))
    return state


def restore_metrics(run_dir: Path, state: dict[str, Any]) -> list[dict[str, Any]]:
    """metrics.jsonl = the rows of the checkpoint ``state`` (returned): a row written after it (a
    kill between the two) is dropped and one it holds but the file lacks is restored, so none is
    doubled or lost."""
    path = run_dir / METRICS
    on_disk = read_jsonl_rows(path)
    rows = state.get("metrics")
    if rows is None:  # a checkpoint of an older version: the file's rows up to its step, one per step
        step = int(state["learner"]["counters"]["optimizer_steps"])
        by_step: dict[int, dict[str, Any]] = {}
        for r in on_disk:
            if int(r["step"]) <= step:
                by_step.setdefault(int(r["step"]), r)
        rows = [by_step[k] for k in sorted(by_step)]
    rows = list(rows)
    exact = "".join(json.dumps(r) + "\n" for r in rows).encode()
    if on_disk != rows or (path.exists() and path.read_bytes() != exact):  # e.g. a torn last line
        write_jsonl(path, rows, RESUME)
        log.warning(
            "%s: rewritten from the checkpoint (%d rows on disk, %d in the checkpoint)", path, len(on_disk), len(rows)
        )
    return rows
