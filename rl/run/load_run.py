"""Loading a trained run to read it: its checkpoint file, its Q-network with those weights, and which
model that is. Evaluation (rl/run/evaluate.py) and the retriever tool (rl/tool/) both load a run
here, so the tool never imports the evaluation driver."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from rl.run.build import qnet_from_cfg
from rl.run.checkpoints import load_eval_weights
from rl.run.eval_config import EvalError, first_line
from rl.run.run_folder import METRICS
from runstore import load_checkpoint, read_jsonl_rows, require_keys


def checkpoint_path(cfg: DictConfig) -> Path:
    ckpt = Path(cfg.pretrained_path) / ("model_last.pt" if cfg.use_last else "model_best.pt")
    if not ckpt.is_file():
        raise EvalError(f"{ckpt} not found" + ("" if cfg.use_last else " (use_last=true takes model_last.pt)"))
    return ckpt


def load_qnet(cfg: DictConfig, ckpt: Path, device: torch.device) -> Any:
    return qnet_and_provenance(cfg, ckpt, device)[0]


def checkpoint_provenance(state: dict[str, Any], ckpt: Path) -> dict[str, Any]:
    """Which model an evaluation scored: the checkpoint's optimiser step, the validation row the
    training loop wrote at that step (metrics.jsonl) and the commit of the code that trained it."""
    rows = state.get("metrics") or read_jsonl_rows(ckpt.parent / METRICS)  # model_last.pt holds its rows
    step = state.get("step", rows[-1]["step"] if rows else None)
    row = next((r for r in reversed(rows) if r.get("step") == step), {})
    return {
        "file": ckpt.name,
        "step": step,
        "validation": {k.removeprefix("eval/"): row.get(k) for k in ("eval/return", "eval/fact_em", "eval/fact_f1")},
        "code_version": state.get("code_version", "unknown"),
    }


def qnet_and_provenance(cfg: DictConfig, ckpt: Path, device: torch.device) -> tuple[Any, dict[str, Any]]:
    """The run's Q-network with the checkpoint's weights, in eval mode, and its provenance (the
    evaluation summary's ``checkpoint``)."""
    qnet = qnet_from_cfg(cfg, device)
    state = load_checkpoint(ckpt, map_location=device)
    require_keys(state, ckpt, ("learner.agent",), "restore it from a copy")
    try:
        load_eval_weights(qnet, state["learner"]["agent"], ckpt)
    except (RuntimeError, ValueError) as e:  # weights of another model or another shape
        raise EvalError(
            f"{ckpt}: its weights do not fit the model its config.yaml describes ({first_line(e)}); restore the "
            f"run folder's checkpoint and config.yaml from the same run"
        ) from None
    qnet.eval()
    return qnet, checkpoint_provenance(state, ckpt)
