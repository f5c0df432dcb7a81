"""Every config value checked before anything is written (README.md, "Failure and recovery").

``check_training`` / ``check_eval`` raise :class:`ConfigError` holding one line per bad value; the
entry points print each as an ``error:`` line. :class:`ValidateConfig` is a Hydra callback
(``hydra.callbacks`` in configs/training.yaml and configs/testing.yaml) that runs the same checks
before Hydra creates the run folder, so a mistyped command leaves nothing behind.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from rl.precision import PRECISIONS

EVAL_SPLITS = ("validation", "test")
PLANNERS = ("greedy", "beam")
POSITIONS = ("none", "absolute", "random", "relative")
# A value that becomes part of a file or folder name: no separators, no leading dot.
SAFE_NAME = re.compile(r"[A-Za-z0-9_+=,-][A-Za-z0-9_.+=,-]*")
KEY_ENV = "QRAG_API_KEY"  # the variable prompts_and_metrics/llm/server_backend.py reads first


class ConfigError(ValueError):
    """One or more bad config values; ``lines`` holds one message per value."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class Checker:
    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self.errors: list[str] = []

    def value(self, key: str) -> tuple[bool, Any]:
        node = OmegaConf.select(self.cfg, key, default="<absent>", throw_on_missing=False)
        if isinstance(node, str) and node == "<absent>":
            return False, None
        if OmegaConf.is_config(node):
            node = OmegaConf.to_container(node, resolve=True)
        return True, node

    def add(self, key: str, got: Any, want: str) -> None:
        self.errors.append(f"{key}={got!r}: expected {want}")

    def check(self, key: str, ok: Callable[[Any], bool], want: str, nullable: bool = False) -> None:
        present, v = self.value(key)
        if not present or (v is None and nullable):
            return
        try:
            good = ok(v)
        except (TypeError, ValueError):
            good = False
        if not good:
            self.add(key, v, want)

    def integer(self, key: str, low: int, nullable: bool = False, high: int | None = None) -> None:
        want = f"an integer >= {low}" + (f" and <= {high}" if high is not None else "")
        self.check(
            key,
            lambda v: _is_int(v) and v >= low and (high is None or v <= high),
            want + (" or null" if nullable else ""),
            nullable,
        )

    def number(
        self, key: str, low: float, high: float | None = None, low_open: bool = False, nullable: bool = False
    ) -> None:
        def ok(v: Any) -> bool:
            return _is_num(v) and (v > low if low_open else v >= low) and (high is None or v <= high)

        rng = f"{'>' if low_open else '>='} {low:g}" + (f" and <= {high:g}" if high is not None else "")
        self.check(key, ok, f"a number {rng}" + (" or null" if nullable else ""), nullable)

    def choice(self, key: str, options: tuple[str, ...]) -> None:
        self.check(key, lambda v: v in options, f"one of {', '.join(options)}")

    def boolean(self, key: str) -> None:
        self.check(key, lambda v: isinstance(v, bool), "true or false")

    def name(self, key: str) -> None:
        """A value that ends up in a file name (output paths stay inside their folders)."""
        self.check(
            key,
            lambda v: _is_int(v) or (isinstance(v, str) and SAFE_NAME.fullmatch(v) is not None),
            "a plain name (letters, digits, _ . + = , -; no / and no leading dot)",
            nullable=True,
        )


def _device_ok(v: Any) -> bool:
    import torch

    if v in ("auto", "cpu"):
        return True
    m = re.fullmatch(r"cuda(?::(\d+))?", str(v))
    return m is not None and torch.cuda.is_available() and int(m.group(1) or 0) < torch.cuda.device_count()


def _device_want() -> str:
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return "auto or cpu" + (f" or cuda:N with N < {n}" if n else " (no CUDA device here)")


def _check_dataset(c: Checker) -> None:
    """``envs.name`` names a registered dataset, whose own settings are checked by its spec."""
    from envs.data.registry import dataset_spec

    present, name = c.value("envs.name")
    if not present:
        return
    try:
        spec = dataset_spec(str(name))
    except KeyError as e:
        c.errors.append(str(e.args[0]))
        return
    c.errors.extend(spec.config_errors(c.cfg.envs))


def _check_common(c: Checker) -> None:
    """Keys shared by training and evaluation (the evaluation config holds the run's)."""
    c.integer("seed", 0)
    c.check("device", _device_ok, _device_want())
    c.choice("precision", PRECISIONS)
    c.integer("max_action_length", 1)
    c.integer("max_action_length_in_memory", 1)
    c.integer("eval_max_action_length_in_memory", 1, nullable=True)
    c.integer("max_state_length", 1, nullable=True)
    c.integer("embed_batch_size", 1)
    c.integer("eval_group_size", 1)
    c.integer("envs.max_steps", 1)
    c.choice("envs.positions_processor", POSITIONS)
    c.integer("envs.step_size", 1)
    c.boolean("envs.sort_by_index")
    c.name("envs.task")
    c.name("envs.test_split")
    c.name("envs.context_length")
    _check_dataset(c)
    _, speed = c.value("speed")
    for k in speed or {}:
        c.check(f"speed.{k}", lambda v: isinstance(v, bool), "true or false", nullable=True)
    present, key = c.value("feedback.api_key")
    if present and key:
        c.errors.append(
            f"feedback.api_key: keys are not taken from the config (it is saved in config.yaml, the "
            f"logs and the checkpoint); remove it and export {KEY_ENV}=<key> instead"
        )


