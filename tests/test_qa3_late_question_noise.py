"""experiments/qa3_late/question_noise.py on the committed archive: its long-story means per 32K draw equal round10.py's
Table 10k (computed another way: from the test haystacks rebuilt), a run's standard error is the textbook one over its
per-question scores, left-out runs leave the means, and a setting with no run is refused."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, load_script

HERE = ROOT / "experiments" / "qa3_late"


@pytest.fixture(scope="module")
def qn():
    return load_script("question_noise", "experiments/qa3_late")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("qa3_late")
    with tarfile.open(HERE / "runs.tar.xz") as tar:
        tar.extractall(root, filter="data")
    return next(p.parent.parent for p in root.rglob("config.yaml"))


def setting_runs(root: Path, setting: str) -> list[Path]:
    return sorted(root.glob(f"w1_{setting}_s*"))


@pytest.mark.parametrize("setting", ["ctrl", "late"])
def test_long_story_means_equal_table_10k(qn, runs, setting):
    table = json.loads((HERE / "analysis.json").read_text())["Table 10k"][f"{setting}/other"]
    got = qn.long_story_means(setting_runs(runs, setting))
    assert got == pytest.approx([table[f"32K/{es}"] for es in (42, 43, 44)], abs=1e-9)


def test_a_left_out_run_leaves_the_means(qn, runs):
    every = setting_runs(runs, "late")
    kept = [r for r in every if r.name != "w1_late_s7"]
    s7 = qn.long_story_means([r for r in every if r.name == "w1_late_s7"])
    mixed = [(9 * k + one) / 10 for k, one in zip(qn.long_story_means(kept), s7)]
    assert mixed == pytest.approx(qn.long_story_means(every), abs=1e-9)


def test_standard_error_is_over_the_questions(qn, runs):
    run = setting_runs(runs, "ctrl")[0]
    x = np.array(list(qn.scores(run, "1K").values()))
    assert len(x) == 200
    [(name, mean, se, under)] = qn.seed_rows([run], np.random.default_rng(0))
    assert name == run.name and mean == pytest.approx(x.mean())
    assert se == pytest.approx(np.sqrt(((x - x.mean()) ** 2).sum() / (len(x) - 1) / len(x)))
    assert 0.0 <= under <= 1.0


def test_a_draw_not_evaluated_is_none(qn, runs, tmp_path):
    run = tmp_path / "w1_ctrl_s1"
    run.mkdir()
    src = setting_runs(runs, "ctrl")[0]
    for name in ("config.yaml", "eval_seed42_nt1000.jsonl", "eval_seed42_nt32000.jsonl"):
        (run / name).write_bytes((src / name).read_bytes())
    got = qn.long_story_means([run])
    assert got[0] is not None and got[1:] == [None, None]


def test_an_unknown_setting_is_refused(qn):
    with pytest.raises(SystemExit, match="no run of setting 'nope'"):
        qn.main([str(HERE / "runs.tar.xz"), "--settings", "nope"])
