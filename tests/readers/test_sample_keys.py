"""Reader records are keyed on a field that is unique (docs/READERS.md, *Sample keys*): `index`
when the retriever log has it, else (`source`, `id`), else `id`. For each of the three reader
scripts: distinct samples sharing an id are all scored, a sample written twice to the log is
scored once (with a warning), a run killed mid-write resumes without losing or repeating a
sample, and an output file written before lines carried their key resumes."""

import json
from pathlib import Path

import pytest

from prompts_and_metrics.reader_io import run_reader_cli, sample_key

from .conftest import FIXTURES, load_script, longbench_log_records


class Canned:
    """A backend that answers every prompt with the same text and counts the prompts it got."""

    def __init__(self):
        self.prompts = []

    def generate(self, batch, max_tokens, temperature=0.0, top_p=1.0, enable_thinking=None):
        self.prompts.extend(batch)
        return ["Final answer: hallway"] * len(batch)


def _fixture_lines(name, n):
    return [json.loads(x) for x in (FIXTURES / name).read_text().splitlines()[:n]]


# per script: (module, 3 records in its log format, log file name, argv after the log)
SCRIPTS = {
    "synthetics": (
        "eval_llm_synthetics",
        lambda: _fixture_lines("eval_seed0_ns30.jsonl", 3),
        "eval_seed0_ns30.jsonl",
        lambda log: [str(log), "--babi_task", "qa1"],
    ),
    "openqa": (
        "eval_llm_openqa",
        lambda: _fixture_lines("eval_seed0.jsonl", 3),
        "eval_seed0.jsonl",
        lambda log: ["--retriever_logfile", str(log)],
    ),
    "longbench": (
        "eval_llm_longbench",
        lambda: longbench_log_records("hotpotqa", longbench_e=True),
        "eval_seed0_lb-hotpotqa.jsonl",
        lambda log: ["--retriever_logfile", str(log)],
    ),
}
# sources each script can score (open-QA picks its metric by source)
SOURCES = {"synthetics": ("babilong", "babilong_b"), "openqa": ("hotpotqa", "musique"), "longbench": ("lb1", "lb2")}


def _records(script, ids, sources=None, indices=None):
    """The script's 3 base records with the given ids and, where given, sources / indices (None in
    a list, or no list, leaves that field out)."""
    out = []
    for k, rec in enumerate(SCRIPTS[script][1]()[: len(ids)]):
        rec = {key: v for key, v in rec.items() if key not in ("source", "index")}
        rec["id"] = ids[k]
        if sources and sources[k] is not None:
            rec["source"] = sources[k]
        if indices and indices[k] is not None:
            rec["index"] = indices[k]
        out.append(rec)
    return out


def _run(script, tmp_path, records, backend):
    """Write ``records`` as the script's retriever log and run the reader on it (batches of 1)."""
    name, _, log_name, argv = SCRIPTS[script]
    mod = load_script(name)
    log = tmp_path / log_name
    log.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    args = mod.parse_args([*argv(log), "--llm_name", "m", "--batch_size", "1"])
    return run_reader_cli(lambda a: mod.run(a, backend), args)


def _lines(res):
    return [json.loads(x) for x in Path(res["output"]).read_text().splitlines()]


def _keys(lines):
    return [json.dumps(line["sample_key"], sort_keys=True) for line in lines]


def test_sample_key_rule():
    assert sample_key({"index": 4, "source": "hotpotqa", "id": 7}) == {"index": 4}
    assert sample_key({"index": 0, "id": 7}) == {"index": 0}
    assert sample_key({"source": "hotpotqa", "id": 7}) == {"source": "hotpotqa", "id": "7"}
    assert sample_key({"id": 7}) == {"id": "7"}


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("layout", ["source", "index"])
def test_an_id_repeated_across_samples_scores_each(script, layout, tmp_path):
    """A combined set repeats id "x" across two sources (no index), or a record_format 2 log
    holds it at two test-set positions: both samples are scored and counted."""
    a, b = SOURCES[script]
    if layout == "source":
        records = _records(script, ["x", "x", "y"], sources=[a, b, a])
    else:
        records = _records(script, ["x", "x", "y"], sources=[a, a, a], indices=[0, 1, 2])
    backend = Canned()
    res = _run(script, tmp_path, records, backend)
    lines = _lines(res)
    assert len(backend.prompts) == 3 and res["n"] == 3
    assert sorted(_keys(lines)) == sorted(json.dumps(sample_key(r), sort_keys=True) for r in records)


