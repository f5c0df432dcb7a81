import math

import pytest
import torch

from rl.learners.schedules import Scheduler, build_scheduler, lr_factor


def test_warmup_linear_ref_semantics():
    def f(n, rho=0.1, smooth=False):
        return lr_factor("WarmupLinear", n, 10, 110, rho, smooth)

    assert f(0) == 0.0
    assert f(9) == pytest.approx(0.9 * 9 / 10)  # climbs to (1 − ρ)·n/W ...
    assert f(10) == pytest.approx(1.0)  # ... and jumps to 1 at W
    assert f(60) == pytest.approx(1 - 0.9 * 0.5)
    assert f(110) == pytest.approx(0.1)
    assert f(9, smooth=True) == pytest.approx(0.9)
    assert lr_factor("WarmupLinear", 110, 10, 110, 0.0) == 0.0
    assert lr_factor("WarmupLinear", 500, 10, 110, 0.0) == 0.0  # never negative


def test_cosine():
    def f(n):
        return lr_factor("Cosine", n, 10, 110, 0.1)

    assert f(0) == 0.0 and f(5) == 0.5 and f(10) == pytest.approx(1.0)
    assert f(60) == pytest.approx(0.1 + 0.9 * math.cos(math.pi / 4))
    assert f(110) == pytest.approx(0.1) and f(1000) == pytest.approx(0.1)


def test_unknown_name_and_lambda_lr():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    with pytest.raises(ValueError):
        build_scheduler(opt, Scheduler(name="Nope", total=10))
    sched = build_scheduler(opt, Scheduler(name="WarmupLinear", warmup=2, total=4, ratio=0.0))
    lrs = []
    for _ in range(4):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([0.0, 1.0, 2.0, 1.0])


# -- written against the surviving mutants of `mutmut run` (docs/TESTING.md) ---------------
def lrs_of(cfg, steps):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = build_scheduler(opt, cfg)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_build_scheduler_passes_ratio_and_smooth_warmup():
    got = lrs_of(Scheduler(name="WarmupLinear", warmup=2, total=6, ratio=0.2, smooth_warmup=True), 8)
    # smooth ramp n/W to 1, then linear from 1 at W to ρ at S, on below ρ after S, floored at 0
    want = [0.0, 0.5, 1.0, 0.8, 0.6, 0.4, 0.2, 0.0]
    assert got == pytest.approx(want)
    assert lrs_of(Scheduler(name="WarmupLinear", warmup=2, total=6, ratio=0.2), 2) == pytest.approx([0.0, 0.4])


def test_the_composed_schedule_is_the_schemas():
    """algo.scheduler is stated once (rl/learners/schedules.py): the composed node reads back as the
    dataclass's defaults, its total the run's steps_count."""
    from tests.conftest import compose_cfg

    got = Scheduler.from_cfg(compose_cfg(["steps_count=1500"]).algo.scheduler)
    assert got == Scheduler(total=1500)


def test_no_warmup_and_one_step_decay():
    assert lrs_of(Scheduler(name="WarmupLinear", warmup=0, total=4), 3) == pytest.approx([1.0, 0.75, 0.5])
    assert lr_factor("WarmupLinear", 4, 3, 4, 0.1) == pytest.approx(0.1)  # S = W + 1: ρ at S
    assert lr_factor("WarmupLinear", 5, 10, 110, 0.1) == pytest.approx(0.45)  # smooth_warmup defaults to off


def test_cosine_one_step_decay_and_the_error_names_the_choices():
    assert lr_factor("Cosine", 4, 3, 4, 0.1) == pytest.approx(0.1)  # S = W + 1: ρ at S
    with pytest.raises(ValueError, match="use WarmupLinear or Cosine"):
        lr_factor("Linear", 0, 1, 2, 0.0)
