"""Hydra/OmegaConf glue shared by the entry points: resolvers, run folders, seeding."""

from __future__ import annotations

import copy
import logging
import random
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def register_resolvers() -> None:
    """``${qrag_root:}`` = the project folder, so data paths don't depend on the shell's cwd;
    ``${qrag_sweep_jobs:N}`` = concurrent sweep jobs for N per visible GPU (:func:`sweep_jobs`);
    ``${qrag_first:a,b}`` = a unless it is null or empty, else b."""
    if not OmegaConf.has_resolver("qrag_root"):
        OmegaConf.register_new_resolver("qrag_root", lambda: str(PROJECT_ROOT))
    if not OmegaConf.has_resolver("qrag_sweep_jobs"):
        OmegaConf.register_new_resolver("qrag_sweep_jobs", sweep_jobs)
    if not OmegaConf.has_resolver("qrag_first"):  # the first argument that is set (null and "" are not)
        OmegaConf.register_new_resolver("qrag_first", lambda *xs: next((x for x in xs if x not in (None, "")), None))


def sweep_jobs(jobs_per_gpu: Any) -> int:
    """``n_jobs`` of ``hydra/launcher=parallel``: ``jobs_per_gpu`` for every visible GPU, or
    ``jobs_per_gpu`` processes on a machine without one. Counting GPUs does not initialise CUDA
    in the launching process (torch counts them through NVML)."""
    n = int(jobs_per_gpu)
    if n < 1:
        raise ValueError(f"jobs_per_gpu must be >= 1, got {jobs_per_gpu!r}")
    return n * max(1, torch.cuda.device_count())


def schemas() -> list[tuple[str, Any]]:
    """Every schema (rl/schema.py) with the config node it states: the top-level training keys
    (``""``: those evaluation also reads, then the rest with ``speed``), the shared ``algo`` keys and
    each learner's ``algo.<name>.hyperparams``."""
    from rl.learners import LEARNERS
    from rl.learners.base import Shared
    from rl.run.keys import EnvPositions, RunKeys, TrainingKeys

    learners = [(f"algo.{name}.hyperparams", learner.HYPER) for name, learner in LEARNERS.items()]
    return [("", RunKeys), ("", TrainingKeys), ("envs", EnvPositions), ("algo", Shared), *learners]


def schema_tables() -> dict[str, list[str]]:
    """docs/CONFIG.md's table rows of every schema, by a title naming the node and its dataclass."""
    return {
        f"{f'`{node}`' if node else 'Top level'} ({cls.__module__.replace('.', '/')}.py, `{cls.__name__}`)": cls.table_rows(
            node
        )
        for node, cls in schemas()
    }


def register_schemas() -> None:
    """Every schema's defaults into Hydra's ConfigStore (rl/schema.py), so the YAML files only
    override: the ``learner`` group's options (``learner=<name>``: ``algo.objective`` and
    ``algo.<name>.hyperparams``) and ``algo_shared`` (the ``algo`` keys every learner shares),
    which configs/training.yaml lists before the ``algo`` preset; ``envs_shared`` (the position keys
    every env shares), listed before the ``envs`` choice; ``legacy=none`` (every legacy
    switch off, envs/legacy.py), which configs/legacy/ref.yaml's all-on preset overrides."""
    from hydra.core.config_store import ConfigStore

    from envs.legacy import Legacy
    from rl.learners import LEARNERS
    from rl.learners.base import Shared
    from rl.run.keys import EnvPositions, RunKeys, TrainingKeys

    store = ConfigStore.instance()
    for name, learner in LEARNERS.items():
        node = {"objective": name, name: {"hyperparams": learner.HYPER.defaults()}}
        store.store(group="learner", name=name, package="algo", node=node)
    store.store(name="algo_shared", package="algo", node=Shared.defaults())
    store.store(name="envs_shared", package="envs", node=EnvPositions.defaults())
    store.store(name="training_keys", package="_global_", node=RunKeys.defaults() | TrainingKeys.defaults())
    store.store(group="legacy", name="none", node=Legacy.defaults())


register_resolvers()
register_schemas()


