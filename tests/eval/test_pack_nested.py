"""scripts/pack_round.py keeps the evaluation files that evaluations write into a run folder's
sub-folders (an ``output_dir`` below the run: Table 2's ``ood_musique/`` and ``real_test/``, the beam's
``beam_*/``, the NIAH grid's ``niah/<task>/``), and every reader finds them in the packed archive.

The fixture is a round's folder as the lease's ``pack`` call returns it, made of committed records:
Table 2's run folders (experiments/table2/runs.tar.xz, their records cut to 60 questions), two NIAH
runs at 4K and 1M (experiments/niah/runs.tar.xz, whole cells: niah_report.py checks their test files'
sha256), the CPU beam path scores of experiments/table2/beam_scores/h_noft in ``h_noft/beam_{test,val}/``
(as round 12's beam_eval.txt writes them) and four qa3 runs of round 10 for seed_report.py; beside them
what a machine leaves that must not be packed: checkpoints, TensorBoard logs, Hydra's hidden folders,
a part file of an interrupted sharded evaluation and the launchers' logs/."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.conftest import EXPERIMENTS, ROOT, load_script

RUNS = {
    "table2": ("h_gen", "h_noft", "h_qrag_s1", "m_qrag"),
    "niah": ("n_s1", "n_noft"),
    "round10": ("w1_ctrl_s1", "w1_ctrl_s2", "w1_d100_s1", "w1_d100_s2"),
}
BEAM = {"test": "beam_test", "val_train": "beam_val"}  # beam_scores/h_noft's folders -> round 12's names
NIAH_LENGTHS = ("4k", "1m")
ROUND10_KEEP = re.compile(r"^eval_seed42_nt(1000|32000)\.")  # seed_report.py's 1K and 32K, and the runs' own files
# what the lease leaves in a run folder besides the records (scripts/lease.sh pack leaves the first three out too)
LEFTOVERS = (
    "model_best.pt",
    "model_last.pt.tmp.4711",
    "tb_logs/events.out.tfevents.1",
    ".eval_hydra/2025-01-01_00-00-00/.hydra/config.yaml",
    "checkpoints/model_step100.pt",
)
# an evaluation file, as the reports read them: the records (a gzipped one is packed plain) and their sidecars
EVAL_FILE = re.compile(r"^eval_.*\.jsonl(\.gz)?$|\.(summary|meta|testset|path_scores)\.json$")
RUN_OWN = ("config.yaml", "config_resolved.yaml", "metrics.jsonl", "summary.json")


def _cut(path: Path, lines: int) -> None:
    path.write_text("".join(path.read_text(encoding="utf-8").splitlines(keepends=True)[:lines]), encoding="utf-8")


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    """The round's folder: runs/<round> as the lease's pack call returns it."""
    tmp = tmp_path_factory.mktemp("nested")
    out = tmp / "round"
    for rnd, runs in RUNS.items():
        with tarfile.open(EXPERIMENTS / rnd / "runs.tar.xz") as tar:
            tar.extractall(tmp / rnd, filter="data", members=[m for m in tar if m.name.split("/")[0] in runs])
        for run in runs:
            shutil.copytree(tmp / rnd / run, out / run)
    for f in out.glob("h_*/**/eval_*.jsonl"):
        _cut(f, 60)  # Table 2's reader pools over the questions found: 60 of each file are enough
    for f in out.glob("m_qrag/**/eval_*.jsonl"):
        _cut(f, 60)
    for f in out.glob("n_*/niah/*/eval_seed42_test*"):
        if f.name.split(".")[0].removeprefix("eval_seed42_test") not in NIAH_LENGTHS:
            f.unlink()
    for f in out.glob("w1_*/*"):
        if f.name not in RUN_OWN and not ROUND10_KEEP.match(f.name):
            f.unlink()
    for src, name in BEAM.items():
        shutil.copytree(EXPERIMENTS / "table2" / "beam_scores" / "h_noft" / src, out / "h_noft" / name)
    for run in out.iterdir():
        for left in LEFTOVERS:
            (run / left).parent.mkdir(parents=True, exist_ok=True)
            (run / left).write_bytes(b"not a record")
    cell = out / "n_noft" / "niah" / "niah_single_2" / "eval_seed42_test4k.jsonl"
    cell.with_name(cell.name + ".gz").write_bytes(gzip.compress(cell.read_bytes(), mtime=0))
    cell.unlink()  # a gzipped cell: packed plain
    part = out / "n_s1" / "niah" / "niah_single_1" / "eval_seed42_test32k.rank0.jsonl"
    part.write_text('{"index": 0}\n')  # an interrupted sharded evaluation's part file
    (out / "logs" / "niah_eval").mkdir(parents=True)
    (out / "logs" / "niah_eval" / "n_s1_niah_single_1_4k.log").write_text("log\n")
    return out


def _expected(raw: Path) -> set[str]:
    """The archive's files, by an independent reading of the rule: a run's own four files at its top, and
    every evaluation file at any depth outside hidden folders and tb_logs, part files excepted."""
    out = set()
    for f in raw.rglob("*"):
        rel = f.relative_to(raw)
        if not f.is_file() or rel.parts[0] == "logs" or any(p.startswith(".") or p == "tb_logs" for p in rel.parts):
            continue
        if (len(rel.parts) == 2 and f.name in RUN_OWN) or (EVAL_FILE.search(f.name) and ".rank" not in f.name):
            out.add(rel.as_posix().removesuffix(".gz"))
    return out


@pytest.fixture(scope="module")
def packed(raw, tmp_path_factory) -> tuple[Path, Path]:
    """(the round's archive, the archive unpacked)."""
    tmp = tmp_path_factory.mktemp("packed")
    dest = tmp / "experiments" / "r12" / "runs.tar.xz"
    load_script("pack_round").main([str(raw), str(dest)])
    unpacked = tmp / "unpacked"
    with tarfile.open(dest) as tar:
        tar.extractall(unpacked, filter="data")
    return dest, unpacked


def test_the_archive_holds_every_nested_evaluation_file_and_no_checkpoint(raw, packed):
    dest, _ = packed
    with tarfile.open(dest) as tar:
        files = {m.name for m in tar.getmembers() if m.isfile()}
    assert files == _expected(raw)
    for name in (
        "h_gen/real_test/eval_seed42.jsonl",
        "h_qrag_s1/ood_musique/eval_seed42_beam4x3.summary.json",
        "h_noft/beam_val/eval_seed42_beam4x3.jsonl",  # gzipped in the run folder, packed plain
        "h_noft/beam_val/eval_seed42_beam4x3.path_scores.json",
        "n_s1/niah/niah_single_1/eval_seed42_test1m.testset.json",
        "n_noft/niah/niah_single_2/eval_seed42_test4k.jsonl",
    ):
        assert name in files, name
    assert not [n for n in files if re.search(r"\.pt($|\.tmp)|tb_logs|(^|/)\.|\.rank\d|\.gz$|^logs/", n)]
    assert len([n for n in files if n.count("/") >= 3]) == 2 * 8 * len(NIAH_LENGTHS) * 4  # every NIAH cell's 4 files


def test_the_readers_find_the_nested_records_after_a_round_trip(raw, packed):
    dest, unpacked = packed
    table2 = load_script("report_table2", "experiments/table2")
    assert table2.build(unpacked, 42, "table2b") == table2.build(raw, 42, "table2b")
    runs = table2.settings_of(unpacked)
    for setting, names in (("hgen", table2.ROWS[3][2]), ("hqrag", table2.MSQ_GREEDY), ("hqrag", table2.MSQ_BEAM)):
        cell = table2.scores_of(runs, setting, names, 42)  # real_test/ and ood_musique/
        assert cell is not None and cell["n"] == 60, (setting, names)

    niah = load_script("niah_report", "experiments/niah")
    manifest = {e["file"]: e for e in json.loads((ROOT / "data/niah/ruler_gpt2/MANIFEST.json").read_text())["files"]}
    cells = niah.grid(unpacked, list(RUNS["niah"]), 0.5, manifest)
    assert len(cells) == 2 * 8 * len(NIAH_LENGTHS)  # every cell, its .testset.json checked against the manifest
    assert cells == niah.grid(raw, list(RUNS["niah"]), 0.5, manifest)

    for scores in sorted(unpacked.glob("h_noft/beam_*/*.path_scores.json")):  # beam_path_scores.py's files
        data = json.loads(scores.read_text())
        assert data == json.loads((raw / scores.relative_to(unpacked)).read_text())
        records = scores.with_name(scores.name.replace(".path_scores.json", ".jsonl")).read_text().splitlines()
        records = sorted(map(json.loads, records), key=lambda r: r["index"])
        assert len(records) == data["n"]
        for path, rec in zip(data.get("paths", {}).get("last", []), records):
            assert path[: len(rec["pred_idx"])] == rec["pred_idx"]  # the file's picks are the `last` path's

    stop = load_script("stopping_analysis")  # experiments/t_and_stop/cells.txt's globs reach into niah/<task>/
    pattern = ("n_*/niah/*/eval_seed42_test4k.jsonl", "n_*/niah/*/eval_seed42_test4k.jsonl.gz")  # raw: one gzipped
    cells = [stop.Cell(str(src), "niah", "4K", "mixed", str(src), pattern, None) for src in (dest, raw)]
    grid = [stop.NO_STOP, *stop.thresholds_from("0:1:0.1")]
    groups = stop.analyse_cells(cells, ROOT, grid, dest.parent / "stop")
    assert [g["n"] for g in groups] == [{"n_noft": 800, "n_s1": 800}] * 2  # 8 subtasks of 100 samples
    assert {k: v for k, v in groups[0].items() if k not in ("cell", "sha256")} == {
        k: v for k, v in groups[1].items() if k not in ("cell", "sha256")
    }

    seeds = load_script("seed_report")
    args = ["--settings", "ctrl,d100", "--reference", "ctrl", "--lengths", "1K,32K", "--out"]
    seeds.main([str(dest), *args, str(dest.parent / "from_archive")])  # the archive itself, as make_results.sh gives it
    seeds.main([str(raw), *args, str(dest.parent / "from_raw")])
    made = (dest.parent / "from_archive.md").read_text()
    assert made == (dest.parent / "from_raw.md").read_text() and "ctrl" in made


def test_make_results_rebuilds_nested_rounds_from_their_archives(raw, packed, tmp_path):
    """One pack_round.py call per round, with the round's report (--report) in its manifest."""
    pack = load_script("pack_round")
    experiments = tmp_path / "experiments"
    reports = {
        "t2b": "experiments/table2/report_table2.py {runs} --round table2b --out {round}/table2.md",
        "n11": "experiments/niah/niah_report.py {runs} --seeds n_s1 --untrained n_noft --out {round}",
    }
    for rnd, report in reports.items():
        pack.main([str(raw), str(experiments / rnd / "runs.tar.xz"), "--report", report])
        manifest = json.loads((experiments / rnd / "MANIFEST.json").read_text())
        assert manifest["report"] == report.split()
    first = (experiments / "t2b" / "runs.tar.xz").read_bytes()
    assert first == (experiments / "n11" / "runs.tar.xz").read_bytes() == packed[0].read_bytes()  # deterministic
    env = dict(os.environ, PYTHON=sys.executable, EXPERIMENTS=str(experiments))
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "make_results.sh"), *reports],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    table2 = load_script("report_table2", "experiments/table2")
    assert (experiments / "t2b" / "table2.md").read_text() == table2.build(raw, 42, "table2b")
    load_script("niah_report", "experiments/niah").main(
        [str(raw), "--seeds", "n_s1", "--untrained", "n_noft", "--out", str(tmp_path / "direct")]
    )
    for name in ("table1.md", "table1.csv"):
        assert (experiments / "n11" / name).read_text() == (tmp_path / "direct" / name).read_text(), name