def test_openqa_scores_each_record_with_its_own_benchmark(tmp_path):
    """The metric follows the record, not its id: "x" from HotpotQA and "x" from MuSiQue."""
    records = _records("openqa", ["x", "x"], sources=["hotpotqa", "musique"])
    res = _run("openqa", tmp_path, records, Canned())
    assert sorted(line["benchmark"] for line in _lines(res)) == ["hotpotqa", "musique"]
    assert set(res["by_benchmark"]) == {"hotpotqa", "musique"}


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("layout", ["index", "source"])
def test_a_sample_written_twice_is_read_once(script, layout, tmp_path, capsys):
    """The log holds one sample twice (same index; or, before record_format 2, the same source
    and id): it is scored once and a warning names the file and the count."""
    a = SOURCES[script][0]
    if layout == "index":
        records = _records(script, ["x", "y", "z"], sources=[a, a, a], indices=[0, 1, 0])
    else:
        records = _records(script, ["x", "y", "x"], sources=[a, a, a])
    backend = Canned()
    res = _run(script, tmp_path, records, backend)
    assert len(backend.prompts) == 2 and res["n"] == 2 and len(_lines(res)) == 2
    err = capsys.readouterr().err
    name = SCRIPTS[script][2]
    assert f"{name}: 1 duplicate record(s) dropped" in err and err.count("duplicate record") == 1


