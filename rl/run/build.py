"""From a run config to the objects a run is made of: the Q-network, the training environments, the
learner and the evaluation settings. Training (rl/run/train.py), evaluation (rl/run/evaluate.py) and
the benchmark (scripts/bench.py) build them here, so evaluation never imports the trainer."""

from __future__ import annotations

import copy
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from envs.env import PositionSettings, VecRetrievalEnv
from envs.feedback import Feedback
from rl.eval.greedy import EvalSettings
from rl.learners import build_learner
from rl.model.fast.switches import SpeedSwitches
from rl.model.model_keys import ModelKeys
from rl.model.precision import Precision
from rl.model.qnetwork import QNetwork

__all__ = ["qnet_from_cfg", "build_learner", "eval_settings", "late_config", "skip_length_counts", "train_env"]


def qnet_from_cfg(cfg: DictConfig, device: torch.device) -> QNetwork:
    layout = {
        "max_action_length": int(cfg.max_action_length),
        "max_action_length_in_memory": int(cfg.max_action_length_in_memory),
        "eval_max_action_length_in_memory": cfg.eval_max_action_length_in_memory,
        "max_state_length": cfg.max_state_length,
    }
    return QNetwork(
        ModelKeys.from_cfg(cfg.algo.model),
        layout,
        device,
        Precision.resolve(str(cfg.precision), device),
        int(cfg.embed_batch_size),
        SpeedSwitches.from_run_cfg(cfg),
        PositionSettings.from_cfg(cfg.envs),
        bool(cfg.envs.sort_by_index),
    )


def skip_length_counts(dataset: Any) -> None:
    """Training reads no sample's ``num_tokens``: a dataset that counts it on the side (BabiLong's
    sentence mode, ``record_num_tokens``) skips the length tokenizer (docs/BENCH.md, W1)."""
    base = getattr(dataset, "base", dataset)  # a registry Subset (train/validation split)
    if hasattr(base, "record_num_tokens"):
        base.record_num_tokens = False


def late_config(cfg: DictConfig) -> DictConfig | None:
    """The run's config with ``envs.num_sentences`` set to ``late_haystacks.num_sentences`` (None while
    ``late_haystacks.from_step`` is null): what the late training haystacks and the in-training
    evaluations are built from (rl/run/keys.py ``LateHaystacks``). Only the haystack size differs, so a
    question keeps its index and its draws."""
    late = cfg.get("late_haystacks")
    if late is None or late.get("from_step") is None:
        return None
    out = copy.deepcopy(cfg)
    with open_dict(out):
        out.envs.num_sentences = OmegaConf.to_container(late, resolve=True)["num_sentences"]
    return out


def train_env(
    cfg: DictConfig, dataset: Any, feedback: Feedback, device: torch.device, seed: int, late_dataset: Any = None
) -> VecRetrievalEnv:
    """``envs_parallel`` persistent training environments over ``dataset`` with ``feedback`` (its
    training phase, :func:`envs.feedback.build_feedback`), seeded with ``seed``, and ``late_dataset``
    to draw from once the trainer says so (``late_haystacks``); the datasets stop counting
    ``num_tokens``."""
    skip_length_counts(dataset)
    if late_dataset is not None:
        skip_length_counts(late_dataset)
    return VecRetrievalEnv(
        dataset,
        feedback,
        int(cfg.envs_parallel),
        int(cfg.envs.max_steps),
        PositionSettings.from_cfg(cfg.envs),
        bool(cfg.envs.sort_by_index),
        device,
        seed,
        "train",
        late_dataset,
    )


def eval_settings(cfg: DictConfig) -> EvalSettings:
    stop = (cfg.get("eval") or {}).get("stop_q_threshold")
    return EvalSettings(
        max_steps=int(cfg.envs.max_steps),
        stop_q_threshold=None if stop is None else float(stop),
        group_size=int(cfg.eval_group_size),
    )
