"""Every config value checked before anything is written (docs/TRAINING.md, "Failure and recovery").

``check_training`` / ``check_eval`` raise :class:`ConfigError` holding one line per bad value; the
entry points print each as an ``error:`` line. The Hydra callback of rl/run/callbacks.py runs the
same checks before Hydra creates the run folder, so a mistyped command leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rl.run.keys import EnvPositions, RunKeys, TrainingKeys

PLANNERS = ("greedy", "beam")
BEAM_SCORES = ("last", "sum", "mean", "first", "min")  # rl/eval/beam.py PATH_SCORES (a test keeps them equal)
POSITIONS = ("none", "absolute", "random", "relative")
# A value that becomes part of a file or folder name: no separators, no leading dot.
SAFE_NAME = re.compile(r"[A-Za-z0-9_+=,-][A-Za-z0-9_.+=,-]*")
KEY_ENV = "QRAG_API_KEY"  # the variable prompts_and_metrics/llm/server_backend.py reads first
# A key whose name says it holds a credential, at any depth (api_key, hf_token, password, ...);
# tokenizer settings (max_tokens, num_tokens, length_tokenizer) do not match.
SECRET_KEY = re.compile(
    r"(^|[_.-])(api[_-]?key|apikey|secret|password|passwd|credentials?|token|auth|authorization|bearer)"
    r"([_.-]|$)|(access|private|secret|session|auth)[_-]?key$",
    re.IGNORECASE,
)
# Values shaped like well-known credentials, whatever key holds them.
SECRET_VALUE = re.compile(r"\b(sk-[A-Za-z0-9_-]{16,}|hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16})")
SPECIAL_TOKEN = re.compile(r"(bos|eos|pad|unk|sep|cls|mask)_token$", re.IGNORECASE)  # tokenizer settings
ENV_READ = re.compile(r"\$\{\s*oc\.env\s*:\s*([^,}]*)")


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
        self.failed: set[str] = set()  # keys already reported

    def copied_from(self, key: str) -> str | None:
        """The key whose value ``key`` takes (``total: ${steps_count}``), else None."""
        parent_key, _, leaf = key.rpartition(".")
        parent = OmegaConf.select(self.cfg, parent_key, default=None) if parent_key else self.cfg
        node = parent._get_node(leaf) if OmegaConf.is_dict(parent) else None
        raw = node._value() if node is not None else None
        m = re.fullmatch(r"\$\{([\w.]+)\}", raw) if isinstance(raw, str) else None
        return m.group(1) if m else None

    def value(self, key: str) -> tuple[bool, Any]:
        node = OmegaConf.select(self.cfg, key, default="<absent>", throw_on_missing=False)
        if isinstance(node, str) and node == "<absent>":
            return False, None
        if OmegaConf.is_config(node):
            node = OmegaConf.to_container(node, resolve=True)
        return True, node

    def add(self, key: str, got: Any, want: str) -> None:
        self.failed.add(key)
        self.errors.append(f"{key}={got!r}: expected {want}")

    def check(self, key: str, ok: Callable[[Any], bool], want: str, nullable: bool = False) -> None:
        present, v = self.value(key)
        if not present or (v is None and nullable) or self.copied_from(key) in self.failed:
            return  # (a copy of a value already reported is not the user's second mistake)
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
            in_range = (v > low if low_open else v >= low) and (high is None or v <= high)
            return _is_num(v) and math.isfinite(v) and in_range

        rng = "" if low == float("-inf") else f" {'>' if low_open else '>='} {low:g}"
        rng += f" and <= {high:g}" if high is not None else ""
        _, v = self.value(key)
        finite = "a finite number" if _is_num(v) and not math.isfinite(v) else "a number"
        self.check(key, ok, f"{finite}{rng}" + (" or null" if nullable else ""), nullable)

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


def _leaves(node: Any, prefix: str = "") -> list[tuple[str, str, Any]]:
    """(dotted key, last key name, value) of every leaf of a plain config tree, ``hydra`` left out."""
    out: list[tuple[str, str, Any]] = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for k, v in items:
        key = f"{prefix}.{k}" if prefix and isinstance(node, dict) else f"{prefix}[{k}]" if prefix else str(k)
        if not prefix and k == "hydra":
            continue
        if isinstance(v, (dict, list)):
            out += _leaves(v, key)
        else:
            out.append((key, str(k), v))
    return out


def _check_secrets(c: Checker) -> None:
    """No credential anywhere in the tree: it would be saved in config.yaml, .hydra/, the
    checkpoint and the logs."""
    for key, name, v in _leaves(OmegaConf.to_container(c.cfg, resolve=False)):
        if isinstance(v, str) and (m := ENV_READ.search(v)) and SECRET_KEY.search(m.group(1).strip()):
            c.errors.append(
                f"{key}: reads the environment variable {m.group(1).strip()}, a credential, into the config (it "
                f"would be saved in config.yaml, the logs and the checkpoint); remove it"
            )
        elif v not in (None, "") and not _is_num(v) and SECRET_KEY.search(name) and not SPECIAL_TOKEN.search(name):
            api = re.search(r"api[_-]?key", name, re.IGNORECASE)
            c.errors.append(
                f"{key}: {'keys' if api else 'credentials'} are not taken from the config (it is saved in config.yaml, "
                f"the logs and the checkpoint); remove it and "
                + (f"export {KEY_ENV}=<key> instead" if api else "pass it through an environment variable instead")
            )
        elif isinstance(v, str) and SECRET_VALUE.search(v):
            c.errors.append(f"{key}: holds what looks like a credential (it would be saved to files); remove it")


def _check_finite(c: Checker) -> None:
    """No NaN or infinity under any key (the keys checked with a range already said so)."""
    reported = {re.split(r"[=:]", line)[0] for line in c.errors}
    for key, _, v in _leaves(OmegaConf.to_container(c.cfg, resolve=False)):
        if _is_num(v) and not math.isfinite(v) and key not in reported:
            c.errors.append(f"{key}={v!r}: expected a finite number")


def _check_common(c: Checker) -> None:
    """Keys shared by training and evaluation (the evaluation config holds the run's)."""
    RunKeys.check(c, "")
    c.integer("envs.max_steps", 1)
    c.choice("envs.positions_processor", POSITIONS)
    EnvPositions.check(c, "envs")
    c.boolean("envs.sort_by_index")
    c.name("envs.task")
    c.name("envs.test_split")
    c.name("envs.context_length")
    c.check("envs.length", lambda v: _is_int(v) and (v >= 1 or v == -1), "an integer >= 1, or -1 for all")
    c.integer("envs.subsample_size", 1)
    c.integer("envs.prompt_reserve_tokens", 0)
    c.integer("envs.min_noise_sentence_tokens", 0)
    c.integer("envs.tokens_per_fact", 1)
    _check_dataset(c)
    from envs.legacy import Legacy

    _, legacy = c.value("legacy")
    c.errors.extend(Legacy.errors(legacy))
    from rl.model.fast.switches import REMOVED, SpeedSwitches

    known = {f.name for f in dataclasses.fields(SpeedSwitches)} | set(REMOVED)
    _, speed = c.value("speed")
    for k in speed or {}:
        if k in known:
            c.check(f"speed.{k}", lambda v: isinstance(v, bool), "true or false", nullable=True)
        else:
            c.errors.append(f"speed.{k}: no such speed switch; known: {', '.join(sorted(known - set(REMOVED)))}")
    _check_secrets(c)


def check_training(cfg: DictConfig) -> None:
    """Raise ConfigError naming every bad value of a training config."""
    c = Checker(cfg)
    _check_common(c)
    TrainingKeys.check(c, "")
    # imported here so that importing this module (the Hydra callback) stays light
    from rl.learners import LEARNERS
    from rl.learners.base import Shared
    from rl.run.config import RENAMED_KEYS

    for old, new in RENAMED_KEYS.items():  # a config file's node (command lines are rewritten, rl/run/config.py)
        if c.value(old)[0]:
            c.errors.append(f"{old}: renamed to {new}; write {new} in your config file")
    c.choice("algo.objective", tuple(LEARNERS))
    Shared.check(c, "algo")  # model, optimizer, scheduler, max_grad_norm: each key's check is in its dataclass
    learner = LEARNERS.get(str(c.value("algo.objective")[1]))
    if learner is not None:
        hp = f"algo.{learner.NAME}.hyperparams"
        if c.value(hp)[0]:
            learner.HYPER.check(c, hp)
        else:  # algo.objective=<name> alone: the learner's settings were never composed
            c.errors.append(
                f"algo.objective={learner.NAME!r} without {hp}: choose the learner with learner={learner.NAME}, "
                f"not algo.objective alone"
            )
    c.integer("logger.log_interval", 1)
    _check_finite(c)
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
    c.choice("eval.beam_score", BEAM_SCORES)
    c.number("eval.stop_q_threshold", float("-inf"), nullable=True)
    c.integer("eval.group_size", 1, nullable=True)
    c.name("eval_env")
    _check_finite(c)
    if c.errors:
        raise ConfigError(c.errors)


def check_group_choices(argv: list[str], config_dir: Path) -> None:
    """``group=option`` on the command line must name configs/<group>/<option>.yaml or an option
    held by Hydra's ConfigStore (``learner=``, rl/run/config.py); Hydra would otherwise skip an
    unknown optional preset and run the defaults."""
    errors = []
    for arg in argv:
        key, eq, value = arg.lstrip("+~").partition("=")
        folder = config_dir / key
        if not eq or "." in key or "/" in key or "(" in value:
            continue  # not a group choice, or a sweep expression (choice(...), range(...)) left to Hydra
        files = {p.stem for p in folder.glob("*.yaml")}
        stored = _stored_options(key)
        if not (folder.is_dir() or stored):
            continue
        options = files | stored
        for option in value.split(","):  # a multirun sweep lists several
            if option in ("null", "") or option in options:
                continue
            where = f"no configs/{key}/{option}.yaml" if files else f"no {key} named {option!r}"
            errors.append(f"{key}={option}: {where}; known: {', '.join(sorted(options))}")
    if errors:
        raise ConfigError(errors)


def is_group(key: str, config_dir: Path) -> bool:
    return (config_dir / key).is_dir() or bool(_stored_options(key))


def config_keys(cfg: Any, prefix: str = "") -> dict[str, bool]:
    """Every key of a composed config, dotted, mapped to whether new keys may go below it (a node
    that is empty or null: its keys are the user's to choose)."""
    out: dict[str, bool] = {}
    node = cfg if OmegaConf.is_config(cfg) else None
    if node is None or not OmegaConf.is_dict(node):
        return out
    for k in node.keys():
        key = f"{prefix}{k}"
        child = node._get_node(k)
        value = child._value() if child is not None else None
        is_dict = OmegaConf.is_dict(child) and not child._is_none()
        out[key] = value is None or (is_dict and len(child) == 0)
        if is_dict:
            out.update(config_keys(child, key + "."))
    return out


def _known_below(key: str, known: dict[str, bool]) -> bool:
    if key in known:
        return True
    parts = key.split(".")
    return any(known.get(".".join(parts[:n])) for n in range(len(parts) - 1, 0, -1))


def check_override_keys(argv: list[str], config_dir: Path, config_name: str) -> None:
    """``key=value`` and ``+key=value`` on the command line must name a key the config knows:
    Hydra answers a typo with a hint to add it with ``+``, and then takes the added key without a
    word (the run goes ahead at the default). The nearest known key is suggested. An added key of
    an evaluation may also be one of a training config (the run's config.yaml is merged under it).
    Hydra's own keys, ``~`` deletions and group choices are left to Hydra and check_group_choices;
    legacy and speed switches and credentials to the checks that name them."""
    import difflib

    from rl.run.config import compose_config

    keyed = []
    groups = []
    for arg in argv:
        if arg.startswith(("-", "~")) or "=" not in arg:
            continue
        raw_key, _, value = arg.partition("=")
        key = raw_key.lstrip("+")
        if key.split(".")[0] in ("hydra", "legacy", "speed") or SECRET_KEY.search(key) or SECRET_VALUE.search(value):
            continue  # Hydra's own; or refused with a more telling line by check_training / check_eval
        if is_group(key, config_dir) or "/" in key or "@" in key:
            groups.append(f"{raw_key}={value.split(',')[0]}")  # a swept choice: its first option
            continue
        keyed.append((key, raw_key.startswith("+")))
    if not keyed:
        return
    try:
        known = config_keys(compose_config(config_name, groups))
    except Exception:  # noqa: BLE001 (a choice Hydra will report in its own words)
        return
    unknown = [(k, added) for k, added in keyed if not _known_below(k, known)]
    if unknown and config_name != "training" and any(added for _, added in unknown):
        for preset in [None, *sorted(p.stem for p in (config_dir / "envs").glob("*.yaml"))]:
            try:
                known.update(config_keys(compose_config("training", [] if preset is None else [f"envs={preset}"])))
            except Exception:  # noqa: BLE001, S112 (a preset that needs other choices adds no keys)
                continue
        unknown = [(k, added) for k, added in unknown if not (added and _known_below(k, known))]
    errors = []
    for key, _ in unknown:
        near = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
        errors.append(f"{key}: no such key" + (f"; did you mean {near[0]}?" if near else ""))
    if errors:
        raise ConfigError(errors)


def _stored_options(group: str) -> set[str]:
    """The options ConfigStore holds for ``group`` (none when it holds no such group)."""
    from hydra.core.config_store import ConfigStore

    try:
        return {name.removesuffix(".yaml") for name in ConfigStore.instance().list(group)}
    except OSError:
        return set()


def report_and_exit(err: ConfigError) -> None:
    for line in err.lines:
        print(f"error: {line}", file=sys.stderr)
    raise SystemExit(2)


def run_main(main: Callable[[], Any]) -> None:
    """Run an entry point's ``@hydra.main`` function. Hydra reports its own errors (an override it
    cannot parse, a config that does not compose) in its words and exits 1; before a job has started
    such an error is the command line's, so it exits 2 as the project's own errors do (issue 36).
    A job that crashed keeps status 1."""
    from hydra.core.hydra_config import HydraConfig

    try:
        main()
    except SystemExit as exc:
        if exc.code == 1 and not HydraConfig.initialized():
            raise SystemExit(2) from None
        raise
