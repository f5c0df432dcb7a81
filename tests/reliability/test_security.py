"""Run folders and configs cannot run code or leak keys: weights_only checkpoints (older ones
with numpy RNG state still load), no API key in configs or on command lines, remote code off
unless asked for."""

from __future__ import annotations

import inspect
import random

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from rl.run.config import rng_state, set_rng_state
from runstore import CheckpointLoadError, load_checkpoint
from tests.conftest import ROOT


def test_rng_state_loads_with_weights_only(tmp_path):
    torch.save({"rng": rng_state()}, tmp_path / "c.pt")
    draws = (random.random(), np.random.rand(), torch.rand(1).item())
    set_rng_state(load_checkpoint(tmp_path / "c.pt")["rng"])
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == draws


def test_checkpoint_of_an_older_version_loads(tmp_path):
    """Older versions stored numpy's RNG state as an ndarray tuple; it loads without running code."""
    old = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    torch.save({"rng": old}, tmp_path / "old.pt")
    draw = np.random.rand()
    set_rng_state(load_checkpoint(tmp_path / "old.pt")["rng"])
    assert np.random.rand() == draw


def test_truncated_checkpoint(tmp_path):
    torch.save({"w": torch.zeros(1000)}, tmp_path / "c.pt")
    data = (tmp_path / "c.pt").read_bytes()
    (tmp_path / "c.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(
        CheckpointLoadError,
        match=r"c\.pt is not a readable checkpoint \(.*\); it is truncated or corrupt: restore it from a copy$",
    ):
        load_checkpoint(tmp_path / "c.pt")


def test_api_key_on_the_reader_command_line_is_refused():
    import eval_llm_longbench
    import eval_llm_openqa
    import eval_llm_synthetics

    for mod, args in (
        (eval_llm_synthetics, ["log.jsonl", "--babi_task", "qa1"]),
        (eval_llm_openqa, ["--retriever_logfile", "log.jsonl"]),
        (eval_llm_longbench, ["--retriever_logfile", "log.jsonl"]),
    ):
        for key_arg in (["--api_key", "sk-secret"], ["--api_key=sk-secret"]):
            with pytest.raises(SystemExit) as e:
                mod.parse_args(args + key_arg)
            assert str(e.value) == (
                "error: --api_key is not accepted (a key on the command line is visible in ps and "
                "the shell history); export QRAG_API_KEY=<key> instead"
            )
        assert mod.parse_args(args).trust_remote_code is False
        assert mod.parse_args(args + ["--trust_remote_code"]).trust_remote_code is True


def test_remote_code_is_off_by_default():
    from prompts_and_metrics.llm.hf_backend import TransformersBackend
    from prompts_and_metrics.llm.vllm_backend import VLLMBackend

    for cls in (TransformersBackend, VLLMBackend):
        assert inspect.signature(cls.__init__).parameters["trust_remote_code"].default is False
    llm = OmegaConf.load(ROOT / "configs" / "feedback" / "llm.yaml")
    assert llm.vllm_config.trust_remote_code is False
    assert "api_key" not in llm


def test_a_run_folder_cannot_turn_on_remote_code(tmp_path):
    from rl.run.eval_config import merge_eval_config
    from tests.eval.conftest import TRAIN_OVERRIDES, eval_cfg, write_run_config

    write_run_config(tmp_path, TRAIN_OVERRIDES + ["algo.model.trust_remote_code=true"])
    assert merge_eval_config(eval_cfg(tmp_path)).algo.model.trust_remote_code is False
    assert merge_eval_config(eval_cfg(tmp_path, "trust_remote_code=true")).algo.model.trust_remote_code is True
