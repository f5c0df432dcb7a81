"""Retriever evaluation of a trained run: ``run(cfg) -> summary`` (entry point: eval_retriever.py).

DESIGN §8.6 merge rule, §9.1 outputs. For each sample index of the seed-permuted test set, one
episode (greedy, or Plan Q-RAG beam search) is run and one JSON line appended to
``<run>/<stem>.jsonl``; ``<stem>.summary.json`` holds the means and ``<stem>.jsonl.meta.json``
the settings the file was produced with. Re-running resumes: samples whose position in the
permuted test set (``index``) is already in the file are skipped; a file made with other
settings (checkpoint, T, stopping, planner, caps, ...) is refused. Records are keyed on
``index`` only, never on a sample field such as ``id`` (RULER's ``index`` field repeats, and
keying on it once dropped distinct samples as "repeated"). Files written before
``record_format`` 2 (records keyed by id, no token lengths) are refused for resuming with a
message; the reader scripts still read them.

Under torchrun / accelerate launch (docs/DISTRIBUTED.md) the pending samples are dealt out over
the ranks; rank r appends to ``<stem>.rank{r}.jsonl`` and rank 0 merges the part files into
``<stem>.jsonl`` (sample order) after a barrier. Part files left by an interrupted run, of any
world size, are merged in before anything else, so no record is lost or duplicated.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import re
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from envs.data.common import content_sha256
from envs.data.registry import ACTING_KEYS, build_dataset, dataset_spec
from envs.feedback import build_feedback
from envs.legacy import Legacy
from rl import distributed as dist
from rl.eval.beam import beam_episodes
from rl.eval.greedy import greedy_episodes, summarize
from rl.model.precision import Precision
from rl.run.build import eval_settings, qnet_from_cfg
from rl.run.checkpoints import load_eval_weights
from rl.run.config import PROJECT_ROOT, seed_everything, upgrade_run_config, without_hydra
from rl.run.data_roots import stray_data_paths
from rl.run.haystack_cache import CachedDataset, maybe_cached
from rl.run.keys import RunKeys
from rl.run.progress import progress
from rl.run.validate import check_eval
from runstore import (
    DISK_FULL,
    DiskFullError,
    FolderLock,
    atomic_write_text,
    disk_full_message,
    load_checkpoint,
    remove_stale_tmp,
    require_keys,
)

log = logging.getLogger("qrag.eval")

FULL_HASH_LIMIT = 256 * 2**20
PARTIAL_HASH_BYTES = 32 * 2**20
# 2: records keyed on the sample position only; records carry num_tokens where the loader counts
# them; BabiLong/NIAH/RULER-QA ids unique (RULER's index field no longer the id)
RECORD_FORMAT = 2


class EvalError(RuntimeError):
    """A problem the user has to fix (missing run, stale eval file, bad setting)."""


# -- configuration --------------------------------------------------------------------------
def _prune_nulls(node: Any, saved: Any) -> Any:
    """Drop eval keys whose value is null where the saved config has the key: null = inherit."""
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        has = isinstance(saved, dict) and k in saved
        if v is None and has:
            continue
        out[k] = _prune_nulls(v, saved.get(k) if has else None) if isinstance(v, dict) else v
    return out


# A training config has a few hundred nodes; a run folder from elsewhere may hold a YAML whose
# aliases expand to billions of them (it would hang the loader): refused above this many.
MAX_CONFIG_NODES = 100_000


def check_yaml_size(path: Path) -> None:
    """Refuse a YAML file whose nodes, with every alias expanded, exceed MAX_CONFIG_NODES. The
    node graph is composed without expanding aliases, and each node's expanded size is counted
    once, so a file of any expansion is checked in time linear in its length."""
    import yaml

    root = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    sizes: dict[int, int] = {}

    def size(node: Any) -> int:
        if id(node) not in sizes:
            sizes[id(node)] = 0  # a node reached again while counting it (a cycle) adds nothing more
            children = node.value if isinstance(node.value, list) else []
            flat = [c for pair in children for c in (pair if isinstance(pair, tuple) else (pair,))]
            sizes[id(node)] = min(1 + sum(size(c) for c in flat), MAX_CONFIG_NODES + 1)
        return sizes[id(node)]

    if root is not None and size(root) > MAX_CONFIG_NODES:
        raise EvalError(
            f"{path}: its aliases expand to more than {MAX_CONFIG_NODES} values (a training run's config "
            f"holds a few hundred); not loaded: restore it from a copy"
        )


def load_env_node(name: str) -> dict[str, Any]:
    """configs/envs/<name>.yaml, unresolved. (``eval_env`` is a plain key, not a Hydra group, so
    that it can name any env config without duplicating it.)"""
    path = PROJECT_ROOT / "configs" / "envs" / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (PROJECT_ROOT / "configs" / "envs").glob("*.yaml"))
        raise EvalError(f"eval_env={name}: no configs/envs/{name}.yaml; known: {known}")
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)  # type: ignore[return-value]


def replace_env(saved_envs: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """The eval_env node with the run's acting settings (positions, order, T) kept; a dataset of
    the run's family (BabiLong and its official sets) also keeps the run's task (the model was
    trained on it)."""
    new = dict(node)
    for k in ACTING_KEYS:
        new[k] = saved_envs[k]
    family = dataset_spec(str(node["name"])).family
    if family is not None and family == dataset_spec(str(saved_envs["name"])).family:
        new["task"] = saved_envs["task"]
    return new


# What evaluation takes from a run folder's config.yaml: what describes the trained model and the
# environment it acts in. A run folder may come from anyone, so nothing else is taken: not where
# to write (output_dir), not the reward or its server (feedback), not the device or the seed.
RUN_KEYS = (
    "algo",
    "envs",
    "legacy",
    "paths",
    "precision",
    "speed",
    "compile_encoders",
    "max_action_length",
    "max_action_length_in_memory",
    "eval_max_action_length_in_memory",
    "max_state_length",
    "embed_batch_size",
    "eval_group_size",
)
# ${...} in a saved value: only references to the keys above and ${qrag_root:} are resolved (any
# other resolver, e.g. oc.env, would read the evaluating machine's environment into the files).
SAFE_RESOLVERS = ("qrag_root",)
INTERPOLATION = re.compile(r"\$\{\s*([^:${}]*?)\s*(:|\})")


def taken_from_run(saved: dict[str, Any], source: Path) -> dict[str, Any]:
    """The allow-listed part of a saved run config. A value that is exactly a reference to
    another saved key holding a plain value (``total: ${steps_count}``) gets that value; any other
    interpolation reaching outside the part, or calling a resolver that could read this machine
    (``${oc.env:...}``), is refused with one line naming the key."""

    def outside(name: str) -> bool:
        return not name.startswith(".") and name.split(".")[0].split("[")[0] not in RUN_KEYS

    def refuse(key: str, node: str, what: str) -> EvalError:
        return EvalError(
            f"{source}: {key} = {node!r} reads {what}, which a run folder's config may not (it would be "
            f"resolved on the evaluating machine); replace it with the plain value the run used"
        )

    def clean(node: Any, key: str) -> Any:
        if isinstance(node, dict):
            return {k: clean(v, f"{key}.{k}" if key else str(k)) for k, v in node.items()}
        if isinstance(node, list):
            return [clean(v, f"{key}[{i}]") for i, v in enumerate(node)]
        if not isinstance(node, str):
            return node
        for name, kind in INTERPOLATION.findall(node):
            if kind == ":" and name not in SAFE_RESOLVERS:
                raise refuse(key, node, f"the resolver {name}:")
            if kind == "}" and outside(name):
                value: Any = saved
                for part in name.split("."):
                    value = value.get(part) if isinstance(value, dict) else None
                plain = value is not None and not isinstance(value, (dict, list)) and "${" not in str(value)
                if node.strip() != f"${{{name}}}" or not plain:
                    raise refuse(key, node, f"the key {name}")
                return value
        return node

    return clean({k: copy.deepcopy(saved[k]) for k in RUN_KEYS if k in saved}, "")


def fill_missing(taken: dict[str, Any], source: Path) -> dict[str, Any]:
    """Keys a run config of another version lacks, filled with today's defaults (one warning);
    speed switches this version does not know are dropped (warning)."""
    cfg_dir = PROJECT_ROOT / "configs"
    defaults = RunKeys.defaults()  # the top-level keys evaluation reads (rl/run/keys.py)
    filled: list[str] = []
    for k in RUN_KEYS:  # (speed: SpeedSwitches.from_run_cfg defaults its own keys, reading an old compile_encoders)
        if k not in taken and k in defaults and k != "speed":
            taken[k] = copy.deepcopy(defaults[k])
            filled.append(f"{k}={taken[k]!r}")
    if "legacy" not in taken:  # training.yaml's group default, legacy=none (ConfigStore, envs/legacy.py)
        taken["legacy"] = Legacy.defaults()
        filled.append("legacy=none")
    if "paths" not in taken:
        taken["paths"] = OmegaConf.to_container(OmegaConf.load(cfg_dir / "paths" / "default.yaml"), resolve=False)
        filled.append("paths=default")
    envs = taken.get("envs")
    env_yaml = cfg_dir / "envs" / f"{envs.get('name')}.yaml" if isinstance(envs, dict) else None
    if env_yaml is not None and env_yaml.is_file():
        for k, v in OmegaConf.to_container(OmegaConf.load(env_yaml), resolve=False).items():  # type: ignore
            if k not in envs:
                envs[k] = v
                filled.append(f"envs.{k}={v!r}")
    from rl.model.fast.switches import REMOVED, SpeedSwitches

    speed = taken.get("speed")
    known = {f.name for f in dataclasses.fields(SpeedSwitches)} | set(REMOVED)
    unknown = sorted(k for k in speed if k not in known) if isinstance(speed, dict) else []
    for k in unknown:
        del speed[k]
    if filled:
        log.warning(
            "%s lacks %s (another version of Q-RAG): evaluating with today's defaults", source, ", ".join(filled)
        )
    if unknown:
        log.warning("%s: speed switch(es) %s unknown to this version, ignored", source, ", ".join(unknown))
    return taken


def merge_eval_config(eval_cfg: DictConfig, reads_data: bool = True) -> DictConfig:
    """DESIGN §8.6: (eval config + CLI) over the allow-listed part of the run's unresolved
    config.yaml (:data:`RUN_KEYS`), resolved at the end. ``reads_data``: the test data will be
    read, so the run's data paths must lie under the data roots (rl/run/data_roots.py); the
    retriever tool reads none of them."""
    if OmegaConf.is_missing(eval_cfg, "pretrained_path") or not eval_cfg.get("pretrained_path"):
        raise EvalError(
            "pretrained_path is required: pass the run folder of a trained model, e.g. "
            "python eval_retriever.py pretrained_path=runs/Dec03_12-03-43_QRAG_qa2_two-supporting-facts"
        )
    run_dir = Path(str(eval_cfg.pretrained_path)).expanduser()
    saved_path = run_dir / "config.yaml"
    if not saved_path.is_file():
        raise EvalError(
            f"pretrained_path={run_dir}: no config.yaml there (expected the folder of a training run, holding "
            f"config.yaml and model_best.pt)"
        )
    try:
        check_yaml_size(saved_path)
        raw = OmegaConf.to_container(OmegaConf.load(saved_path), resolve=False)
    except EvalError:
        raise
    except Exception as e:  # not YAML, or YAML that is not a mapping
        raise EvalError(f"{saved_path}: not a readable run config ({_first(e)}); restore it from a copy") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("algo"), dict) or not isinstance(raw.get("envs"), dict):
        raise EvalError(f"{saved_path}: expected a training run's config with algo and envs sections; restore it")
    saved = fill_missing(taken_from_run(upgrade_run_config(raw), saved_path), saved_path)
    ev: dict[str, Any] = OmegaConf.to_container(without_hydra(eval_cfg), resolve=False)  # type: ignore
    if ev["eval_env"]:
        saved["envs"] = replace_env(saved["envs"], load_env_node(str(ev["eval_env"])))
    if saved["envs"].get("name") == "babilong" and ev["envs"].get("length_unit") is None:
        # BabiLong is evaluated at the official token budgets unless a sentence count is asked for
        ev["envs"]["length_unit"] = "sentences" if ev["envs"].get("num_sentences") is not None else "tokens"
    ev = _prune_nulls(ev, saved)
    try:
        merged = OmegaConf.merge(OmegaConf.create(saved), OmegaConf.create(ev))
        OmegaConf.resolve(merged)
    except OmegaConfBaseException as e:
        raise EvalError(f"{saved_path}: cannot be combined with the evaluation config ({_first(e)})") from None
    merged.pretrained_path = str(run_dir)
    # a run folder may come from anyone: its config never decides which local files are read ...
    stray = stray_data_paths(merged, (ev.get("envs") or {}).keys(), (ev.get("paths") or {}).keys())
    if stray and reads_data:
        key, value = stray[0]
        raise EvalError(
            f"{saved_path}: envs.{key} = {value} lies outside the data roots (configs/paths/*.yaml's data_root "
            f"and ruler_root); a run folder's config may not choose which local files evaluation reads: to read "
            f"it, pass +envs.{key}=<path> (or +paths.<key>=<folder>) on the command line"
        )
    # ... nor whether model code runs here
    OmegaConf.update(merged, "algo.model.trust_remote_code", ev["trust_remote_code"] is True, force_add=True)
    return merged


def _first(exc: BaseException) -> str:
    lines = [x.strip() for x in str(exc).splitlines() if x.strip()]
    return lines[0] if lines else type(exc).__name__


# -- output files -----------------------------------------------------------------------------
def eval_stem(cfg: DictConfig) -> str:
    """eval_seed{seed}, then what sets the test samples (the dataset's part: ``_ns{N}`` BabiLong,
    ``_{split}`` NIAH and RULER QA, ...; envs/data/ loaders), then suffixes for settings that
    change results."""
    stem = f"eval_seed{int(cfg.seed)}" + dataset_spec(str(cfg.envs.name)).eval_suffix(cfg.envs)
    if cfg.use_last:
        stem += "_last"
    if str(cfg.eval.planner) == "beam":
        stem += f"_beam{int(cfg.eval.beam_width)}x{int(cfg.eval.beam_expand)}"
    if cfg.eval.stop_q_threshold is not None:
        stem += f"_qstop{float(cfg.eval.stop_q_threshold):g}"
    if Legacy.from_cfg(cfg.legacy).oracle_stop:
        stem += "_oracle"
    return stem


def file_fingerprint(path: Path) -> str:
    """sha256 of the file (≤ 256 MiB), else of its size + first and last 32 MiB."""
    h = hashlib.sha256()
    size = path.stat().st_size
    with open(path, "rb") as f:
        if size <= FULL_HASH_LIMIT:
            for block in iter(lambda: f.read(2**20), b""):
                h.update(block)
            return f"sha256:{h.hexdigest()}"
        h.update(str(size).encode())
        h.update(f.read(PARTIAL_HASH_BYTES))
        f.seek(size - PARTIAL_HASH_BYTES)
        h.update(f.read(PARTIAL_HASH_BYTES))
    return f"sha256-partial:{h.hexdigest()}"


def eval_meta(cfg: DictConfig, ckpt: Path, fingerprint: str) -> dict[str, Any]:
    """Everything that makes two eval files incomparable (DESIGN §9.1 resume, §11 #23)."""
    ev, envs = cfg.eval, cfg.envs
    beam = str(ev.planner) == "beam"
    return {
        "record_format": RECORD_FORMAT,
        "checkpoint": ckpt.name,
        "checkpoint_hash": fingerprint,
        "model": str(cfg.algo.model.name),
        "dataset": str(envs.name),
        "task": str(envs.task),
        **(spec := dataset_spec(str(envs.name)).eval_meta(envs)),  # num_sentences, length, context_length, data_path
        "data_sha256": content_sha256(spec["data_path"]),  # which data the numbers came from
        "split": str(envs.test_split),
        "seed": int(cfg.seed),
        "max_steps": int(envs.max_steps),
        "oracle_stop": Legacy.from_cfg(cfg.legacy).oracle_stop,
        "positions": f"{envs.positions_processor}/{envs.step_size}/{envs.relative_formula}",
        "sort_by_index": bool(envs.sort_by_index),
        "caps": {
            k: cfg[k]
            for k in (
                "max_action_length",
                "max_action_length_in_memory",
                "eval_max_action_length_in_memory",
                "max_state_length",
            )
        },
        "planner": str(ev.planner),
        "beam_width": int(ev.beam_width) if beam else None,
        "beam_expand": int(ev.beam_expand) if beam else None,
        "stop_q_threshold": ev.stop_q_threshold,
        "feedback": str(cfg.feedback.type),
        "precision": str(cfg.get("precision")),
    }


def read_records(path: Path) -> list[dict[str, Any]]:
    """Records of an eval file. A half-written last line (crash mid-write) is truncated away;
    a malformed line elsewhere is an error naming the file and line."""
    if not path.exists():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]  # tail is b"" when the file ends with a newline
    records = []
    for no, line in enumerate(complete, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as e:
            if no == len(complete) and not tail:
                tail = line  # a last line that never parsed: treat as half-written
                complete = complete[:-1]
                break
            raise EvalError(f"{path}:{no}: not valid JSON ({e}); delete the file or pass overwrite=true") from e
    if tail:
        good = b"".join(x + b"\n" for x in complete)
        log.warning("%s: dropped a half-written last line (%d bytes) from an interrupted run", path, len(tail))
        with open(path, "r+b") as f:
            f.truncate(len(good))
    return unique_records(records, path)


def unique_records(records: list[dict[str, Any]], path: Path) -> list[dict[str, Any]]:
    """The first record of each sample (older versions let two concurrent runs write every sample twice)."""
    seen: set[Any] = set()
    out = []
    for rec in records:
        key = ("index", rec["index"]) if "index" in rec else ("id", str(rec.get("id")))
        if key not in seen:
            seen.add(key)
            out.append(rec)
    if len(out) < len(records):
        log.warning("%s: %d duplicate records ignored (one record per sample is used)", path, len(records) - len(out))
    return out


def part_path(out_path: Path, rank: int) -> Path:
    """Records of one rank of a sharded evaluation, next to the final file."""
    return out_path.with_name(f"{out_path.stem}.rank{rank}.jsonl")


def part_files(out_path: Path) -> list[Path]:
    pattern = re.compile(re.escape(out_path.stem) + r"\.rank\d+\.jsonl")
    return sorted(p for p in out_path.parent.glob(f"{out_path.stem}.rank*.jsonl") if pattern.fullmatch(p.name))


def merge_parts(out_path: Path) -> list[dict[str, Any]]:
    """The records of ``out_path`` and of its part files, in sample order as a 1-process run
    writes them (a sample index or id already present is skipped). The file is replaced
    atomically before the parts are deleted: a crash in between leaves parts whose records are
    all present, and they are skipped next time."""
    records = read_records(out_path)
    parts = part_files(out_path)
    if not parts:
        return records
    new = sorted((r for p in parts for r in read_records(p)), key=lambda r: r["index"])
    have_index = {r["index"] for r in records}
    added = []
    for rec in new:
        if rec["index"] not in have_index:
            have_index.add(rec["index"])
            added.append(rec)
    # an interrupted sharded run leaves gaps (rank 1 stopped early, rank 0 went on): sample order
    merged = sorted(records + added, key=lambda r: r["index"])
    if added:
        atomic_write_text(out_path, "".join(json.dumps(rec, ensure_ascii=False) + "\n" for rec in merged))
    for p in parts:
        p.unlink()
    return merged


def _write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def check_meta(meta_path: Path, out_path: Path, meta: dict[str, Any]) -> None:
    """Refuse to append to records made with other settings. A meta file without any record (a
    run that failed before its first sample) binds nothing and is replaced."""
    if not out_path.exists() or out_path.stat().st_size == 0:
        return
    if not meta_path.exists():
        raise EvalError(
            f"{out_path} exists without {meta_path.name}: its settings are unknown, so it is not "
            f"resumed. Delete it or pass overwrite=true"
        )
    old = json.loads(meta_path.read_text(encoding="utf-8"))
    if old.get("record_format") != meta["record_format"]:
        raise EvalError(
            f"{out_path} was written by an older eval_retriever (record format "
            f"{old.get('record_format', 1)}, now {meta['record_format']}: records were keyed on the "
            f"sample id, which RULER files repeat, and carry no token lengths), so it is not resumed. "
            f"The reader scripts still read it; to evaluate again pass overwrite=true or another "
            f"output_dir"
        )
    diffs = [
        f"{k}: {old.get(k)!r} (file) vs {meta.get(k)!r} (now)"
        for k in sorted(set(old) | set(meta))
        if old.get(k) != meta.get(k)
    ]
    if diffs:
        raise EvalError(
            f"{out_path} was produced with other settings; refusing to append:\n  "
            + "\n  ".join(diffs)
            + f"\nDelete {out_path.name} (and {meta_path.name}) or pass overwrite=true."
        )


# -- the run ----------------------------------------------------------------------------------
def checkpoint_path(cfg: DictConfig) -> Path:
    ckpt = Path(cfg.pretrained_path) / ("model_last.pt" if cfg.use_last else "model_best.pt")
    if not ckpt.is_file():
        raise EvalError(f"{ckpt} not found" + ("" if cfg.use_last else " (use_last=true takes model_last.pt)"))
    return ckpt


def load_qnet(cfg: DictConfig, ckpt: Path, device: torch.device) -> Any:
    qnet = qnet_from_cfg(cfg, device)
    state = load_checkpoint(ckpt, map_location=device)
    require_keys(state, ckpt, ("learner.agent",), "restore it from a copy")
    try:
        load_eval_weights(qnet, state["learner"]["agent"], ckpt)
    except (RuntimeError, ValueError) as e:  # weights of another model or another shape
        raise EvalError(
            f"{ckpt}: its weights do not fit the model its config.yaml describes ({_first(e)}); restore the "
            f"run folder's checkpoint and config.yaml from the same run"
        ) from None
    qnet.eval()
    return qnet


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
    _write_json(meta_path, meta)
    return ckpt, meta, records


def output_lock(out_path: Path) -> FolderLock:
    return FolderLock(
        out_path.with_name(f".{out_path.name}.lock"),
        f"evaluation output {out_path}",
        "wait for that evaluation to end, or write elsewhere (output_dir=...)",
    )


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
    qnet = load_qnet(cfg, ckpt, device)

    legacy = Legacy.from_cfg(cfg.legacy)  # the switches the evaluation's objects are built with
    split = str(cfg.envs.test_split)
    dataset = build_dataset(cfg.envs, split, seed, 0.0, legacy)
    cut = max(qnet.layout.action_content, qnet.layout.memory_content)
    dataset = maybe_cached(dataset, cfg, legacy, split, seed, qnet.tokenize, qnet.adopt_tokens, cut)
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
            qnet, dataset, todo, feedback, settings, int(cfg.eval.beam_width), int(cfg.eval.beam_expand)
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
        summary = _summarize(cfg, records, indices, out_path, summary_path, meta, n, t0, cache)
        return dist.broadcast_object(summary)
    return _summarize(cfg, records, indices, out_path, summary_path, meta, n, t0, cache)


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
        }
    )
    if cache is not None:
        summary["haystack_cache"] = dict(zip(("hits", "misses", "writes"), cache))
    _write_json(summary_path, summary)
    print(
        f"[eval] {stem}: n={summary['n']} fact_em={_fmt(summary['fact_em'])} fact_f1={_fmt(summary['fact_f1'])} "
        f"return={summary['return']:.3f}±{summary['return_std']:.3f} text_len={_fmt(summary['mean_text_len'], 0)} "
        f"s/episode={_fmt(summary['episode_s_mean'], 2)} -> {summary_path}",
        flush=True,
    )
    return summary


def _fmt(x: Any, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"
