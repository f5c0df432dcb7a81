"""Per-sample scores from eval_retriever.py records (fixed budget and Q-value stopping) and RULER's
effective length (scripts/ruler_effective_length.py, the rule experiments/niah/niah_report.py applies),
and Table 1's seed table, targets and recipe table (niah_report.py), read from packed run folders."""

import json
from pathlib import Path

import pytest

from tests.conftest import load_script

report = load_script("niah_report", "experiments/niah")
ruler = load_script("ruler_effective_length")

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
    s = ruler.score(REC)
    assert s["all"] == 0.0 and s["steps"] == 4
    assert s["f1"] == pytest.approx(2 * 0.75 * 0.75 / 1.5)  # 3 of 4 picks gold, 3 of 4 gold picked
    assert s["smatch"] == 0.75  # RULER's string_match_all on the picked text: 3 of 4 values
    full = {**REC, "pred_idx": [3, 7, 9, 12]}
    assert ruler.score(full)["all"] == 1.0


def test_q_stopping_truncates_before_the_first_low_q_step():
    assert ruler.stop_at(REC["q_values"], None) == 4
    assert ruler.stop_at(REC["q_values"], 0.5) == 2  # step 2's max Q 0.3 <= 0.5: two chunks kept
    assert ruler.stop_at([0.1, 0.9], 0.5) == 2  # step 0 never stops (the rule starts at t > 0)
    assert ruler.stop_at(REC["q_values"], 0.3) == 2  # <= is the rule (eval.stop_q_threshold)
    s = ruler.score(REC, 0.5)
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
    assert ruler.effective_length(cells, ["a", "b"], None, "fixed_all") == "4K"
    assert ruler.effective_length(cells, ["a"], None, "fixed_all") == "16K"


def test_the_report_reads_packed_records_and_refuses_another_test_file(tmp_path):
    """The round's run folders as scripts/pack_round.py packs them (no checkpoints; the grid's
    niah/<task>/ records and their test-file sidecars, the QA reader's files with its paths made
    relative) are what the report reads."""
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
    # a reader's files on the QA records (experiments/niah/README.md): its summary names the records' path
    qa = run / "ruler_qa" / "qa_hotpot"
    qa.mkdir(parents=True)
    (qa / "eval_seed42_test4k_reader_k3.jsonl").write_text("{}\n")
    logfile = str(qa / "eval_seed42_test4k.jsonl")
    (qa / "eval_seed42_test4k_reader_k3.summary.json").write_text(json.dumps({"retriever_logfile": logfile}))
    load_script("pack_round").pack(tmp_path / "runs", tmp_path / "kept", [(str(tmp_path / "runs"), "runs/niah_qa")])
    kept = sorted(str(p.relative_to(tmp_path / "kept")) for p in (tmp_path / "kept").rglob("*") if p.is_file())
    assert not [k for k in kept if k.endswith(".pt")] and "n_s1/niah/niah_multiquery/eval_seed42_test4k.jsonl" in kept
    reader = json.loads(
        (tmp_path / "kept" / "n_s1/ruler_qa/qa_hotpot/eval_seed42_test4k_reader_k3.summary.json").read_text()
    )
    assert reader["retriever_logfile"] == "runs/niah_qa/n_s1/ruler_qa/qa_hotpot/eval_seed42_test4k.jsonl"
    entry = {"file": "niah_multiquery/test4k.jsonl.gz", "samples": 1, "sha256": sha}  # a one-sample file
    cells = report.grid(tmp_path / "kept", ["n_s1"], 0.5, {entry["file"]: entry})
    assert cells[("n_s1", "niah_multiquery", "4k")]["fixed_smatch"] == 75.0
    with pytest.raises(SystemExit, match="manifest"):  # scored on another file than the manifest's
        report.grid(tmp_path / "kept", ["n_s1"], 0.5, {entry["file"]: {**entry, "sha256": "0" * 64}})


