"""scripts/niah_report.py: per-sample scores from eval_retriever.py records (fixed budget and Q-value
stopping), the seed table and RULER's effective length."""

import pytest

from tests.conftest import load_script

report = load_script("niah_report")

# an MQ-like record: the instruction sentence (chunk 0) picked first, three of four needles after it
REC = {
    "pred_idx": [0, 7, 3, 9],
    "pred_texts": [
        "Some special magic numbers are hidden within the following text.",
        "One of the special magic numbers for calm-harbor is: 1234567.",
        "One of the special magic numbers for dry-pine is: 7654321.",
        "One of the special magic numbers for old-bell is: 1111111.",
    ],
    "q_values": [0.9, 0.8, 0.3, 0.7],
    "sf_idx": [3, 7, 9, 12],
    "answer": "1234567,7654321,1111111,2222222",
}


def test_fixed_budget_scores():
    s = report.score(REC)
    assert s["all"] == 0.0 and s["steps"] == 4
    assert s["f1"] == pytest.approx(2 * 0.75 * 0.75 / 1.5)  # 3 of 4 picks gold, 3 of 4 gold picked
    assert s["smatch"] == 0.75  # RULER's string_match_all on the picked text: 3 of 4 values
    full = {**REC, "pred_idx": [3, 7, 9, 12]}
    assert report.score(full)["all"] == 1.0


def test_q_stopping_truncates_before_the_first_low_q_step():
    assert report.stop_at(REC["q_values"], None) == 4
    assert report.stop_at(REC["q_values"], 0.5) == 2  # step 2's max Q 0.3 <= 0.5: two chunks kept
    assert report.stop_at([0.1, 0.9], 0.5) == 2  # step 0 never stops (the rule starts at t > 0)
    assert report.stop_at(REC["q_values"], 0.3) == 2  # <= is the rule (eval.stop_q_threshold)
    s = report.score(REC, 0.5)
    assert s["steps"] == 2 and s["smatch"] == 0.25 and s["f1"] == pytest.approx(2 * 0.5 * 0.25 / 0.75)


def test_table_and_effective_length():
    cells = {}
    for n, vals in (("a", (100, 90, 80)), ("b", (100, 80, 70))):
        for length, v in zip(("4k", "16k", "32k"), vals):
            for task in report.COLUMNS:
                cells[(n, task, length)] = {"fixed_all": float(v)}
    lines = report.table(cells, ["a", "b"], "fixed_all", paper=True)
    assert lines[2].startswith("| 4K | 100.0 ± 0.0 |") and lines[2].endswith("| 100.0 ± 0.0 | 100 |")
    assert lines[3].startswith("| 16K | 85.0 ± 7.1 |")
    assert len(lines) == 5  # 128K and 1M were not evaluated: no rows
    # 16K averages 85.0, not above 85.6: the effective length ends at 4K
    assert report.effective_length(cells, ["a", "b"], None, "fixed_all") == "4K"
    assert report.effective_length(cells, ["a"], None, "fixed_all") == "16K"


def test_collect_keeps_no_checkpoint_and_the_report_reads_its_gzipped_records(tmp_path):
    import json
    import tarfile

    run = tmp_path / "runs" / "n_s1"
    cell = run / "niah" / "niah_multiquery"
    cell.mkdir(parents=True)
    for name in ("config.yaml", "metrics.jsonl", "summary.json", "model_best.pt", "model_last.pt"):
        (run / name).write_text("x")
    (cell / "eval_seed42_test4k.jsonl").write_text(json.dumps(REC) + "\n")
    (cell / "eval_seed42_test4k.summary.json").write_text("{}")
    sha = "5209e3c6de9c56ed2efa2b33e69251a7a1b67a2c34a1efc3e1ec6ebb8bd05807"  # the committed MQ 4K file
    (cell / "eval_seed42_test4k.testset.json").write_text(
        json.dumps({"file": "niah_multiquery/test4k.jsonl.gz", "sha256": sha})
    )
    report.collect(tmp_path / "runs", tmp_path / "kept")
    kept = sorted(str(p.relative_to(tmp_path / "kept")) for p in (tmp_path / "kept").rglob("*") if p.is_file())
    assert (
        not [k for k in kept if k.endswith(".pt")] and "n_s1/niah/niah_multiquery/eval_seed42_test4k.jsonl.gz" in kept
    )
    manifest = {"niah_multiquery/test4k.jsonl.gz": sha}
    cells = report.grid(tmp_path / "kept", ["n_s1"], 0.5, manifest)
    assert cells[("n_s1", "niah_multiquery", "4k")]["fixed_smatch"] == 75.0
    with pytest.raises(SystemExit, match="manifest"):  # scored on another file than the manifest's
        report.grid(tmp_path / "kept", ["n_s1"], 0.5, {"niah_multiquery/test4k.jsonl.gz": "0" * 64})
    # as the round's archive: the same files, its sha256 and this report in the manifest beside it
    report.collect(tmp_path / "runs", tmp_path / "round" / "runs.tgz")
    with tarfile.open(tmp_path / "round" / "runs.tgz") as tar:
        assert sorted(m.name for m in tar.getmembers() if m.isfile()) == kept
    entry = json.loads((tmp_path / "round" / "MANIFEST.json").read_text())
    assert entry["report"] == report.REPORT and len(entry["archives"]["runs.tgz"]["sha256"]) == 64


def test_effective_length_names_a_length_only_some_seeds_reached():
    """RULER's rule over seeds: a length below the threshold ends the search; a length evaluated for
    one seed of three (round 5's 1M) counts only with the seeds named."""
    lengths = list(report.ROWS)
    cells = {(n, t, length): {"all": 100.0} for n in ("a", "b") for t in report.COLUMNS for length in lengths[:-1]}
    cells |= {("a", t, lengths[-1]): {"all": 100.0} for t in report.COLUMNS}
    last = report.ROWS[lengths[-1]]
    assert report.effective_length(cells, ["a", "b"], None, "all") == f"{last} (a only)"
    cells[("b", "niah_single_1", lengths[1])] = {"all": 0.0}  # mean over 16 cells 93.75: still above
    assert report.effective_length(cells, ["a", "b"], None, "all") == f"{last} (a only)"
    assert report.effective_length(cells, ["a", "b"], "niah_single_1", "all") == report.ROWS[lengths[0]]
