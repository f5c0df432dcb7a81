"""What each checkpoint of a run folder holds (docs/TRAINING.md, "The run folder").

``model_last.pt`` holds what an exact resume needs and nothing that can be rebuilt: the online
and target encoders, AdamW's two moments per weight, the scheduler, counters, every RNG, the
environments mid-episode and the metric rows (rl/run/train.py ``Trainer.checkpoint``).
``model_best.pt`` holds only what evaluation reads: the online state and action encoders
(greedy and beam evaluation never run the target encoders, DESIGN §3.4), so it is a quarter of
``model_last.pt`` once the optimiser has moments. Saving and loading stay in runstore/__init__.py.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

from torch import nn

log = logging.getLogger(__name__)

# Agent state-dict prefixes of the target encoders: training state, never read by evaluation.
TARGET_PREFIXES = ("target_state.", "target_action.")


def eval_weights(qnet: nn.Module) -> dict[str, Any]:
    """The Q-network's weights without its target encoders."""
    return {k: v for k, v in qnet.state_dict().items() if not k.startswith(TARGET_PREFIXES)}


def load_eval_weights(qnet: nn.Module, weights: dict[str, Any], source: Path | str) -> None:
    """Load ``weights`` (from model_best.pt, or a full Q-network state of model_last.pt or an older
    model_best.pt) into ``qnet``. Without target encoders in the file, the targets become copies
    of the online encoders, so the Q-network is whole; anything else missing is an error."""
    missing, unexpected = qnet.load_state_dict(weights, strict=False)
    lacking = [k for k in missing if not k.startswith(TARGET_PREFIXES)]
    if lacking or unexpected:
        raise ValueError(
            f"{source}: the weights do not fit this model ("
            + ", ".join(
                f"{len(x)} {what}, e.g. {x[0]}" for x, what in ((lacking, "missing"), (unexpected, "unknown")) if x
            )
            + "): was it trained with another algo.model?"
        )
    if missing:
        for online, target in ((qnet.state_enc, qnet.target_state), (qnet.action_enc, qnet.target_action)):
            target.load_state_dict(online.state_dict())


SWEEP_MARK = ".sweep_job"  # in a job's folder: the identity of the sweep that ran it


def sweep_identity(sweep_dir: Path) -> str | None:
    """The sweep now running in ``sweep_dir``: Hydra writes its ``multirun.yaml`` when a sweep
    starts, so its content and time tell one sweep from an earlier one in the same folder (None:
    no sweep was started there)."""
    record = sweep_dir / "multirun.yaml"
    if not record.is_file() or record.is_symlink():
        return None
    digest = hashlib.sha256(record.read_bytes()).hexdigest()[:16]
    return f"{digest}-{record.stat().st_mtime_ns}"


def prune_sweep_checkpoints(sweep_dir: Path, keep: int, own: Path) -> list[Path]:
    """``keep_last_checkpoints``: among the finished jobs of this sweep (folders of ``sweep_dir``
    holding summary.json whose ``.sweep_job`` names this sweep, written by each job as it ends),
    all but the ``keep`` most recently finished lose model_last.pt, their resume state;
    model_best.pt, metrics.jsonl and summary.json stay. Another run in the same folder, a job of an
    earlier sweep and anything reached through a symlink are never touched; a job whose folder is
    locked (a training still running there) is left alone, and one that cannot be written is
    skipped with a warning. ``own`` is this job's folder, whose lock we hold. Returns the files removed."""
    from runstore import FolderInUseError, FolderLock, NotWritableError

    sweep = sweep_identity(sweep_dir)
    if sweep is None:
        log.warning("keep_last_checkpoints: %s holds no multirun.yaml of a sweep: nothing pruned", sweep_dir)
        return []
    (own / SWEEP_MARK).write_text(sweep, encoding="utf-8")
    finished = [d for d in sweep_dir.iterdir() if _finished_job_of(d, sweep)]
    finished.sort(key=lambda d: (d / "summary.json").stat().st_mtime_ns, reverse=True)
    removed: list[Path] = []
    for d in finished[keep:]:
        try:
            if d.resolve() == own.resolve():
                (d / "model_last.pt").unlink(missing_ok=True)
            else:
                with FolderLock(d / ".lock", f"run folder {d}", ""):
                    (d / "model_last.pt").unlink(missing_ok=True)
        except FolderInUseError:
            continue
        # another user's or a read-only folder (its lock refused as NotWritableError, a RuntimeError):
        # this finished job must not fail for it
        except (OSError, NotWritableError) as e:
            log.warning("keep_last_checkpoints: %s left as it is (%s)", d, e)
            continue
        removed.append(d / "model_last.pt")
    return removed


def _finished_job_of(d: Path, sweep: str) -> bool:
    paths = (d, d / "summary.json", d / "model_last.pt", d / SWEEP_MARK)
    if any(p.is_symlink() for p in paths) or not all(p.is_file() for p in paths[1:]):
        return False
    try:
        return (d / SWEEP_MARK).read_text(encoding="utf-8") == sweep
    except (OSError, UnicodeDecodeError):
        return False
