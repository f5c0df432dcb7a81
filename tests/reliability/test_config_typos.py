"""A typo never passes silently (issue 36 items 16, 18): an unknown key is refused with or without
Hydra's ``+``, with the nearest known key, status 2 and no run folder; a value copied from a bad
value is not reported a second time."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rl.run.validate import ConfigError, check_override_keys, check_training
from tests.conftest import ROOT, TINY, compose_cfg

CONFIGS = ROOT / "configs"


@pytest.mark.parametrize("arg", ["stps_count=5", "+stps_count=5", "++stps_count=5"])
def test_a_misspelt_training_key_is_refused_whatever_its_prefix(tmp_path, arg):
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "train_q_rag.py", "experiment=demo", arg, f"hydra.run.dir={run_dir}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines() == ["error: stps_count: no such key; did you mean steps_count?"]
    assert not run_dir.exists()


@pytest.mark.parametrize(
    ("name", "argv", "error"),
    [
        (
            "testing",
            ["pretrained_path=x", "+envs.num_sentence=50"],
            "envs.num_sentence: no such key; did you mean envs.num_sentences?",
        ),
        ("testing", ["pretrained_path=x", "num_sample=5"], "num_sample: no such key; did you mean num_samples?"),
        ("retrieve", ["run=x", "question=a", "stpes=3"], "stpes: no such key; did you mean steps?"),
        (
            "training",
            ["envs=hotpotqa", "+algo.optimiser.lr=1e-5"],
            "algo.optimiser.lr: no such key; did you mean algo.optimizer.lr?",
        ),
    ],
)
def test_unknown_keys_of_every_command_are_refused(name, argv, error):
    with pytest.raises(ConfigError) as e:
        check_override_keys(argv, CONFIGS, name)
    assert e.value.lines == [error]


@pytest.mark.parametrize(
    ("name", "argv"),
    [
        ("testing", ["pretrained_path=x", "+legacy.oracle_stop=true", "envs.num_tokens=4000", "-m", "seed=1,2"]),
        ("testing", ["pretrained_path=x", "+envs.facts_test_path=a.txt", "+algo.model.pool_scale=2"]),
        ("training", ["experiment=demo", "envs=hotpotqa,musique", "steps_count=3", "hydra.run.dir=x", "~seed"]),
        ("retrieve", ["run=x", "text=t", "question=a=b", "steps=2", "use_last=true"]),
    ],
)
def test_known_keys_pass(name, argv):
    check_override_keys(argv, CONFIGS, name)


def test_a_bad_value_is_reported_once_not_again_where_it_is_copied():
    with pytest.raises(ConfigError) as e:
        check_training(compose_cfg([*TINY, "steps_count=abc"]))
    assert e.value.lines == ["steps_count='abc': expected an integer >= 0"]


@pytest.mark.parametrize(
    ("script", "argv", "hydra_says"),
    [
        ("train_q_rag.py", ["experiment=demo", "seed=[1"], "no viable alternative at input '[1'"),
        ("eval_retriever.py", ["pretrained_path=x", "seed=[1"], "no viable alternative at input '[1'"),
        ("retrieve.py", ["run=x", "text=t.txt", "question=(a"], "Error parsing override 'question=(a'"),
        ("train_q_rag.py", ["experiment=demo", "~envs.no_such_key"], "Could not delete from config"),
    ],
)
def test_hydras_own_errors_exit_2_as_the_projects_do(tmp_path, script, argv, hydra_says):
    """Item 16: a malformed override or a config that does not compose is Hydra's to word, but the
    command line's mistake all the same: status 2, as an unknown key's, not Hydra's 1."""
    out = subprocess.run(
        [sys.executable, script, *argv, f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert hydra_says in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "run").exists()


def test_a_job_that_crashed_keeps_status_1(monkeypatch):
    from hydra.core.hydra_config import HydraConfig

    from rl.run.validate import run_main

    monkeypatch.setattr(HydraConfig, "initialized", staticmethod(lambda: True))  # the job had started

    def crashed():
        sys.exit(1)  # Hydra's report of an exception the job raised

    with pytest.raises(SystemExit) as e:
        run_main(crashed)
    assert e.value.code == 1
