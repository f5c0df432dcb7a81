"""Two writers on one run folder or one evaluation output: the second is refused at once with a
message naming the first process; a lock never outlives its process (kill -9 included); records
written twice by older versions are read once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from rl.run.eval_records import read_records, unique_records
from rl.run.evaluate import run
from runstore import FolderInUseError
from tests.conftest import ROOT
from tests.eval.conftest import eval_cfg

HOLD = (
    "import sys, time; from pathlib import Path; from rl.run.eval_records import output_lock; "
    "output_lock(Path(sys.argv[1])).acquire(); print('LOCKED', flush=True); time.sleep(300)"
)


def test_second_evaluation_on_the_same_output_is_refused(eval_run_dir, tmp_path):
    out = tmp_path / "eval_seed42_ns12.jsonl"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "LOCKED"
        with pytest.raises(FolderInUseError) as e:
            run(eval_cfg(eval_run_dir, f"output_dir={tmp_path}", "envs.num_sentences=12", "num_samples=2"))
        assert str(e.value).startswith(f"evaluation output {out} is in use by another process (pid {holder.pid} on ")
        assert str(e.value).endswith("wait for that evaluation to end, or write elsewhere (output_dir=...)")
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert not out.exists() and not out.with_name(out.name + ".meta.json").exists()  # the refused run wrote nothing
    assert run(eval_cfg(eval_run_dir, f"output_dir={tmp_path}", "envs.num_sentences=12", "num_samples=2"))["n"] == 2


def test_duplicates_are_read_once(tmp_path):
    """What two concurrent writers of an older version left: every sample twice, interleaved."""
    path = tmp_path / "eval_seed42_ns12.jsonl"
    recs = [{"index": i, "id": f"s{i}", "f1": 1.0} for i in range(60)]
    path.write_text("".join(json.dumps(r) + "\n" for pair in zip(recs, recs) for r in pair))
    got = read_records(path)
    assert got == recs
    assert unique_records([{"id": "a"}, {"id": "a"}, {"id": "b"}], path) == [{"id": "a"}, {"id": "b"}]


def test_summary_counts_each_sample_once(eval_run_dir, tmp_path):
    """An output written twice over (as two concurrent runs of older versions did): the rerun's
    summary has n = the samples, not twice as many."""

    def go():
        return run(eval_cfg(eval_run_dir, f"output_dir={tmp_path}", "envs.num_sentences=12", "num_samples=3"))

    first = go()
    out = tmp_path / "eval_seed42_ns12.jsonl"
    rows = out.read_text().splitlines(keepends=True)
    out.write_text("".join(r for pair in zip(rows, rows) for r in pair))
    again = go()
    assert again["n"] == 3 and again["n_in_file"] == 3 and again["fact_f1"] == first["fact_f1"]


def test_lock_file_goes_with_its_holder(tmp_path):
    from runstore import FolderLock

    lock = FolderLock(tmp_path / ".lock", "run folder x", "wait").acquire()
    assert (tmp_path / ".lock").read_text().startswith(f"pid {os.getpid()} on ")
    with pytest.raises(FolderInUseError):
        FolderLock(tmp_path / ".lock", "run folder x", "wait").acquire()  # a second holder, even in-process
    lock.release()
    assert not (tmp_path / ".lock").exists()
    FolderLock(tmp_path / ".lock", "run folder x", "wait").acquire().release()
