"""The evaluation's output files (DESIGN §9.1): ``<stem>.jsonl`` records (one line per sample,
keyed on its ``index``), ``<stem>.jsonl.meta.json`` (the settings they were made with: a file of
other settings is refused), the part files of a sharded run and their merge. The driver is
rl/run/evaluate.py.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from envs.data.common import content_sha256
from envs.data.registry import dataset_spec
from envs.legacy import Legacy
from rl.run.eval_config import EvalError, read_run_config
from runstore import (
    FolderLock,
    atomic_write_text,
)

log = logging.getLogger("qrag.eval")

FULL_HASH_LIMIT = 256 * 2**20
PARTIAL_HASH_BYTES = 32 * 2**20
# 2: records keyed on the sample position only; records carry num_tokens where the loader counts
# them; BabiLong/NIAH/RULER-QA ids unique (RULER's index field no longer the id)
RECORD_FORMAT = 2


# -- output files -----------------------------------------------------------------------------
def eval_stem(cfg: DictConfig) -> str:
    """eval_seed{seed}, then what sets the test samples (the dataset's part: ``_ns{N}`` BabiLong,
    ``_{split}`` NIAH and RULER QA, ...; envs/data/ loaders), then suffixes for settings that
    change results, so that a sweep over any of them writes one file per value: the dataset where
    it is not the run's and names no part of its own (``eval_env=musique`` on a HotpotQA run), T
    where it is not the run's, the checkpoint, planner (and a beam score other than ``last``), stop
    threshold and oracle stop. A run's own default evaluation keeps the name it always had (its
    files still resume)."""
    run = read_run_config(Path(cfg.pretrained_path) / "config.yaml")["envs"]
    part = dataset_spec(str(cfg.envs.name)).eval_suffix(cfg.envs)
    stem = f"eval_seed{int(cfg.seed)}" + part
    if not part and str(cfg.envs.name) != str(run.get("name")):
        stem += f"_{cfg.envs.name}"
    if str(int(cfg.envs.max_steps)) != str(run.get("max_steps")):
        stem += f"_T{int(cfg.envs.max_steps)}"
    if cfg.use_last:
        stem += "_last"
    if str(cfg.eval.planner) == "beam":
        stem += f"_beam{int(cfg.eval.beam_width)}x{int(cfg.eval.beam_expand)}"
        if str(cfg.eval.beam_score) != "last":  # the default keeps the name its files always had
            stem += f"_{cfg.eval.beam_score}"
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


def write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


# Settings whose change makes an earlier file stale rather than another valid evaluation: a retrained
# checkpoint, a changed model or data file.
REPLACED_BY = {"checkpoint_hash", "model", "data_sha256"}


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
        changed = {k for k in set(old) | set(meta) if old.get(k) != meta.get(k)}
        if changed <= REPLACED_BY:  # the same evaluation of an older model or data: evaluate again
            advice = f"Delete {out_path.name} (and {meta_path.name}) or pass overwrite=true to evaluate again."
        else:  # a valid evaluation of other settings, which overwrite=true would delete
            advice = (
                f"It holds a valid evaluation made with those settings: write this one elsewhere "
                f"(output_dir=<another folder>), or delete {out_path.name} (and {meta_path.name}) to replace it."
            )
        raise EvalError(
            f"{out_path} was produced with other settings; refusing to append:\n  " + "\n  ".join(diffs) + "\n" + advice
        )


def output_lock(out_path: Path) -> FolderLock:
    return FolderLock(
        out_path.with_name(f".{out_path.name}.lock"),
        f"evaluation output {out_path}",
        "wait for that evaluation to end, or write elsewhere (output_dir=...)",
    )