@pytest.mark.parametrize("script", SCRIPTS)
def test_resume_after_a_kill_mid_write(script, tmp_path):
    """A run killed while writing its second line (the first line complete, half of the second
    on disk) resumes: the half line is dropped and exactly the two unscored samples are
    generated, so every sample has one line."""
    a, b = SOURCES[script]
    records = _records(script, ["x", "x", "y"], sources=[a, b, a], indices=[5, 6, 7])
    res = _run(script, tmp_path, records, Canned())
    out = Path(res["output"])
    first, second, _ = out.read_text().splitlines()
    out.write_text(first + "\n" + second[: len(second) // 2])
    backend = Canned()
    res = _run(script, tmp_path, records, backend)
    lines = _lines(res)
    assert len(backend.prompts) == 2 and res["n"] == 3
    assert _keys(lines) == [json.dumps({"index": i}) for i in (5, 6, 7)]


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("layout", ["index", "source"])
def test_an_output_written_before_keys_resumes(script, layout, tmp_path):
    """Output lines of the earlier readers carry no ``sample_key`` (open-QA and LongBench lines
    name the sample by ``id`` only): they are matched to the log's samples, so only the sample
    without a line is generated and all three are counted."""
    a, b = SOURCES[script]
    if layout == "index":
        records = _records(script, ["x", "y", "z"], sources=[a, a, b], indices=[0, 1, 2])
    else:
        records = _records(script, ["x", "y", "z"], sources=[a, a, b])
    res = _run(script, tmp_path, records, Canned())
    out = Path(res["output"])
    old = [{k: v for k, v in line.items() if k != "sample_key"} for line in _lines(res)[:2]]
    out.write_text("".join(json.dumps(line) + "\n" for line in old))
    backend = Canned()
    res = _run(script, tmp_path, records, backend)
    assert len(backend.prompts) == 1 and res["n"] == 3 and len(_lines(res)) == 3
    assert records[2]["question"].strip() in backend.prompts[0][-1]["content"]


@pytest.mark.parametrize("script", ["openqa", "longbench"])
def test_an_old_output_that_cannot_be_matched_stops(script, tmp_path):
    """An id-only output line whose id two samples of the log share cannot be told apart: a
    one-line error says to delete the file or write elsewhere."""
    a, b = SOURCES[script]
    records = _records(script, ["x", "x", "y"], sources=[a, b, a])
    res = _run(script, tmp_path, records, Canned())
    out = Path(res["output"])
    old = [{k: v for k, v in line.items() if k != "sample_key"} for line in _lines(res)]
    out.write_text("".join(json.dumps(line) + "\n" for line in old))
    with pytest.raises(SystemExit) as e:
        _run(script, tmp_path, records, Canned())
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"error: {out}:1: ")
    assert "names 2 samples" in msg and msg.endswith("delete it or choose another --output_file_path")


def test_old_synthetics_lines_name_their_sample_by_their_own_fields(tmp_path):
    """The synthetics reader always copied the whole record into its lines, so an old line names
    its sample exactly even when its id alone is shared (positions 0 and 1 both hold id "x")."""
    records = _records("synthetics", ["x", "x", "y"], indices=[0, 1, 2])
    res = _run("synthetics", tmp_path, records, Canned())
    out = Path(res["output"])
    old = [{k: v for k, v in line.items() if k != "sample_key"} for line in _lines(res)[:2]]
    out.write_text("".join(json.dumps(line) + "\n" for line in old))
    backend = Canned()
    res = _run("synthetics", tmp_path, records, backend)
    assert len(backend.prompts) == 1 and res["n"] == 3


def test_musique_full_answers_are_scored_on_answerable_records_only(tmp_path):
    """StonyBrookNLP/musique's evaluator averages answer EM/F1 over answerable records only; the
    unanswerable contrast is still read and written, and counted apart (docs/SCORING.md)."""
    records = _records("openqa", ["q1", "q2", "q1:unanswerable"], sources=["musique"] * 3, indices=[0, 1, 2])
    for rec, answer in zip(records, ["hallway", "kitchen", "kitchen"]):
        rec["answer"], rec["answer_aliases"] = answer, []
    records[2]["answerable"] = False
    res = _run("openqa", tmp_path, records, Canned())  # answers "hallway" to every question
    assert len(_lines(res)) == 3
    assert res["n"] == 2 and res["n_unanswerable"] == 1
    assert res["F1"] == pytest.approx(0.5) and res["EM"] == pytest.approx(0.5)  # not 1/3 over all three


OUTPUTS = {"synthetics": "m_eval_seed0_ns30.jsonl", "openqa": "eval_seed0_eval_llm.jsonl", "longbench": None}
HOLD = (
    "import sys, time; from pathlib import Path; from prompts_and_metrics.reader_io import output_lock; "
    "output_lock(Path(sys.argv[1]), 'x').acquire(); print('LOCKED', flush=True); time.sleep(300)"
)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_second_reader_on_the_same_output_is_refused(script, tmp_path):
    """One reader per output file (a second one would score every pending sample again and
    interleave its lines): refused at once naming the holder; once the holder is gone (kill -9),
    the same command runs and writes each sample once."""
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import ROOT

    log_name = SCRIPTS[script][2]
    out = tmp_path / (OUTPUTS[script] or f"{Path(log_name).stem}_m.jsonl")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    records = _records(script, ["a", "b", "c"], sources=[SOURCES[script][0]] * 3, indices=[0, 1, 2])
    try:
        assert holder.stdout.readline().strip() == "LOCKED"
        with pytest.raises(SystemExit) as e:
            _run(script, tmp_path, records, Canned())
        msg = str(e.value)
        assert msg.startswith(f"error: reader output {out} is in use by another process (pid {holder.pid} on ")
        flag = "--logdir" if script == "synthetics" else "--output_file_path"
        assert msg.endswith(f"wait for that reader to end, or choose another {flag}")
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert not out.exists()  # the refused reader wrote nothing
    res = _run(script, tmp_path, records, Canned())
    assert Path(res["output"]) == out and len(_lines(res)) == 3
    assert not out.with_name(f".{out.name}.lock").exists()  # released when the reader ended


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_full_disk_stops_the_reader_and_loses_nothing(script, tmp_path, monkeypatch):
    """ENOSPC on the second batch's line: one `error: disk full ...` line, the torn line cut back,
    the first batch kept; the rerun scores only the two missing samples."""
    import errno
    import io

    import runstore as storage

    calls = []

    class FullOnSecondBatch(io.FileIO):
        def write(self, data):
            if calls:
                super().write(bytes(data)[:5])  # part of the line reaches the disk, then it is full
                raise OSError(errno.ENOSPC, "No space left on device")
            calls.append(1)
            return super().write(data)

    monkeypatch.setattr(storage, "_open_for_append", lambda p: FullOnSecondBatch(p, "a"))
    records = _records(script, ["a", "b", "c"], sources=[SOURCES[script][0]] * 3, indices=[0, 1, 2])
    with pytest.raises(SystemExit, match=r"^error: disk full while writing .*Free space on that disk"):
        _run(script, tmp_path, records, Canned())
    monkeypatch.undo()
    out = next(p for p in tmp_path.glob("*.jsonl") if p.name != SCRIPTS[script][2])
    assert len(out.read_text().splitlines()) == 1 and out.read_text().endswith("\n")
    backend = Canned()
    res = _run(script, tmp_path, records, backend)
    assert len(backend.prompts) == 2 and res["n"] == 3 and len(_lines(res)) == 3
