"""eval_retriever.py under torchrun with 2 CPU processes: the merged output equals a 1-process
run, and an interrupted sharded run resumes with the same or another world size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, compose_cfg

from .conftest import WORKER, torchrun

EVAL = ["num_samples=5", "envs.num_sentences=8", "eval.group_size=2", "progress_bar=false", "device=cpu"]
STEM = "eval_seed42_ns8"
TIMING_SUMMARY = {"wall_s", "episode_s_mean"}


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def eval_one_process(run_dir: Path, out: Path, *extra: str) -> dict:
    """In this process, with one thread like each torchrun rank (OMP_NUM_THREADS=1): CPU results
    are bit-equal only at equal thread counts."""
    import torch

    from rl.run.evaluate import run

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run(compose_cfg([f"pretrained_path={run_dir}", f"output_dir={out}", *EVAL, *extra], "testing"))
    finally:
        torch.set_num_threads(before)


def without_timing(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "episode_s"} for r in records]


def assert_same_records(got: list[dict], want: list[dict], exact: bool) -> None:
    """Same records; Q-values to float tolerance. Even with the same groups, a rank's process can
    round a Q-value one ulp differently (CPU BLAS picks kernels by thread count and batch layout);
    a resumed run batches other samples together, so it gets a wider tolerance."""
    got, want = without_timing(got), without_timing(want)
    rel, abs_ = (1e-6, 1e-7) if exact else (1e-5, 1e-6)
    for g, w in zip(got, want):
        assert g.pop("q_values") == pytest.approx(w.pop("q_values"), rel=rel, abs=abs_)
    assert got == want


@pytest.fixture(scope="module")
def reference(trained_run: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], dict]:
    out = tmp_path_factory.mktemp("eval1")
    summary = eval_one_process(trained_run, out)
    return lines(out / f"{STEM}.jsonl"), summary


def test_sharded_equals_one_process(trained_run: Path, reference, tmp_path: Path) -> None:
    out, cwd = tmp_path / "out", tmp_path / "cwd"
    res = torchrun([str(ROOT / "eval_retriever.py"), f"pretrained_path={trained_run}", f"output_dir={out}", *EVAL], cwd)
    assert res.returncode == 0, res.stderr[-3000:]
    records, summary = reference
    merged = lines(out / f"{STEM}.jsonl")
    assert [r["index"] for r in merged] == [0, 1, 2, 3, 4]
    assert_same_records(merged, records, exact=True)  # each rank batches the same groups as 1 process
    got = json.loads((out / f"{STEM}.summary.json").read_text())
    assert {k: v for k, v in got.items() if k not in TIMING_SUMMARY} == {
        k: v for k, v in summary.items() if k not in TIMING_SUMMARY
    }
    # Hydra's own folder follows output_dir (so a read-only run folder can be evaluated)
    files = [".eval_hydra", f"{STEM}.jsonl", f"{STEM}.jsonl.meta.json", f"{STEM}.summary.json"]
    assert sorted(p.name for p in out.iterdir()) == files
    assert list(cwd.iterdir()) == []  # no rank wrote a Hydra folder or log elsewhere
    assert res.stdout.count("[eval] eval_seed42_ns8: n=5") == 1  # rank 0 alone reports


def test_interrupted_sharded_eval_resumes(trained_run: Path, reference, tmp_path: Path) -> None:
    out, cwd = tmp_path / "out", tmp_path / "cwd"
    records, _ = reference
    # rank 1 dies after one record: its part file (and maybe rank 0's) stay behind, unmerged
    res = torchrun([WORKER, "eval", str(out), "1", f"pretrained_path={trained_run}", *EVAL], cwd)
    assert res.returncode != 0 and "simulated crash" in res.stderr
    parts = sorted(out.glob(f"{STEM}.rank*.jsonl"))
    assert parts and not (out / f"{STEM}.jsonl").exists()
    with open(parts[-1], "a", encoding="utf-8") as f:
        f.write('{"id": "half-written')  # a crash mid-line
    # rerun with 2 ranks: nothing lost, nothing twice
    res = torchrun([str(ROOT / "eval_retriever.py"), f"pretrained_path={trained_run}", f"output_dir={out}", *EVAL], cwd)
    assert res.returncode == 0, res.stderr[-3000:]
    merged = lines(out / f"{STEM}.jsonl")
    assert [r["index"] for r in merged] == [0, 1, 2, 3, 4]
    assert_same_records(merged, records, exact=False)
    assert not list(out.glob(f"{STEM}.rank*.jsonl"))

    # another world size: a 2-rank run over 9 samples loses rank 1 at once, a 1-process run finishes it
    more = [a for a in EVAL if not a.startswith("num_samples")] + ["num_samples=9"]
    res = torchrun([WORKER, "eval", str(out), "0", f"pretrained_path={trained_run}", *more], cwd)
    assert res.returncode != 0
    summary = eval_one_process(trained_run, out, "num_samples=9")
    final = lines(out / f"{STEM}.jsonl")
    assert [r["index"] for r in final] == list(range(9)) and len({r["id"] for r in final}) == 9
    assert final[:5] == merged and summary["n"] == 9
    assert not list(out.glob(f"{STEM}.rank*.jsonl")) and list(cwd.iterdir()) == []