def compose_config(name: str, overrides: Sequence[str] = ()) -> DictConfig:
    """``configs/<name>.yaml`` composed by Hydra, also from inside another Hydra app (whose global
    state is set aside and restored)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    backup = get_gh_backup()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(PROJECT_ROOT / "configs"), version_base="1.3"):
            return compose(config_name=name, overrides=list(overrides))
    finally:
        restore_gh_from_backup(backup)


def seed_everything(seed: int, deterministic: bool = True) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    if deterministic:
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False


def rng_state() -> dict[str, Any]:
    """Every global RNG as tensors and plain values (loadable with ``weights_only=True``)."""
    numpy_state = np.random.get_state(legacy=False)
    numpy_state["state"]["key"] = numpy_state["state"]["key"].tolist()
    state = {"python": random.getstate(), "numpy": numpy_state, "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


CODE_VERSION_FILE = PROJECT_ROOT / ".code_version"


def code_version() -> str:
    """The commit of this code: git's short hash, or, in a copy of the tree without .git (a lease's
    copy on a lent machine), the one line of ``.code_version`` that scripts/lease.sh writes there."""
    try:
        out = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        return CODE_VERSION_FILE.read_text(encoding="utf-8").strip() or "unknown"
    except OSError:
        return "unknown"


def hydra_output_dir() -> Path | None:
    try:
        from hydra.core.hydra_config import HydraConfig

        return Path(HydraConfig.get().runtime.output_dir)
    except (ImportError, ValueError):
        return None


# Keys that configs saved by earlier versions still carry although nothing reads them any more.
REMOVED_KEYS = ("envs.env", "envs.test_env", "algo.model.predictor.input_dim", "algo.model.predictor.max_seq_len")
# Keys renamed since (old dotted key -> new, issue 35): a saved run config is read in today's names,
# an old command line is rewritten with a note (rename_overrides), a config node holding an old name
# is refused naming the new one (rl/run/validate.py).
RENAMED_KEYS = {
    "algo.pqn.hyperparams.Lambda": "algo.pqn.hyperparams.lam",
    "algo.sac_d.hyperparams.Lambda": "algo.sac_d.hyperparams.lam",
}
# Dataset folders added to configs/paths since: a saved run read HotpotQA / MuSiQue / 2Wiki from these
# (its own envs node keeps its saved data paths; an `eval_env=hotpotqa|musique|hotpotqa+musique+2wikimultihopqa`
# node reads the keys).
ADDED_PATHS = {
    "hotpotqa_dir": "${paths.data_root}/hotpotqa",
    "musique_dir": "${paths.data_root}/musique",
    "twowiki_dir": "${paths.data_root}/2wikimultihopqa",
}


def upgrade_run_config(saved: dict[str, Any]) -> dict[str, Any]:
    """A run folder's saved config (config.yaml, or a checkpoint's config) in today's layout: the
    one migration of old runs. Removed keys are dropped, renamed ones (``RENAMED_KEYS``) take their new
    name; keys added since get the value the run
    used, as its dataset declares them (``DatasetSpec.added_keys``), and the dataset folders of
    ``ADDED_PATHS`` their folder under ``data_root``. Code then reads every key
    without a default of its own."""
    from envs.data.registry import dataset_spec

    out = copy.deepcopy(saved)
    for dotted in REMOVED_KEYS:
        *parents, leaf = dotted.split(".")
        node: Any = out
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    for old_key, new_key in RENAMED_KEYS.items():
        *parents, leaf = old_key.split(".")
        node = out
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and leaf in node:
            node.setdefault(new_key.rsplit(".", 1)[1], node.pop(leaf))
    paths = out.get("paths")
    if isinstance(paths, dict):
        for key, value in ADDED_PATHS.items():
            paths.setdefault(key, value)
    envs = out.get("envs")
    if isinstance(envs, dict) and "name" in envs:
        for key, value in dataset_spec(str(envs["name"])).added_keys.items():
            envs.setdefault(key, value)
    return out


def without_hydra(cfg: DictConfig) -> DictConfig:
    """A copy of the config without the ``hydra`` node (its resolvers only work inside Hydra)."""
    plain = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    if "hydra" in plain:
        del plain["hydra"]
    return plain


ABSENT = "<absent>"


def config_differences(old: Any, new: Any, ignore: tuple[str, ...] = ()) -> list[tuple[str, Any, Any]]:
    """(dotted key, old value, new value) of every leaf that differs between two configs given as
    plain data; nothing is resolved here (a value from a file someone sent stays text). A key one
    side lacks has the value ``ABSENT`` there."""
    out: list[tuple[str, Any, Any]] = []

    def walk(x: Any, y: Any, prefix: str) -> None:
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y), key=str):
                key = f"{prefix}.{k}" if prefix else str(k)
                if key not in ignore:
                    walk(x.get(k, ABSENT), y.get(k, ABSENT), key)
        elif x != y:
            out.append((prefix, x, y))

    walk(old, new, "")
    return out


def rename_overrides(argv: Sequence[str]) -> list[str]:
    """Command-line overrides with the old names of ``RENAMED_KEYS`` rewritten to the new ones
    (``[+]key=value``, sweeps included), one note on stderr per rewritten key, so that old command
    lines and launch plans keep working."""
    import sys

    out = []
    for arg in argv:
        plus = "+" if arg.startswith("+") else ""
        key, eq, value = arg.removeprefix(plus).partition("=")
        if eq and key in RENAMED_KEYS:
            print(f"note: {key} is now {RENAMED_KEYS[key]}; taken as {RENAMED_KEYS[key]}={value}", file=sys.stderr)
            arg = f"{plus}{RENAMED_KEYS[key]}={value}"
        out.append(arg)
    return out
