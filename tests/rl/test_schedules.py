import math

import pytest
import torch

from rl.schedules import build_scheduler, lr_factor


def test_warmup_linear_ref_semantics():
    f = lambda n, rho=0.1, smooth=False: lr_factor("WarmupLinear", n, 10, 110, rho, smooth)
    assert f(0) == 0.0
    assert f(9) == pytest.approx(0.9 * 9 / 10)  # climbs to (1 − ρ)·n/W ...
    assert f(10) == pytest.approx(1.0)  # ... and jumps to 1 at W
    assert f(60) == pytest.approx(1 - 0.9 * 0.5)
    assert f(110) == pytest.approx(0.1)
    assert f(9, smooth=True) == pytest.approx(0.9)
    assert lr_factor("WarmupLinear", 110, 10, 110, 0.0) == 0.0
    assert lr_factor("WarmupLinear", 500, 10, 110, 0.0) == 0.0  # never negative


def test_cosine():
    f = lambda n: lr_factor("Cosine", n, 10, 110, 0.1)
    assert f(0) == 0.0 and f(5) == 0.5 and f(10) == pytest.approx(1.0)
    assert f(60) == pytest.approx(0.1 + 0.9 * math.cos(math.pi / 4))
    assert f(110) == pytest.approx(0.1) and f(1000) == pytest.approx(0.1)


def test_unknown_name_and_lambda_lr():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    with pytest.raises(ValueError):
        build_scheduler(opt, {"name": "Nope", "total": 10})
    sched = build_scheduler(opt, {"name": "WarmupLinear", "warmup": 2, "total": 4, "ratio": 0.0})
    lrs = []
    for _ in range(4):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([0.0, 1.0, 2.0, 1.0])
