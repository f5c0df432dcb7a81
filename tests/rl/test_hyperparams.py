"""Each learner's hyperparameters and the shared ``algo`` keys are stated once, in a dataclass
(rl/schema.py): default, one-line doc and check. The YAML files only override; the validator's
checks and docs/CONFIG.md's tables come from the same fields."""

import pytest
import yaml
from omegaconf import OmegaConf
from omegaconf.errors import ConfigAttributeError

from rl.learners import LEARNERS
from rl.learners.base import Shared
from rl.learners.pqn import Hyper as PQNHyper
from rl.learners.sarsa import SarsaHyper
from rl.run.config import rename_overrides, schemas, upgrade_run_config
from rl.run.validate import ConfigError, check_training
from rl.schema import Schema, _unwrap
from tests.conftest import ROOT, TINY, compose_cfg, load_script

SCHEMAS = schemas()


def leaves(node, prefix=""):
    """Dotted keys of every leaf of a plain dict."""
    out = []
    for k, v in node.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        out += leaves(v, key) if isinstance(v, dict) else [key]
    return out


def test_composed_defaults_are_the_dataclasses():
    """learner=<name> composes exactly the dataclass's defaults, the shared keys their own."""
    for name, learner in LEARNERS.items():
        algo = OmegaConf.to_container(compose_cfg([f"learner={name}"]).algo, resolve=False)
        assert algo["objective"] == name
        assert algo[name]["hyperparams"] == learner.HYPER.defaults(), name
        assert learner.HYPER.from_cfg(algo[name]["hyperparams"]) == learner.HYPER(), name
        assert {k: algo[k] for k in ("model", "optimizer", "scheduler", "max_grad_norm")} == Shared.defaults()


def test_no_default_is_stated_in_a_yaml_file():
    """The files that hold defaults hold no schema key: training.yaml only its defaults list and
    Hydra's settings, the base algo preset only the encoder, and configs/learner/ is gone
    (ConfigStore holds the learner options). Presets (the other algo files,
    experiments) may still pin a benchmark's published values."""
    assert not list((ROOT / "configs" / "learner").glob("*.yaml"))
    assert set(yaml.safe_load((ROOT / "configs" / "training.yaml").read_text())) == {"defaults", "hydra"}
    for path, package in ((ROOT / "configs" / "training.yaml", ""), (ROOT / "configs" / "algo" / "pqn.yaml", "algo")):
        node = yaml.safe_load(path.read_text())
        node = {package: node} if package else node
        stated = set(leaves({k: v for k, v in node.items() if k != "defaults"}))
        for prefix, schema in SCHEMAS:
            for key, _, _ in schema.docs(prefix):
                assert key not in stated, (
                    f"{path.relative_to(ROOT)} states {key}, whose default is in {schema.__name__}"
                )


def test_every_key_has_a_one_line_doc_in_config_md():
    """docs/CONFIG.md is what scripts/config_tables.py generates from the fields, so it holds every
    schema key's row with its one-line doc."""
    page = (ROOT / "docs" / "CONFIG.md").read_text(encoding="utf-8")
    for prefix, schema in SCHEMAS:
        for (key, _, doc), row in zip(schema.docs(prefix), schema.table_rows(prefix)):
            assert doc.strip() and "\n" not in doc, key
            assert row in page, f"docs/CONFIG.md lacks the row of {key}: {row}"
    assert page == load_script("config_tables").render(), "run python scripts/config_tables.py"


def _bad_value(meta, kind):
    """A value just outside a field's range, with the line the validator must print for it."""
    if kind is bool:
        return "maybe", "true or false"
    if "choices" in meta:
        return "nope", "one of " + ", ".join(meta["choices"])
    low, high = meta.get("low"), meta.get("high")
    if high is not None:
        bad = high + 1
    elif meta.get("low_open"):
        bad = low
    else:
        bad = low - 1
    rng = f" {'>' if meta.get('low_open') else '>='} {low:g}" + (f" and <= {high:g}" if high is not None else "")
    return bad, ("an integer" if kind is int else "a number") + rng


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_each_field_is_checked_from_its_metadata(name):
    """A value outside each field's declared range gets the validator's line for that key."""
    schema = LEARNERS[name].HYPER
    for key, f, annotation in schema.keys():
        kind, nullable = _unwrap(annotation)
        bad, want = _bad_value(f.metadata, kind)
        want += " or null" if nullable and kind is not bool and "choices" not in f.metadata else ""
        dotted = f"algo.{name}.hyperparams.{key}"
        with pytest.raises(ConfigError) as e:
            check_training(compose_cfg(TINY + [f"learner={name}", f"{dotted}={bad}"]))
        assert e.value.lines == [f"{dotted}={bad!r}: expected {want}"], key


