"""``Hyperparams.from_cfg`` (rl/learners/base.py): one generic reader for every learner's
``algo.<NAME>.hyperparams``, checked against the field-by-field reading each learner had before."""

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ConfigAttributeError

from rl.learners.dqn import Hyper as DQNHyper
from rl.learners.pqn import Hyper as PQNHyper
from rl.learners.sac_d import SacHyper
from rl.learners.sarsa import SarsaHyper
from tests.conftest import ROOT


def hyperparams(name):
    return OmegaConf.load(ROOT / "configs" / "learner" / f"{name}.yaml")[name].hyperparams


def test_every_learner_yaml_reads_as_written():
    """The yaml's values, key by key (``Lambda`` -> ``lam``), with their Python types."""
    pqn = hyperparams("pqn")
    assert PQNHyper.from_cfg(pqn) == PQNHyper(
        gamma=pqn.gamma,
        alpha=pqn.alpha,
        lam=pqn.Lambda,
        tau=pqn.tau,
        top_k_actions=pqn.top_k_actions,
        alpha_min=pqn.alpha_min,
        soft_target=pqn.soft_target,
        use_target_networks=pqn.use_target_networks,
        acting_dropout=pqn.acting_dropout,
    )
    sac = hyperparams("sac_d")
    got = SacHyper.from_cfg(sac)
    assert got.lam == sac.Lambda and got.learn_alpha is bool(sac.learn_alpha)
    for name, cls in (("sarsa", SarsaHyper), ("dqn", DQNHyper), ("sac_d", SacHyper)):
        node = hyperparams(name)
        got = cls.from_cfg(node)
        for key, value in vars(got).items():
            assert value == node["Lambda" if key == "lam" else key], (name, key)


def test_types_are_converted_and_null_kept():
    node = OmegaConf.create(
        {
            "gamma": 1,  # an int in the yaml is a float field
            "alpha": "0.5",
            "Lambda": 0,
            "tau": 1,
            "top_k_actions": 3.0,  # int field: int(3.0)
            "alpha_min": 0,
            "soft_target": 0,  # bool field: bool(0)
            "use_target_networks": 1,
            "acting_dropout": True,
        }
    )
    hp = PQNHyper.from_cfg(node)
    assert (hp.gamma, hp.alpha, hp.lam, hp.tau, hp.alpha_min) == (1.0, 0.5, 0.0, 1.0, 0.0)
    assert all(type(v) is float for v in (hp.gamma, hp.alpha, hp.lam, hp.tau, hp.alpha_min))
    assert hp.top_k_actions == 3 and type(hp.top_k_actions) is int
    assert hp.soft_target is False and hp.use_target_networks is True
    node.top_k_actions = None  # null = all available chunks
    assert PQNHyper.from_cfg(node).top_k_actions is None
    with pytest.raises(ValueError):  # a non-nullable field gets no silent default
        PQNHyper.from_cfg(OmegaConf.merge(node, {"gamma": "high"}))


def test_missing_key_names_it_and_unknown_keys_are_not_read():
    node = hyperparams("sarsa")
    with pytest.raises(ConfigAttributeError, match="n_steps"):
        SarsaHyper.from_cfg(OmegaConf.create({k: v for k, v in node.items() if k != "n_steps"}))
    extra = OmegaConf.merge(node, {"unused_key": 1})
    assert SarsaHyper.from_cfg(extra) == SarsaHyper.from_cfg(node)


def test_dqn_choices_checked_when_read():
    node = hyperparams("dqn")
    with pytest.raises(ValueError, match="exploration must be one of"):
        DQNHyper.from_cfg(OmegaConf.merge(node, {"exploration": "greedy"}))
    with pytest.raises(ValueError, match="target_update must be one of"):
        DQNHyper.from_cfg(OmegaConf.merge(node, {"target_update": "never"}))
