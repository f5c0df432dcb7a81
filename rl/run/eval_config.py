"""The evaluation's config (DESIGN §8.6 merge rule; docs/EVALUATION.md): eval_retriever.py's
command line and configs/testing.yaml merged over what a run folder's config.yaml may say about
its model and environment (an allow-list: never its output folder, feedback server or secrets),
keys it lacks filled with today's defaults. The driver is rl/run/evaluate.py.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from envs.data.registry import ACTING_KEYS, dataset_spec
from envs.legacy import Legacy
from rl.model.model_keys import ModelKeys
from rl.run.config import PROJECT_ROOT, upgrade_run_config, without_hydra
from rl.run.data_roots import stray_data_paths
from rl.run.keys import EnvPositions, RunKeys

log = logging.getLogger("qrag.eval")


class EvalError(RuntimeError):
    """A problem the user has to fix (missing run, stale eval file, bad setting)."""


# -- merging --------------------------------------------------------------------------
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
    """configs/envs/<name>.yaml over the keys every env shares (rl/run/keys.py ``EnvPositions``, as
    training composes them), unresolved. (``eval_env`` is a plain key, not a Hydra group, so that it
    can name any env config without duplicating it.)"""
    path = PROJECT_ROOT / "configs" / "envs" / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (PROJECT_ROOT / "configs" / "envs").glob("*.yaml"))
        raise EvalError(f"eval_env={name}: no configs/envs/{name}.yaml; known: {known}")
    return EnvPositions.defaults() | OmegaConf.to_container(OmegaConf.load(path), resolve=False)  # type: ignore[operator]


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


def training_only_off(envs: dict[str, Any], asked: dict[str, Any], source: Path) -> None:
    """Set the run's training-only ``envs`` keys (``DatasetSpec.training_only``: BabiLong's
    ``long_stories``) off: they sized its training haystacks, and the test haystacks are the
    evaluation's own (as ``late_haystacks``, a top-level key evaluation never takes). The command
    line may not set them: an evaluation file's name and meta would not show it."""
    for key, off in dataset_spec(str(envs["name"])).training_only.items():
        if asked.get(key) not in (None, off):
            raise EvalError(
                f"envs.{key}: sizes training haystacks only; an evaluation's test haystacks are set by its own "
                f"envs.num_sentences / envs.num_tokens (leave it out; {source} keeps the run's value)"
            )
        if key in envs:
            envs[key] = copy.deepcopy(off)


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


def vetted(saved: dict[str, Any], source: Path, keys: Collection[str], machine: str = "evaluating") -> dict[str, Any]:
    """The part ``keys`` of a saved run config, its interpolations checked. A value that is
    exactly a reference to another saved key holding a plain value (``total: ${steps_count}``)
    gets that value; any other interpolation reaching outside the part, a relative one
    (``${..x}``: where it lands depends on the node), or one calling a resolver that could read
    this machine (``${oc.env:...}``) is refused with one line naming the key, nothing resolved."""

    def refuse(key: str, node: str, what: str) -> EvalError:
        return EvalError(
            f"{source}: {key} = {node!r} reads {what}, which a run folder's config may not (it would be "
            f"resolved on the {machine} machine); replace it with the plain value the run used"
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
            if kind == "}" and name.startswith("."):
                raise refuse(key, node, f"the relative key {name}")
            if kind == "}" and name.split(".")[0].split("[")[0] not in keys:
                value: Any = saved
                for part in name.split("."):
                    value = value.get(part) if isinstance(value, dict) else None
                plain = value is not None and not isinstance(value, (dict, list)) and "${" not in str(value)
                if node.strip() != f"${{{name}}}" or not plain:
                    raise refuse(key, node, f"the key {name}")
                return value
        return node

    return clean({k: copy.deepcopy(saved[k]) for k in keys if k in saved}, "")


def taken_from_run(saved: dict[str, Any], source: Path) -> dict[str, Any]:
    """What evaluation takes from a saved run config: its :data:`RUN_KEYS`, vetted."""
    return vetted(saved, source, RUN_KEYS)


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
    algo = taken.get("algo")
    if isinstance(algo, dict) and isinstance(algo.get("model"), dict):  # keys algo.model gained since
        filled += _fill_node(algo["model"], ModelKeys.defaults(), "algo.model")
    if "paths" not in taken:
        taken["paths"] = OmegaConf.to_container(OmegaConf.load(cfg_dir / "paths" / "default.yaml"), resolve=False)
        filled.append("paths=default")
    envs = taken.get("envs")
    env_yaml = cfg_dir / "envs" / f"{envs.get('name')}.yaml" if isinstance(envs, dict) else None
    if env_yaml is not None and env_yaml.is_file():
        for k, v in load_env_node(env_yaml.stem).items():
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


def _fill_node(node: dict[str, Any], defaults: dict[str, Any], prefix: str) -> list[str]:
    """Put the keys of ``defaults`` that ``node`` lacks into it, nested nodes too; what was filled."""
    filled = []
    for k, v in defaults.items():
        if k not in node:
            node[k] = copy.deepcopy(v)
            filled.append(f"{prefix}.{k}={v!r}")
        elif isinstance(v, dict) and isinstance(node[k], dict):
            filled += _fill_node(node[k], v, f"{prefix}.{k}")
    return filled


def read_run_config(saved_path: Path) -> dict[str, Any]:
    """A run folder's config.yaml as plain data in today's layout (:func:`upgrade_run_config`),
    unresolved; one line when it is not a training run's config (evaluation and resume read it)."""
    try:
        check_yaml_size(saved_path)
        raw = OmegaConf.to_container(OmegaConf.load(saved_path), resolve=False)
    except EvalError:
        raise
    except Exception as e:  # not YAML, or YAML that is not a mapping
        raise EvalError(f"{saved_path}: not a readable run config ({first_line(e)}); restore it from a copy") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("algo"), dict) or not isinstance(raw.get("envs"), dict):
        raise EvalError(f"{saved_path}: expected a training run's config with algo and envs sections; restore it")
    return upgrade_run_config(raw)


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
    saved = fill_missing(taken_from_run(read_run_config(saved_path), saved_path), saved_path)
    ev: dict[str, Any] = OmegaConf.to_container(without_hydra(eval_cfg), resolve=False)  # type: ignore
    if ev["eval_env"]:
        saved["envs"] = replace_env(saved["envs"], load_env_node(str(ev["eval_env"])))
    training_only_off(saved["envs"], ev.get("envs") or {}, saved_path)
    if saved["envs"].get("name") == "babilong" and ev["envs"].get("length_unit") is None:
        # BabiLong is evaluated at the official token budgets unless a sentence count is asked for
        ev["envs"]["length_unit"] = "sentences" if ev["envs"].get("num_sentences") is not None else "tokens"
    ev = _prune_nulls(ev, saved)
    try:
        merged = OmegaConf.merge(OmegaConf.create(saved), OmegaConf.create(ev))
        OmegaConf.resolve(merged)
    except OmegaConfBaseException as e:
        raise EvalError(f"{saved_path}: cannot be combined with the evaluation config ({first_line(e)})") from None
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


def first_line(exc: BaseException) -> str:
    lines = [x.strip() for x in str(exc).splitlines() if x.strip()]
    return lines[0] if lines else type(exc).__name__