def test_every_field_declares_a_check():
    """A field without a range, choices or a check would go unchecked: Schema.check refuses it."""
    for schema in [schema for _, schema in SCHEMAS]:
        for _, f, annotation in schema.keys():
            kind, _ = _unwrap(annotation)
            meta = f.metadata
            assert (
                kind is bool
                or {"low", "choices", "ok", "check"} & set(meta)
                or (isinstance(kind, type) and issubclass(kind, Schema))
            ), f.name


def test_types_are_converted_and_null_kept():
    node = OmegaConf.create(
        {
            "gamma": 1,  # an int in the yaml is a float field
            "alpha": "0.5",
            "lam": 0,
            "tau": 1,
            "top_k_actions": 3.0,  # int field: int(3.0)
            "alpha_min": 0,
            "soft_target": 0,  # bool field: bool(0)
            "use_target_networks": 1,
            "acting_dropout": True,
            "target_alpha_scale": 2,  # float field: float(2)
        }
    )
    hp = PQNHyper.from_cfg(node)
    assert hp.target_alpha_scale == 2.0 and type(hp.target_alpha_scale) is float
    assert (hp.gamma, hp.alpha, hp.lam, hp.tau, hp.alpha_min) == (1.0, 0.5, 0.0, 1.0, 0.0)
    assert all(type(v) is float for v in (hp.gamma, hp.alpha, hp.lam, hp.tau, hp.alpha_min))
    assert hp.top_k_actions == 3 and type(hp.top_k_actions) is int
    assert hp.soft_target is False and hp.use_target_networks is True
    node.top_k_actions = None  # null = all available chunks
    assert PQNHyper.from_cfg(node).top_k_actions is None
    with pytest.raises(ValueError):  # a non-nullable field gets no silent default
        PQNHyper.from_cfg(OmegaConf.merge(node, {"gamma": "high"}))
    shared = Shared.from_cfg(OmegaConf.merge(Shared.defaults(), {"max_grad_norm": 1, "scheduler": {"total": "7"}}))
    assert shared.optimizer.betas == (0.9, 0.98) and type(shared.optimizer.betas) is tuple
    assert shared.max_grad_norm == 1.0 and type(shared.max_grad_norm) is float and shared.scheduler.total == 7


def test_missing_key_names_it_and_unknown_keys_are_not_read():
    node = OmegaConf.create(SarsaHyper.defaults())
    with pytest.raises(ConfigAttributeError, match="n_steps"):
        SarsaHyper.from_cfg(OmegaConf.create({k: v for k, v in node.items() if k != "n_steps"}))
    extra = OmegaConf.merge(node, {"unused_key": 1})
    assert SarsaHyper.from_cfg(extra) == SarsaHyper.from_cfg(node) == SarsaHyper()


def test_lambda_renamed_lam_old_command_lines_and_run_folders_still_read():
    """``Lambda`` (issue 35): an old command line is rewritten, an old run config read in the new name,
    a config node still holding it refused naming ``lam`` (Schema.from_cfg would ignore it silently)."""
    argv = ["train_q_rag.py", "algo.pqn.hyperparams.Lambda=0.5", "+algo.sac_d.hyperparams.Lambda=0,0.3", "seed=1"]
    assert rename_overrides(argv) == [
        "train_q_rag.py",
        "algo.pqn.hyperparams.lam=0.5",
        "+algo.sac_d.hyperparams.lam=0,0.3",
        "seed=1",
    ]
    old = {"algo": {"pqn": {"hyperparams": {"gamma": 0.9, "Lambda": 0.3}}}}
    assert upgrade_run_config(old)["algo"]["pqn"]["hyperparams"] == {"gamma": 0.9, "lam": 0.3}
    assert old["algo"]["pqn"]["hyperparams"]["Lambda"] == 0.3  # the saved config itself is left alone
    cfg = compose_cfg([*TINY, "+algo.pqn.hyperparams.Lambda=0.3"])
    with pytest.raises(ConfigError) as e:
        check_training(cfg)
    assert "algo.pqn.hyperparams.Lambda: renamed to algo.pqn.hyperparams.lam" in str(e.value)
    assert (
        PQNHyper.from_cfg(
            compose_cfg(rename_overrides([*TINY, "algo.pqn.hyperparams.Lambda=0.3"])).algo.pqn.hyperparams
        ).lam
        == 0.3
    )