def test_report_option(raw, tmp_path):
    """--report sets the manifest's report, replacing one there; without it an existing report stays."""
    pack = load_script("pack_round")
    run = raw / "w1_ctrl_s1"
    one = tmp_path / "one"
    shutil.copytree(run, one / run.name, ignore=shutil.ignore_patterns("eval_seed42_nt32000*", ".*", "*.pt*"))
    dest = tmp_path / "experiments" / "r" / "runs.tar.xz"
    manifest = dest.parent / "MANIFEST.json"
    pack.main([str(one), str(dest)])
    assert json.loads(manifest.read_text())["report"] == pack.REPORT
    pack.main([str(one), str(dest), "--report", "scripts/seed_report.py {runs} --out '{round}/seeds'"])
    data = json.loads(manifest.read_text())
    assert data["report"] == ["scripts/seed_report.py", "{runs}", "--out", "{round}/seeds"]
    assert data["archives"]["runs.tar.xz"]["sha256"] == hashlib.sha256(dest.read_bytes()).hexdigest()
    pack.main([str(one), str(dest)])
    assert json.loads(manifest.read_text())["report"][0] == "scripts/seed_report.py"  # kept
    for bad in ("scripts/seed_report.py --out {round}", "{runs} --out x", "scripts/no_such_report.py {runs}"):
        with pytest.raises(SystemExit):
            pack.main([str(one), str(dest), "--report", bad])
    with pytest.raises(SystemExit):
        pack.main([str(one), str(tmp_path / "folder"), "--report", "scripts/seed_report.py {runs}"])
    assert not (tmp_path / "folder").exists()


def test_repacking_the_committed_niah_round_gives_its_bytes(tmp_path):
    """experiments/niah/runs.tar.xz (niah/<task>/ cells; made by niah_report.py's former --collect) comes
    out of pack_round.py byte for byte, its manifest unchanged: the nested files are the same, in the
    same deterministic archive, and the manifest keeps niah_report.py as the round's report."""
    with tarfile.open(EXPERIMENTS / "niah" / "runs.tar.xz") as tar:
        tar.extractall(tmp_path / "in", filter="data")
    committed = (EXPERIMENTS / "niah" / "MANIFEST.json").read_text()
    (tmp_path / "niah").mkdir()
    (tmp_path / "niah" / "MANIFEST.json").write_text(committed)
    res = load_script("pack_round").main([str(tmp_path / "in"), str(tmp_path / "niah" / "runs.tar.xz")])
    assert res["sha256"] == json.loads(committed)["archives"]["runs.tar.xz"]["sha256"]
    assert (tmp_path / "niah" / "MANIFEST.json").read_text() == committed
