"""``precision`` is interpreted in one place (rl/model/precision.py) and defaulted in one (the yaml)."""

from __future__ import annotations

import pytest
import torch

from rl.model.precision import PRECISIONS, Precision

CPU, GPU = torch.device("cpu"), torch.device("cuda", 0)  # a device object needs no GPU


@pytest.mark.parametrize(
    "name, device, autocast, matmul",
    [
        ("auto", GPU, torch.bfloat16, "high"),
        ("auto", CPU, None, "high"),
        ("tf32", GPU, None, "high"),
        ("fp32", GPU, None, "highest"),
        ("fp32", CPU, None, "highest"),
        ("bf16", CPU, torch.bfloat16, "high"),
    ],
)
def test_resolve(name, device, autocast, matmul):
    p = Precision.resolve(name, device)
    assert (p.name, p.autocast, p.matmul) == (name, autocast, matmul)


def test_apply_sets_the_matmul_precision():
    before = torch.get_float32_matmul_precision()
    try:
        Precision.resolve("fp32", CPU).apply()
        assert torch.get_float32_matmul_precision() == "highest"
        Precision.resolve("tf32", CPU).apply()
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(before)


def test_unknown_name_and_one_list_of_names():
    import dataclasses

    from rl.run.keys import RunKeys

    with pytest.raises(ValueError, match="precision must be one of auto, tf32, fp32, bf16, got 'fp16'"):
        Precision.resolve("fp16", CPU)
    (field,) = [f for f in dataclasses.fields(RunKeys) if f.name == "precision"]
    assert field.metadata["choices"] is PRECISIONS  # the key's check uses the list Precision resolves by


def test_the_key_holds_the_only_default():
    """No code path defaults it: the training keys do (rl/run/keys.py), and the Q-network requires a Precision."""
    import inspect

    from rl.model.qnetwork import QNetwork
    from tests.conftest import compose_cfg

    assert compose_cfg([]).precision == "auto"
    assert inspect.signature(QNetwork).parameters["precision"].default is inspect.Parameter.empty