def test_a_record_of_n_samples_must_be_of_the_files_first_n(tmp_path):
    """Round 5's 1M records hold 30 samples of a file that now has 100: each is checked against the
    manifest's sha256 of the first 30 (scripts/niah_testsets.py's recorded_sha256); 100 records
    against the whole file's, refused while it is not recorded; any other count is refused, naming
    the record file, its samples and what the manifest has."""
    manifest = {e["file"]: e for e in json.loads((report.testsets.ROOT / "MANIFEST.json").read_text())["files"]}
    name = "niah_multiquery/test1m.jsonl.gz"
    cell = tmp_path / "n_s1" / "niah" / "niah_multiquery"
    cell.mkdir(parents=True)

    def records(n: int, sha: str) -> None:
        (cell / "eval_seed42_test1m.jsonl").write_text((json.dumps(REC) + "\n") * n)
        (cell / "eval_seed42_test1m.testset.json").write_text(json.dumps({"file": name, "sha256": sha}))

    round5 = manifest[name]["prefixes"]["30"]["sha256"]
    records(30, round5)
    assert report.cell(tmp_path / "n_s1", "niah_multiquery", "1m", 0.5, manifest)["n"] == 30
    records(100, "b" * 64)
    with pytest.raises(SystemExit, match="holds 100 samples; .*first 100: not recorded yet"):
        report.cell(tmp_path / "n_s1", "niah_multiquery", "1m", 0.5, manifest)
    recorded = {**manifest, name: {**manifest[name], "sha256": "b" * 64}}  # the lease's --write-manifest
    assert report.cell(tmp_path / "n_s1", "niah_multiquery", "1m", 0.5, recorded)["n"] == 100
    with pytest.raises(SystemExit, match="manifest " + round5):  # 30 records, but of another file
        records(30, "b" * 64)
        report.cell(tmp_path / "n_s1", "niah_multiquery", "1m", 0.5, recorded)
    records(29, round5)
    with pytest.raises(
        SystemExit, match=f"test1m.jsonl holds 29 samples; {name}: .* first 29 samples .first 30: {round5}"
    ):
        report.cell(tmp_path / "n_s1", "niah_multiquery", "1m", 0.5, manifest)


def test_effective_length_names_a_length_only_some_seeds_reached():
    """RULER's rule over seeds: a length below the threshold ends the search; a length evaluated for
    one seed of three (round 5's 1M) counts only with the seeds named."""
    lengths = list(report.ROWS)
    cells = {(n, t, length): {"all": 100.0} for n in ("a", "b") for t in report.COLUMNS for length in lengths[:-1]}
    cells |= {("a", t, lengths[-1]): {"all": 100.0} for t in report.COLUMNS}
    last = report.ROWS[lengths[-1]]
    assert ruler.effective_length(cells, ["a", "b"], None, "all") == f"{last} (a only)"
    cells[("b", "niah_single_1", lengths[1])] = {"all": 0.0}  # mean over 16 cells 93.75: still above
    assert ruler.effective_length(cells, ["a", "b"], None, "all") == f"{last} (a only)"
    assert ruler.effective_length(cells, ["a", "b"], "niah_single_1", "all") == report.ROWS[lengths[0]]


def test_stricter_reading_counts_the_needles_among_the_first_k_picks():
    """k = the sample's number of (distinct) needles; hand-computed on tiny records."""
    one = {**REC, "sf_idx": [7]}  # picks [0, 7, 3, 9]: the needle second
    assert ruler.score(one)["all"] == 1.0 and ruler.score(one)["first_k"] == 0.0
    assert ruler.score({**one, "pred_idx": [7, 0, 3, 9]})["first_k"] == 1.0
    two = {**REC, "sf_idx": [3, 7, 7], "pred_idx": [7, 3, 0, 9]}  # two needles, both in the first two picks
    assert ruler.score(two)["first_k"] == 1.0
    assert ruler.score({**two, "pred_idx": [7, 0, 3, 9]})["first_k"] == 0.0  # the second needle third
    # four needles at T = 4: the strict reading is the lenient one
    assert ruler.score(REC)["first_k"] == 0.0 and ruler.score({**REC, "pred_idx": [12, 9, 3, 7]})["first_k"] == 1.0
    # under Q-value stopping, the first k of the kept picks: one kept, two needles
    assert ruler.score({**two, "q_values": [0.9, 0.2, 0.9, 0.9]}, 0.5)["first_k"] == 0.0


def test_target_lines_name_the_subtasks_met_in_each_reading():
    cells = {
        (n, t, ln): {"fixed_all": 100.0, "fixed_first_k": 100.0}
        for n in ("a", "b")
        for t in report.COLUMNS
        for ln in ("4k", "1m")
    }
    cells[("b", "niah_single_3", "4k")]["fixed_first_k"] = 0.0
    cells[("a", "niah_single_3", "4k")]["fixed_first_k"] = 50.0
    cells[("a", "niah_multiquery", "1m")]["fixed_all"] = 97.0  # 1M's target is 97: met
    cells[("a", "niah_multiquery", "4k")]["fixed_all"] = 98.0  # 4K's is 99: missed
    lenient, strict = report.target_lines(cells, ["a", "b"], "runs")
    assert lenient.endswith("meets it on S1, S2, S3, MK1, MK2, MK3, MV; lowest cell of the others: MQ 98.0 at 4K (a).")
    assert strict.endswith("meets it on S1, S2, MK1, MK2, MK3, MV, MQ; lowest cell of the others: S3 0.0 at 4K (b).")


