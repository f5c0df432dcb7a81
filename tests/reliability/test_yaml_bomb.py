"""A run folder's config.yaml whose aliases expand without bound (issue 36 item 9) is refused in
one line, quickly, instead of hanging retrieve.py and the evaluation."""

from __future__ import annotations

import shutil
import time

import pytest

from rl.run.eval_config import EvalError, merge_eval_config
from tests.eval.conftest import eval_cfg


def _bomb(levels: int = 12) -> str:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for k in range(1, levels):
        prev = f"*a{k - 1}"
        lines.append(f"a{k}: &a{k} [{', '.join([prev] * 10)}]")
    return "\n".join(lines) + "\nalgo: {}\nenvs: {}\n"


def test_an_alias_bomb_in_a_run_config_is_refused_quickly(eval_run_dir, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(eval_run_dir, run)
    (run / "config.yaml").write_text(_bomb())  # 10^12 values once expanded
    start = time.monotonic()
    with pytest.raises(EvalError, match=r"config.yaml: its aliases expand to more than 100000 values"):
        merge_eval_config(eval_cfg(run))
    assert time.monotonic() - start < 10


def test_a_real_run_config_passes_the_bound(eval_run_dir):
    merge_eval_config(eval_cfg(eval_run_dir))
