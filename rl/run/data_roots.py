"""Which local files a run folder's config may make evaluation read (docs/EVALUATION.md, merge rule).

A run folder may come from anyone, and its ``envs.*_path`` keys name the files evaluation opens.
Taken from the run, such a path must lie under a data root: a folder the shipped path presets name
(configs/paths/*.yaml: ``data_root``, ``ruler_root``) or a ``paths.<key>`` the evaluating user sets
on the command line. A path the user gives as ``envs.<key>=`` is read wherever it is. Paths are
compared after ``..`` is removed, without following links: a link inside a data root was put
there by the evaluating machine's owner.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rl.run.config import PROJECT_ROOT

PRESET_ROOTS = ("data_root", "ruler_root")


def _normal(path: str) -> Path:
    return Path(os.path.normpath(os.path.abspath(os.path.expanduser(path))))


def preset_roots() -> list[Path]:
    """The data roots of every preset in configs/paths/, resolved on this machine."""
    roots: list[Path] = []
    for preset in sorted((PROJECT_ROOT / "configs" / "paths").glob("*.yaml")):
        paths = OmegaConf.create({"paths": OmegaConf.load(preset)})
        roots += [_normal(str(paths.paths[k])) for k in PRESET_ROOTS if k in paths.paths]
    return sorted(set(roots))


def stray_data_paths(merged: DictConfig, own_envs: Iterable[str], own_paths: Iterable[str]) -> list[tuple[str, str]]:
    """``(key, path)`` of each ``envs.*_path`` value of the resolved ``merged`` config that the user
    did not set (``own_envs``) and that lies outside the data roots (the presets' and the user's
    ``paths.<key>`` in ``own_paths``)."""
    roots = preset_roots() + [_normal(str(merged.paths[k])) for k in own_paths if merged.paths.get(k) is not None]
    # BabiLong's training files (``*_train_path``) are opened only when the test split is "train"
    # (round 4's generated qa3 run recorded its training file outside the roots)
    tests_on_train = str(merged.envs.get("test_split")) == "train"
    skip = set(own_envs) | {str(k) for k in merged.envs if str(k).endswith("_train_path") and not tests_on_train}
    stray: list[tuple[str, str]] = []
    for key, value in merged.envs.items():
        if not str(key).endswith("_path") or key in skip:
            continue
        values: list[Any] = list(value) if OmegaConf.is_list(value) else [value]
        for v in values:
            if isinstance(v, str) and not any(_normal(v).is_relative_to(r) for r in roots):
                stray.append((str(key), v))
    return stray