def check_training(cfg: DictConfig) -> None:
    """Raise ConfigError naming every bad value of a training config."""
    c = Checker(cfg)
    _check_common(c)
    c.integer("learning_start", 0)
    c.integer("steps_count", 0)
    c.integer("batch_size", 1)
    c.integer("accumulate_grads", 1)
    c.integer("eval_interval", 1)
    c.integer("eval_episodes", 1)
    c.integer("envs_parallel", 1)
    c.integer("final_eval_episodes", -1)
    c.integer("jobs_per_gpu", 1)
    c.integer("keep_last_checkpoints", 0, nullable=True)
    c.boolean("resume")
    c.choice("eval_split", EVAL_SPLITS)
    c.check("validation_fraction", lambda v: _is_num(v) and 0 <= v < 1, "a number >= 0 and < 1")
    # imported here so that importing this module (the Hydra callback) stays light
    from rl.agents import LEARNERS
    from rl.encoders import POOLINGS
    from rl.schedules import SCHEDULERS

    c.choice("algo.model.pooling", POOLINGS)
    c.number("algo.model.pool_scale", 0.0, low_open=True)
    c.integer("algo.model.predictor.num_layers", 1, nullable=True)
    c.number("algo.model.predictor.interpolate_factor", 0.0, low_open=True)
    for k in ("use_fast_tokenizer", "trust_remote_code", "normalize", "random_init"):
        c.boolean(f"algo.model.{k}")
    c.choice("algo.objective", tuple(LEARNERS))
    c.number("algo.optimizer.lr", 0.0, low_open=True)
    c.number("algo.optimizer.weight_decay", 0.0)
    c.number("algo.optimizer.eps", 0.0, low_open=True)
    c.check(
        "algo.optimizer.betas",
        lambda v: len(v) == 2 and all(_is_num(b) and 0 <= b < 1 for b in v),
        "two numbers in [0, 1)",
    )
    c.choice("algo.scheduler.name", SCHEDULERS)
    c.integer("algo.scheduler.warmup", 0)
    c.integer("algo.scheduler.total", 0)
    # lr falls to ratio·lr₀; a ratio above 1 makes the warm-up's lr negative (rl/schedules.py)
    c.number("algo.scheduler.ratio", 0.0, 1.0)
    c.boolean("algo.scheduler.smooth_warmup")
    c.number("algo.max_grad_norm", 0.0, low_open=True)
    learner = LEARNERS.get(str(c.value("algo.objective")[1]))
    if learner is not None:
        hp = f"algo.{learner.NAME}.hyperparams"
        if c.value(hp)[0]:
            learner.check_config(c, hp)
        else:  # algo.objective=<name> alone: the learner's settings were never composed
            c.errors.append(
                f"algo.objective={learner.NAME!r} without {hp}: choose the learner with learner={learner.NAME} "
                f"(configs/learner/{learner.NAME}.yaml), not algo.objective alone"
            )
    c.integer("logger.log_interval", 1)
    if c.errors:
        raise ConfigError(c.errors)


def check_eval(cfg: DictConfig) -> None:
    """Raise ConfigError naming every bad value of a merged evaluation config."""
    c = Checker(cfg)
    _check_common(c)
    c.check("num_samples", lambda v: _is_int(v) and (v >= 1 or v == -1), "an integer >= 1, or -1 for all")
    c.boolean("use_last")
    c.boolean("trust_remote_code")
    c.boolean("overwrite")
    c.choice("eval.planner", PLANNERS)
    c.integer("eval.beam_width", 1)
    c.integer("eval.beam_expand", 1)
    c.number("eval.stop_q_threshold", float("-inf"), nullable=True)
    c.integer("eval.group_size", 1, nullable=True)
    c.name("eval_env")
    if c.errors:
        raise ConfigError(c.errors)


def check_group_choices(argv: list[str], config_dir: Path) -> None:
    """``group=option`` on the command line must name configs/<group>/<option>.yaml (Hydra would
    otherwise skip an unknown optional preset and run the defaults)."""
    errors = []
    for arg in argv:
        key, eq, value = arg.lstrip("+~").partition("=")
        folder = config_dir / key
        if not eq or "." in key or "/" in key or "(" in value or not folder.is_dir():
            continue  # not a group choice, or a sweep expression (choice(...), range(...)) left to Hydra
        for option in value.split(","):  # a multirun sweep lists several
            if option in ("null", "") or (folder / f"{option}.yaml").is_file():
                continue
            known = sorted(p.stem for p in folder.glob("*.yaml"))
            errors.append(f"{key}={option}: no configs/{key}/{option}.yaml; known: {', '.join(known)}")
    if errors:
        raise ConfigError(errors)


def report_and_exit(err: ConfigError) -> None:
    for line in err.lines:
        print(f"error: {line}", file=sys.stderr)
    raise SystemExit(2)


class ValidateConfig(Callback):
    """Hydra callback: check the composed config before Hydra creates the output folder.

    ``kind``: training | eval. A failed check exits with status 2 (SystemExit passes through
    Hydra's callback guard, which only catches Exception)."""

    def __init__(self, kind: str = "training"):
        self.kind = kind

    def _check(self, config: DictConfig) -> None:
        try:
            if self.kind == "eval":
                from rl.eval_run import EvalError, merge_eval_config

                try:
                    merged = merge_eval_config(config)
                except EvalError as e:
                    raise ConfigError([str(e)]) from None
                check_eval(merged)
            else:
                check_training(config)
        except ConfigError as e:
            report_and_exit(e)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(config)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        # the swept values are checked per job (in run()); this catches mistakes in the fixed ones
        if self.kind == "training":
            self._check(config)