def test_wilson_lower_bound_against_hand_values():
    """The Wilson score interval's lower end, z = 1.959964 (z² = 3.841459), worked by hand:
    0/n is 0; n/n is n / (n + z²): 100 / 103.841459 = 0.96301, 30 / 33.841459 = 0.88649; k/n from
    (p + z²/2n - z sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n): 28/30 = (0.997357 - 0.109849) / 1.128049
    = 0.78676, 50/100 = (0.519207 - 0.099864) / 1.038415 = 0.40383 (the textbook 0.4038)."""
    assert report.wilson_lower(0, 30) == 0.0 and report.wilson_lower(0, 1) == 0.0
    assert report.wilson_lower(100, 100) == pytest.approx(0.96301, abs=1e-5)  # table1.md's 96.3
    assert report.wilson_lower(30, 30) == pytest.approx(0.88649, abs=1e-5)  # table1.md's 88.6
    assert report.wilson_lower(300, 300) == pytest.approx(300 / 303.841459, abs=1e-6)  # 98.7: three seeds pooled
    assert report.wilson_lower(28, 30) == pytest.approx(0.78676, abs=1e-5)
    assert report.wilson_lower(50, 100) == pytest.approx(0.40383, abs=1e-5)
    for k, n in ((1, 0), (-1, 5), (6, 5)):
        with pytest.raises(ValueError, match=f"{k} successes of {n} samples"):
            report.wilson_lower(k, n)


def wilson_cells(counts: dict[tuple, tuple[int, int]]) -> dict[tuple, dict]:
    """Cells as cell() makes them from (run, task, length) -> (successes, samples), both readings the same."""
    out = {}
    for key, (hits, n) in counts.items():
        share = 100 * hits / n
        out[key] = {"n": n, "fixed_all": share, "fixed_first_k": share, "fixed_all_hits": hits}
        out[key]["fixed_first_k_hits"] = hits
    return out


def test_wilson_table_pools_the_seeds_samples_and_the_check_names_each_seed_under_the_target():
    counts = {(n, t, "4k"): (100, 100) for n in ("a", "b") for t in report.COLUMNS}
    counts |= {("a", t, "1m"): (30, 30) for t in report.COLUMNS}  # 1M evaluated for seed a only
    counts[("a", "niah_multiquery", "4k")] = (98, 100)  # 98 % at 4K: under 99
    counts[("a", "niah_multikey_3", "1m")] = (29, 30)  # 96.7 % at 1M: under 97
    cells = wilson_cells(counts)
    cells[("b", "niah_single_3", "4k")] |= {"fixed_first_k": 0.0, "fixed_first_k_hits": 0}
    lines = report.wilson_table(cells, ["a", "b"], "fixed_all")
    assert lines[0] == "| length | S1 | S2 | S3 | MK1 | MK2 | MK3 | MV | MQ |" and len(lines) == 4
    # pooled, by hand: 200/200 = 200 / 203.841459 = 98.1, 198/200 = 96.4; 29/30 = 83.3, 98/100 = 93.0
    assert lines[2] == "| 4K |" + " 98.1 (200/200) |" * 7 + " 96.4 (198/200) |"
    assert lines[3] == "| 1M (a only) |" + " 88.6 (30/30) |" * 5 + " 83.3 (29/30) |" + " 88.6 (30/30) |" * 2
    lenient, strict = report.seed_target_lines(cells, ["a", "b"], "runs")
    assert lenient == (
        "* runs, lenient (anywhere among the T picks): under the target: MQ 4K a 98.0 (98/100, Wilson 93.0), "
        "MK3 1M a 96.7 (29/30, Wilson 83.3). Lowest Wilson bound of a seed's cell, per length: "
        "4K 93.0 (98/100), 1M 83.3 (29/30)."
    )
    assert strict.startswith("* runs, strict (first k picks): under the target: S3 4K b 0.0 (0/100, Wilson 0.0), ")
    assert strict.endswith("Lowest Wilson bound of a seed's cell, per length: 4K 0.0 (0/100), 1M 83.3 (29/30).")


