"""The Hydra callback every entry point registers: check the composed config, and the folder
Hydra is about to write, before anything is written (configs/training.yaml, configs/testing.yaml)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

import runstore
from rl.run.eval_config import EvalError, merge_eval_config
from rl.run.run_folder import run_folder_lock
from rl.run.validate import ConfigError, check_eval, check_training, report_and_exit


def check_output_folder(config: DictConfig, kind: str) -> None:
    """Before Hydra writes ``.hydra/`` into its run folder: the folder (or the first existing one
    above it) must be writable, and no other training may be running in it (Hydra would already
    have rewritten that run's .hydra/config.yaml and overrides.yaml with the refused values)."""
    if int(os.environ.get("RANK", "0") or 0) > 0:  # ranks > 0 of torchrun write nothing (rl/distributed.py)
        return
    try:
        folder = Path(str(OmegaConf.select(config, "hydra.run.dir")))
    except Exception:  # no hydra node (a config composed outside Hydra)
        return
    if kind == "training":
        lock = run_folder_lock(folder)
        holder = lock.holder()
        if holder is not None:
            raise ConfigError([f"{lock.what} is in use by another process ({holder}); {lock.advice}"])
    problem = runstore.probe_writable(folder)
    if problem is not None:
        where = "pass output_dir=<a writable folder>" if kind == "eval" else "choose another folder (hydra.run.dir=...)"
        raise ConfigError(
            [f"cannot write in {folder} ({os.strerror(problem.errno or 0).lower()}); make it writable, or {where}"]
        )


class ValidateConfig(Callback):
    """Hydra callback: check the composed config before Hydra creates the output folder.

    ``kind``: training | eval. A failed check exits with status 2 (SystemExit passes through
    Hydra's callback guard, which only catches Exception)."""

    def __init__(self, kind: str = "training"):
        self.kind = kind

    def _check(self, config: DictConfig, folder: bool = False) -> None:
        try:
            if self.kind == "eval":
                try:
                    merged = merge_eval_config(config)
                except EvalError as e:
                    raise ConfigError([str(e)]) from None
                check_eval(merged)
            else:
                check_training(config)
            if folder:
                check_output_folder(config, self.kind)
        except ConfigError as e:
            report_and_exit(e)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(config, folder=True)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        # the swept values are checked per job (in run()); this catches mistakes in the fixed ones
        if self.kind == "training":
            self._check(config)
