"""The legacy switches (envs/legacy.py): one dataclass, the presets that set it, and the builders
that hand its booleans to the components (DESIGN §11)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect

from omegaconf import OmegaConf

from envs.data import registry
from envs.feedback_llm import LLMFeedback
from envs.legacy import Legacy
from rl.learners import LEARNERS
from rl.run.eval_config import fill_missing
from tests.conftest import CONFIGS, ROOT, TINY, compose_cfg


def test_fields_are_the_ref_presets_keys():
    ref = OmegaConf.to_container(OmegaConf.load(f"{CONFIGS}/legacy/ref.yaml"))
    assert list(ref) == Legacy.names()
    assert Legacy(**ref) == Legacy.reference()
    assert all(f.default is False and f.metadata["doc"] for f in dataclasses.fields(Legacy))


def test_presets_and_command_line_compose():
    assert Legacy.from_cfg(compose_cfg(TINY).legacy) == Legacy()
    assert Legacy.from_cfg(compose_cfg([*TINY, "legacy=ref"]).legacy) == Legacy.reference()
    assert Legacy.from_cfg(compose_cfg([*TINY, "legacy.oracle_stop=true"]).legacy) == Legacy(oracle_stop=True)


def test_a_saved_run_without_newer_switches_loads():
    old = {"lambda_return_off_by_one": True, "oracle_stop": False}  # a run folder from before the rest existed
    assert Legacy.from_cfg(OmegaConf.create(old)) == Legacy(lambda_return_off_by_one=True)
    taken = fill_missing({"algo": {}, "envs": {"name": "babilong"}}, ROOT / "config.yaml")
    assert taken["legacy"] == Legacy.defaults()


def test_each_component_takes_the_switches_it_declares():
    """What a builder hands over (a component's declared switches) is a keyword it takes."""
    declared = {"LLMFeedback": (LLMFeedback, LLMFeedback.LEGACY)}
    declared |= {name: (cls, cls.LEGACY) for name, cls in LEARNERS.items()}
    for module in set(registry._MODULES.values()):
        importlib.import_module(module)
    declared |= {name: (registry._BUILDERS[name], registry._SWITCHES[name]) for name in registry._BUILDERS}
    assert LEARNERS["pqn"].LEGACY and registry._SWITCHES["babilong"] and registry._SWITCHES["niah"]
    for name, (component, switches) in declared.items():
        params = inspect.signature(component).parameters
        assert set(switches) <= set(Legacy.names()), name
        assert all(params[s].default is False for s in switches), name