def test_a_cell_counts_the_samples_that_retrieved_every_needle(tmp_path):
    """cell() keeps the successes beside the share: 28 of 30 round 5-sized 1M records with every needle."""
    manifest = {e["file"]: e for e in json.loads((report.testsets.ROOT / "MANIFEST.json").read_text())["files"]}
    name = "niah_multiquery/test1m.jsonl.gz"
    cell = tmp_path / "n_s1" / "niah" / "niah_multiquery"
    cell.mkdir(parents=True)
    full = {**REC, "pred_idx": [3, 7, 9, 12]}
    (cell / "eval_seed42_test1m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [full] * 28 + [REC] * 2))
    sha = manifest[name]["prefixes"]["30"]["sha256"]
    (cell / "eval_seed42_test1m.testset.json").write_text(json.dumps({"file": name, "sha256": sha}))
    c = report.cell(tmp_path / "n_s1", "niah_multiquery", "1m", 0.5, manifest)
    assert (c["n"], c["fixed_all_hits"], c["fixed_first_k_hits"]) == (30, 28, 28)
    assert c["fixed_all"] == pytest.approx(100 * 28 / 30)
    cells = report.grid(tmp_path, ["n_s1"], 0.5, manifest)
    assert report.wilson_table(cells, ["n_s1"], "fixed_all")[2].endswith("| 78.7 (28/30) |")


def test_app_f_table_reads_the_runs_configs(tmp_path):
    import yaml

    cfg = {
        "max_action_length": 64,
        "batch_size": 12,
        "accumulate_grads": 8,
        "steps_count": 1000,
        "envs_parallel": 16,
        "envs": {"max_steps": 4, "step_size": 10, "positions_processor": "none"},
        "algo": {
            "model": {"name": "facebook/contriever"},
            "optimizer": {"lr": 1.5e-05, "weight_decay": 0.0005, "betas": [0.9, 0.98], "eps": 1.0e-06},
            "scheduler": {"name": "WarmupLinear", "warmup": 1000, "ratio": 0.1},
            "max_grad_norm": 2.0,
            "pqn": {"hyperparams": {"gamma": 0.99, "alpha": 0.05, "Lambda": 0.5, "tau": 0.02}},
        },
    }
    for name, lr, returns in (("a", 1.5e-5, (0.5, 0.9, 0.9)), ("b", 5e-5, (0.5, 0.9, 0.8))):
        (tmp_path / name).mkdir()
        cfg["algo"]["optimizer"]["lr"] = lr
        (tmp_path / name / "config_resolved.yaml").write_text(yaml.safe_dump(cfg))
        evals = [{"step": 100 * i, "eval/return": r} for i, r in enumerate(returns)]
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    rows = {r.split(" | ")[0][2:]: r.split(" | ")[1:] for r in report.app_f_table(tmp_path, ["a", "b"])[2:]}
    assert rows["learning rate"] == ["1.5e-5", "1.5e-05 (a), 5e-05 (b)", "**yes** |"]
    assert rows["weight decay"][1:] == ["0.0005", "no |"] and rows["batch × accumulation"][2] == "no |"
    assert rows["encoder"][2] == "no |" and rows["optimiser steps (planned)"][2] == "– |"
    # a's model_best.pt is its later tied step (200), b's the best one (100); both validated up to 200
    assert rows["steps reached / model_best.pt step (metrics.jsonl)"][1] == "200 / 200 (a), 200 / 100 (b)"


# ---------------------------------------------------------------- RULER's QA columns (--qa)

# a HotpotQA-like record: two gold paragraphs (2, 5); picks 5, 0 (the instruction), 2, 7
QA_REC = {
    "pred_idx": [5, 0, 2, 7],
    "pred_texts": ["Paris is in France.", "Answer the question.", "The Louvre is in Paris.", "Berlin."],
    "sf_idx": [2, 5],
    "answer": "the Louvre",
    "answer_aliases": ["Louvre Museum"],
}


def test_qa_scores_count_the_gold_among_the_first_k_picks():
    """Hand-computed: gold 5 is the first pick, gold 2 the third; the answer is in the third pick's text."""
    assert [report.qa_score(QA_REC, k) for k in (1, 2, 3, 4)] == [
        {"gold": 0.0, "answer": 0.0},
        {"gold": 0.0, "answer": 0.0},
        {"gold": 1.0, "answer": 1.0},
        {"gold": 1.0, "answer": 1.0},
    ]
    only_alias = {**QA_REC, "answer": "Musée", "pred_texts": ["The Louvre Museum.", "x", "y", "z"]}
    assert report.qa_score(only_alias, 1)["answer"] == 1.0  # any answer alias, case-insensitively
    one_gold = {**QA_REC, "sf_idx": [5]}  # SQuAD-like: one gold paragraph, picked first
    assert report.qa_score(one_gold, 1)["gold"] == 1.0


def write_qa_cell(run, task, length, recs, sha, reader=None):
    cell = run / report.QA_DIR / task
    cell.mkdir(parents=True, exist_ok=True)
    stem = cell / f"eval_seed42_test{length}"
    Path(f"{stem}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    Path(f"{stem}.summary.json").write_text(json.dumps({"n": len(recs), "settings": {"data_sha256": sha}}))
    for k, (score, flt) in (reader or {}).items():
        Path(f"{stem}_reader_k{k}.summary.json").write_text(
            json.dumps({"string_match_part": score, "filter": flt, "n": len(recs), "llm_name": "smollm2"})
        )


def test_qa_report_tables_and_their_checks(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    # the second sample's other gold paragraph, and the answer, only in its fourth pick
    late = {**QA_REC, "pred_idx": [5, 0, 7, 2], "pred_texts": [*QA_REC["pred_texts"][:2], "Berlin.", "The Louvre."]}
    hotpot = [QA_REC, late]  # at 3 picks: 1 of 2; at 4: 2 of 2
    squad = [{**QA_REC, "sf_idx": [0]}, {**QA_REC, "sf_idx": [7]}]  # gold at 1 pick: 0 of 2; at 4: 2 of 2
    manifest = {"qa_hotpot/test4k.jsonl.gz": "h" * 64, "qa_squad/test4k.jsonl.gz": "s" * 64}
    write_qa_cell(runs / "n_s1", "qa_hotpot", "4k", hotpot, "h" * 64, {3: (0.5, "retrieval_step3")})
    write_qa_cell(runs / "n_s1", "qa_squad", "4k", squad, "s" * 64)
    c = report.qa_cell(runs / "n_s1", "qa_hotpot", "4k", manifest)
    assert (c["gold_k3"], c["gold_k4"], c["answer_k3"], c["reader_k3"], c["n"]) == (50.0, 100.0, 50.0, 50.0, 2)
    assert "reader_k4" not in c
    c = report.qa_cell(runs / "n_s1", "qa_squad", "4k", manifest)
    assert (c["gold_k1"], c["gold_k4"]) == (0.0, 100.0)
    assert report.qa_cell(runs / "n_s1", "qa_squad", "16k", manifest) is None  # not evaluated
    with pytest.raises(SystemExit, match="evaluated on data sha256 h+, the manifest's qa_hotpot 4k is 0+"):
        report.qa_cell(runs / "n_s1", "qa_hotpot", "4k", {"qa_hotpot/test4k.jsonl.gz": "0" * 64})
    write_qa_cell(runs / "bad", "qa_hotpot", "4k", hotpot, "h" * 64, {3: (0.5, "retrieval_step4")})
    with pytest.raises(SystemExit, match="not the 2 samples' first 3 picks"):  # a reader that read other picks
        report.qa_cell(runs / "bad", "qa_hotpot", "4k", manifest)
    lines = report.qa_table(report.qa_grid(runs, ["n_s1"], manifest), ["n_s1"], "gold")
    assert (
        lines[0]
        == "| length | SH (qa_squad), 1 pick | SH (qa_squad), 4 picks | MH (qa_hotpot), 3 picks | MH (qa_hotpot), 4 picks | paper SH | paper MH |"
    )
    assert lines[2:] == ["| 4K | 0.0 | 100.0 | 50.0 | 100.0 | 62 | 67 |"]  # 16K..1M not evaluated: no rows
    manifest_file = tmp_path / "MANIFEST.json"
    manifest_file.write_text(json.dumps({"files": [{"file": f, "sha256": h} for f, h in manifest.items()]}))
    monkeypatch.setattr(report.testsets, "ROOT", tmp_path)
    assert report.main([str(runs), "--qa", "--seeds", "n_s1", "--untrained", "", "--out", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "table1_qa.md").read_text()
    assert (
        "## Trained (n_s1), mean ± std over seeds: All gold paragraphs among the picks, %: a reader-free UPPER BOUND"
        in md
    )
    assert "## Trained (n_s1), mean ± std over seeds: Reader (smollm2) on the picks" in md
    rows = (tmp_path / "out" / "table1_qa.csv").read_text().splitlines()
    assert rows[0].startswith("run,task,length,n,sha256,gold_k1,gold_k3,gold_k4") and len(rows) == 3
