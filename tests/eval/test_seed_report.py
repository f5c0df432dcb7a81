"""scripts/seed_report.py: a setting's runs as a distribution over seeds (convergence share, mean ± std,
bootstrap intervals, paired differences), on tiny run folders whose scores are known by hand."""

from __future__ import annotations

import json
import re
import statistics
import sys
import tarfile
from pathlib import Path

import pytest

from tests.conftest import load_script

GOLD = [1, 2]
PERFECT = [1, 2, 7, 8, 9, 10]  # oracle prefix [1, 2]: F1 100
ONE_EXTRA = [1, 7, 2, 8, 9, 10]  # prefix [1, 7, 2]: precision 2/3, F1 80
MISS = [7, 8, 9, 10, 11, 12]  # never complete: F1 0


def make_run(root: Path, name: str, preds: list[list[int]], curve: list[float], ckpt_step: int | None = None) -> None:
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 1\n")
    rows = [{"step": 100 * i, "eval/return": em, "eval/fact_em": em} for i, em in enumerate(curve)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for stem in ("eval_seed42_nt1000", "eval_seed42_nt32000"):
        add_eval(run, stem, preds)
        if ckpt_step is not None:
            summary = {"checkpoint": {"step": ckpt_step, "code_version": "abc1234"}}
            (run / f"{stem}.summary.json").write_text(json.dumps(summary))


def add_eval(run: Path, stem: str, preds: list[list[int]], ids: list[int] | None = None) -> None:
    """One evaluation file; ``ids``, the test question of each record (as the evaluator writes ``id``)."""
    recs = [{"index": i, "pred_idx": p, "sf_idx": GOLD} for i, p in enumerate(preds)]
    for rec, q in zip(recs, ids or [], strict=ids is not None):
        rec["id"] = q
    (run / f"{stem}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


@pytest.fixture()
def rounds(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    # setting "good": per-seed means 100, 90 (two waves pool), 100; its seed 1 repeated (left out of the stats)
    make_run(root, "w1_good_s1", [PERFECT] * 4, [0.1, 0.5, 0.9], ckpt_step=200)
    make_run(root, "w2_good_s2", [PERFECT, PERFECT, ONE_EXTRA, ONE_EXTRA], [0.1, 0.85, 0.9])
    make_run(root, "w1_good_s3", [PERFECT] * 4, [0.1, 0.2, 0.95])
    make_run(root, "w1_good_s1b", [MISS] * 4, [0.1, 0.1, 0.1])
    # setting "base": per-seed means 50, 80
    make_run(root, "w1_base_s1", [PERFECT, PERFECT, MISS, MISS], [0.1, 0.3, 0.6])
    make_run(root, "w1_base_s2", [ONE_EXTRA] * 4, [0.1, 0.2, 0.81])
    return root


def test_statistics_by_hand(rounds: Path) -> None:
    rep = load_script("seed_report").main([str(rounds), "--reference", "base"])
    good, base = rep["settings"]["good"], rep["settings"]["base"]
    assert sorted(good["seeds"]) == ["1", "2", "3"] and list(good["repeats"]) == ["1b"]
    assert [good["seeds"][s]["1K"] for s in ("1", "2", "3")] == [100.0, 90.0, 100.0]
    assert good["1K"]["n"] == 3 and good["1K"]["converged"] == 2  # 90 < 95
    assert good["1K"]["mean"] == pytest.approx(96.67, abs=0.01)
    assert good["1K"]["std"] == pytest.approx(statistics.stdev([100, 90, 100]), abs=0.01)
    lo, hi = good["1K"]["ci95"]
    assert 80.0 <= lo < good["1K"]["mean"] < hi <= 100.0  # seeds and questions resampled: down to all-80 draws
    assert base["1K"]["mean"] == 65.0 and base["1K"]["converged"] == 0
    diff = good["vs_reference"]["1K"]
    assert diff["diff"] == pytest.approx(31.67, abs=0.01) and 0 < diff["ci95"][0] <= diff["diff"] <= diff["ci95"][1]
    assert "vs_reference" not in base
    # the jump (first validation fact EM >= 0.8) and the evaluated checkpoint: the summary's, else the best row
    assert [good["seeds"][s]["jump"] for s in ("1", "2", "3")] == [200, 100, 200]
    assert good["seeds"]["1"]["checkpoint_step"] == 200 and good["seeds"]["1"]["code_version"] == "abc1234"
    assert good["seeds"]["3"]["checkpoint_step"] == 200 and good["repeats"]["1b"]["jump"] is None


@pytest.mark.parametrize("name, mode", [("runs.tar.xz", "w:xz"), ("runs.tgz", "w:gz")])  # the new and the old rounds
def test_archive_gives_the_same_bytes(rounds: Path, tmp_path: Path, name: str, mode: str) -> None:
    archive = tmp_path / name
    with tarfile.open(archive, mode) as tar:
        tar.add(rounds, arcname="wave")
    mod = load_script("seed_report")
    mod.main([str(rounds), "--reference", "base", "--out", str(tmp_path / "a")])
    mod.main([str(archive), "--reference", "base", "--out", str(tmp_path / "b")])
    for ext in (".md", ".json"):
        assert (tmp_path / f"a{ext}").read_bytes() == (tmp_path / f"b{ext}").read_bytes()
    unpacked = tmp_path / "unpacked"  # as scripts/make_results.sh hands it over: wave folders inside
    with tarfile.open(archive) as tar:
        tar.extractall(unpacked / "x", filter="data")
    mod.main([str(unpacked), "--reference", "base", "--out", str(tmp_path / "c")])
    assert (tmp_path / "c.md").read_bytes() == (tmp_path / "a.md").read_bytes()
    text = (tmp_path / "a.md").read_text()
    assert "| good | 3 | 2 of 3 | 96.7 ± 5.8" in text and "good seed 1b: 0.0 / 0.0" in text


def test_refusals(rounds: Path, tmp_path: Path) -> None:
    mod = load_script("seed_report")
    with pytest.raises(mod.ReportError, match="no such setting"):
        mod.main([str(rounds), "--reference", "nope"])
    make_run(tmp_path / "more", "w3_good_s2", [PERFECT], [0.1])
    with pytest.raises(mod.ReportError, match="a second run of setting 'good' seed 2"):
        mod.main([str(rounds), str(tmp_path / "more")])
    with pytest.raises(mod.ReportError, match="neither a folder nor a .tar.xz / .tgz archive"):
        mod.main([str(tmp_path / "missing.tgz")])


def test_learning_check_passes_and_fails(rounds: Path) -> None:
    import subprocess
    import sys

    from tests.conftest import ROOT

    mod = load_script("seed_report")
    assert mod.main([str(rounds), "--reference", "base", "--check", "good"])["check"]["passed"]
    failed = mod.main([str(rounds), "--reference", "good", "--check", "base"])["check"]
    assert not failed["passed"] and "FAIL (1K, 32K)" in failed["line"]
    # the same verdict as the exit status of the command a change's learning check runs
    cmd = [sys.executable, str(ROOT / "scripts" / "seed_report.py"), str(rounds), "--reference", "good"]
    assert subprocess.run([*cmd, "--check", "base"], capture_output=True).returncode == 1
    assert subprocess.run([*cmd[:-1], "base", "--check", "good"], capture_output=True).returncode == 0
    with pytest.raises(mod.ReportError, match="--check needs --reference"):
        mod.main([str(rounds), "--check", "good"])


def test_last_checkpoint_evaluations(rounds: Path, tmp_path: Path) -> None:
    """--last scores the eval_*_last files (model_last.pt) and names the last validation step."""
    import shutil

    for run in rounds.iterdir():
        for stem in ("eval_seed42_nt1000", "eval_seed42_nt32000"):
            shutil.copy(run / f"{stem}.jsonl", run / f"{stem}_last.jsonl")
    (rounds / "w1_base_s1" / "eval_seed42_nt1000_last.jsonl").unlink()
    rep = load_script("seed_report").main([str(rounds), "--last"])
    base = rep["settings"]["base"]
    assert base["seeds"]["1"]["1K"] is None and base["seeds"]["2"]["1K"] == 80.0 and base["1K"]["n"] == 1
    assert base["seeds"]["2"]["checkpoint_step"] == 200
    rows = [
        {"step": s, "eval/return": v, "eval/fact_em": v}
        for s, v in ((0, 0.1), (100, 0.9), (200, 0.5), (300, 0.9), (400, 0.2))
    ]
    (rounds / "w1_base_s2" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    sys.modules["report_round"].read_jsonl.cache_clear()  # the reader caches files by path, for one command's life
    assert (
        load_script("seed_report").main([str(rounds), "--last"])["settings"]["base"]["seeds"]["2"]["checkpoint_step"]
        == 400
    )
    best = load_script("seed_report").main([str(rounds)])["settings"]["base"]["seeds"]["2"]
    assert best["checkpoint_step"] == 300  # the best row; of a tie the later, as training keeps it


def test_default_lengths_keep_the_tables_layout(rounds: Path, tmp_path: Path) -> None:
    """--lengths 1K,32K is the default, in any order, and the committed rounds' layout (their seeds.md
    files are rebuilt byte for byte by tests/eval/test_results_rebuild.py)."""
    mod = load_script("seed_report")
    for i, extra in enumerate(([], ["--lengths", "1K,32K"], ["--lengths", "32K, 1K"])):
        mod.main([str(rounds), "--reference", "base", "--out", str(tmp_path / str(i)), *extra])
    for ext in (".md", ".json"):
        assert (
            (tmp_path / f"0{ext}").read_bytes()
            == (tmp_path / f"1{ext}").read_bytes()
            == (tmp_path / f"2{ext}").read_bytes()
        )
    lines = (tmp_path / "0.md").read_text().splitlines()
    assert lines[0].startswith(
        "Oracle-stop fact F1 x100 of the best validation checkpoint; 4 test questions at 1K, 4 at 32K ("
    )
    assert lines[2:5] == [
        "| setting | seeds | converged | 1K mean ± std [95 % CI] | 32K mean ± std [95 % CI] | jump steps | per seed 1K / 32K |",
        "|---|---|---|---|---|---|---|",
        "| base | 2 | 0 of 2 | 65.0 ± 21.2 [" + lines[4].split("[", 1)[1],
    ]
    assert lines[5].endswith("| 200, 100, 200 | s1 100.0/100.0, s2 90.0/90.0, s3 100.0/100.0 |")
    assert lines[9:11] == ["| setting | 1K | 32K |", "|---|---|---|"] and "seeds)" not in "\n".join(lines)
    assert "- good seed 1b: 0.0 / 0.0 (jump None); the original: 100.0 / 100.0 (jump 200)" in lines


def test_settings_keeps_some_before_the_duplicate_check(rounds: Path, tmp_path: Path) -> None:
    """Two inputs that both hold a setting named "good" still compare on the others."""
    mod = load_script("seed_report")
    other = tmp_path / "other"
    make_run(other, "w1_good_s1", [MISS] * 4, [0.1])  # same name, seed as in `rounds`: a collision
    make_run(other, "w1_new_s1", [ONE_EXTRA] * 4, [0.9])  # 80
    make_run(other, "w1_new_s2", [PERFECT] * 4, [0.9])  # 100
    with pytest.raises(mod.ReportError, match="a second run of setting 'good' seed 1"):
        mod.main([str(rounds), str(other)])
    with pytest.raises(mod.ReportError, match="a second run of setting 'good' seed 1"):
        mod.main([str(rounds), str(other), "--settings", "good,new"])  # the kept setting is still checked
    rep = mod.main([str(rounds), str(other), "--settings", "base, new", "--reference", "base", "--check", "new"])
    assert sorted(rep["settings"]) == ["base", "new"] and rep["check"]["passed"]
    assert rep["settings"]["new"]["1K"]["mean"] == 90.0 and rep["settings"]["base"]["1K"]["mean"] == 65.0
    assert rep["settings"]["new"]["vs_reference"]["1K"]["diff"] == 25.0
    alone = mod.main([str(rounds), "--reference", "base"])["settings"]["base"]
    assert rep["settings"]["base"]["seeds"] == alone["seeds"]  # the filter leaves the kept runs as they were


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--settings", "good,nope,zilch"], "no input holds a run of nope, zilch"),
        (["--settings", "good", "--reference", "base"], "--reference 'base' is not among --settings"),
        (["--settings", "base", "--reference", "base", "--check", "good"], "--check 'good' is not among --settings"),
        (["--settings", " , "], "--settings names no setting"),
        (["--lengths", "1K,2K"], "unknown 2K"),
        (["--same-questions"], "a record without 'id'"),
    ],
)
def test_settings_and_lengths_refusals(rounds: Path, args: list[str], message: str) -> None:
    mod = load_script("seed_report")
    with pytest.raises(mod.ReportError, match=re.escape(message)):
        mod.main([str(rounds), *args])


def test_a_length_only_some_seeds_have(rounds: Path) -> None:
    """1M for good's seeds 1 and 2 and base's seed 1, on partly different questions: the statistics pool
    the seeds evaluated there, over the questions every 1M file holds (0-2), and say how many."""
    stem = "eval_seed42_nt1000000"
    add_eval(rounds / "w1_good_s1", stem, [PERFECT, ONE_EXTRA, PERFECT, ONE_EXTRA])  # q0-2: 100, 80, 100
    add_eval(rounds / "w2_good_s2", stem, [MISS, PERFECT, PERFECT])  # 0, 100, 100
    add_eval(rounds / "w1_base_s1", stem, [PERFECT, MISS, MISS, PERFECT])  # 100, 0, 0
    mod = load_script("seed_report")
    rep = mod.main([str(rounds), "--reference", "base", "--lengths", "1M,1K,32K,4K"])
    assert list(rep["lengths"].items()) == [("1K", 4), ("4K", 0), ("32K", 4), ("1M", 3)]
    good, base = rep["settings"]["good"], rep["settings"]["base"]
    seed_means = [(100 + 80 + 100) / 3, (0 + 100 + 100) / 3]
    assert good["1M"]["n"] == 2 and good["1M"]["mean"] == pytest.approx(statistics.mean(seed_means), abs=0.01)
    assert good["1M"]["std"] == pytest.approx(statistics.stdev(seed_means), abs=0.01) and "converged" not in good["1M"]
    assert [good["seeds"][s]["1M"] for s in ("1", "2", "3")] == [93.33, 66.67, None]
    assert base["1M"] == {"n": 1, "mean": 33.33, "std": None, "ci95": base["1M"]["ci95"]}
    assert good["vs_reference"]["1M"]["diff"] == pytest.approx(80.0 - 100 / 3, abs=0.01)
    assert good["1K"]["mean"] == pytest.approx(96.67, abs=0.01) and good["1K"]["converged"] == 2  # 1K as before
    assert "4K" not in good and "4K" not in good["vs_reference"]
    text = mod.markdown(rep)
    assert "| 80.0 ± 18.9 [" in text and "] (2 seeds) |" in text and "] (1 seed) |" in text
    assert "s3 100.0/-/100.0/-" in text and "(2 vs 1 seeds) |" in text


def test_same_questions_scores_every_length_on_the_shared_ones(tmp_path: Path) -> None:
    """The 1K file holds test questions 0, 1, 2, 4 (a long story dropped, as BabiLong's 1K budget does),
    the 32K file 0-3: the lengths share questions 0-2. The default scores each length on its own four
    (matched by place in the file); --same-questions scores both on 0-2 (matched by test question id)."""
    root = tmp_path / "runs"
    at_1k, at_32k = [0, 1, 2, 4], [0, 1, 2, 3]
    runs = {  # name: (1K preds, 32K preds); shared-question means 1K / 32K in the comments
        "w1_a_s1": ([PERFECT, ONE_EXTRA, PERFECT, MISS], [PERFECT, PERFECT, ONE_EXTRA, MISS]),  # 93.33 / 93.33
        "w1_a_s2": ([PERFECT] * 4, [MISS, PERFECT, PERFECT, PERFECT]),  # 100 / 66.67
        "w1_b_s1": ([ONE_EXTRA] * 4, [ONE_EXTRA, ONE_EXTRA, ONE_EXTRA, PERFECT]),  # 80 / 80
    }
    for name, (short, long) in runs.items():
        make_run(root, name, [PERFECT], [0.9])
        add_eval(root / name, "eval_seed42_nt1000", short, at_1k)
        add_eval(root / name, "eval_seed42_nt32000", long, at_32k)
    mod = load_script("seed_report")
    same = mod.main([str(root), "--reference", "b", "--same-questions", "--out", str(tmp_path / "same")])
    assert same["lengths"] == {"1K": 3, "32K": 3} and same["per_length"] == {"1K": 4, "32K": 4}
    a = same["settings"]["a"]
    assert [a["seeds"][s]["1K"] for s in ("1", "2")] == [93.33, 100.0]
    assert [a["seeds"][s]["32K"] for s in ("1", "2")] == [93.33, 66.67]
    assert a["1K"]["mean"] == pytest.approx((280 / 3 + 100) / 2, abs=0.01)
    assert a["32K"]["mean"] == pytest.approx((280 / 3 + 200 / 3) / 2, abs=0.01)
    assert a["seeds"]["1"]["em_1K"] == 100.0  # fact EM over the same three: the miss (question 4) left out
    assert same["settings"]["b"]["32K"]["mean"] == 80.0
    assert a["vs_reference"]["32K"]["diff"] == 0.0
    assert (
        (tmp_path / "same.md")
        .read_text()
        .startswith(
            "Oracle-stop fact F1 x100 of the best validation checkpoint; the same 3 test questions at 1K and 32K "
            "(--same-questions: those every file at every length holds, by test question id; each length alone "
            "holds 4 at 1K, 4 at 32K). "
        )
    )
    default = mod.main([str(root), "--reference", "b", "--out", str(tmp_path / "default")])
    assert default["lengths"] == {"1K": 4, "32K": 4} and "per_length" not in default
    assert [default["settings"]["a"]["seeds"]["1"][b] for b in ("1K", "32K", "em_1K")] == [70.0, 70.0, 75.0]
    assert default["settings"]["b"]["32K"]["mean"] == 85.0
    assert (
        (tmp_path / "default.md")
        .read_text()
        .startswith(
            "Oracle-stop fact F1 x100 of the best validation checkpoint; 4 test questions at 1K, 4 at 32K "
            "(every file's common ones). "
        )
    )
    with pytest.raises(mod.ReportError, match="no question common to the files at 4K"):
        mod.main([str(root), "--same-questions", "--lengths", "1K,4K"])


def test_eval_seed_reads_its_own_draw(rounds: Path, tmp_path: Path) -> None:
    """--eval-seed 43 reads the eval_seed43_* files (round 10's second 32K draw), here with other scores
    than seed 42's; base seed 1 has no seed-43 file at 32K, which counts as that length not evaluated:
    the report equals the default one over runs whose seed-42 files hold the seed-43 ones' records."""
    import shutil

    draw43 = {  # run: its seed-43 predictions (every question alike) at 1K and 32K; None: no file
        "w1_good_s1": (ONE_EXTRA, ONE_EXTRA),  # 80 / 80
        "w2_good_s2": (PERFECT, MISS),  # 100 / 0
        "w1_good_s3": (ONE_EXTRA, PERFECT),  # 80 / 100
        "w1_good_s1b": (MISS, MISS),
        "w1_base_s1": (MISS, None),  # 0 / -
        "w1_base_s2": (PERFECT, ONE_EXTRA),  # 100 / 80
    }
    as42 = tmp_path / "as42"  # the same records under seed 42's names: what a missing length gives today
    shutil.copytree(rounds, as42)
    for name, preds in draw43.items():
        for length, pred in zip(("nt1000", "nt32000"), preds, strict=True):
            (as42 / name / f"eval_seed42_{length}.jsonl").unlink()
            if pred is not None:
                add_eval(rounds / name, f"eval_seed43_{length}", [pred] * 4)
                add_eval(as42 / name, f"eval_seed42_{length}", [pred] * 4)
    mod = load_script("seed_report")
    reps = {
        label: mod.main([str(rounds), "--reference", "base", "--out", str(tmp_path / label), *extra])
        for label, extra in (("default", []), ("42", ["--eval-seed", "42"]), ("43", ["--eval-seed", "43"]))
    }
    default = reps["default"]
    for ext in (".md", ".json"):  # 42 is the default, and the seed-43 files leave its report as it was
        assert (tmp_path / f"42{ext}").read_bytes() == (tmp_path / f"default{ext}").read_bytes()
    assert "eval_seed" not in default and default["settings"]["good"]["1K"]["mean"] == pytest.approx(96.67, abs=0.01)

    rep43 = reps["43"]
    good, base = rep43["settings"]["good"], rep43["settings"]["base"]
    assert rep43["eval_seed"] == 43
    assert [good["seeds"][s]["1K"] for s in ("1", "2", "3")] == [80.0, 100.0, 80.0]
    assert [good["seeds"][s]["32K"] for s in ("1", "2", "3")] == [80.0, 0.0, 100.0]
    assert base["seeds"]["1"]["32K"] is None and base["32K"]["n"] == 1 and base["32K"]["mean"] == 80.0
    text = (tmp_path / "43.md").read_text()
    assert text.startswith("Oracle-stop fact F1 x100 of the best validation checkpoint, eval seed 43 (eval_seed43_*")
    assert "(3 vs 1 seeds)" in text

    rep_as42 = mod.main([str(as42), "--reference", "base"])
    assert {k: v for k, v in rep43.items() if k != "eval_seed"} == rep_as42
    assert text.split("\n", 1)[1] == mod.markdown(rep_as42).split("\n", 1)[1]  # all but the header line

    for name, (short, _) in draw43.items():  # --last: eval_seed43_*_last
        add_eval(rounds / name, "eval_seed43_nt1000_last", [short] * 4)
    last = mod.main([str(rounds), "--eval-seed", "43", "--last", "--lengths", "1K"])
    assert [last["settings"]["good"]["seeds"][s]["1K"] for s in ("1", "2", "3")] == [80.0, 100.0, 80.0]


def test_sentence_mode_length_reads_ns100(rounds: Path, tmp_path: Path) -> None:
    """S100 is the recipe's training haystacks in sentence mode (experiments/qa3_sparse/): the files
    eval_seed42_ns100 (eval_retriever.py with envs.num_sentences=100), reported after the token budgets, and
    matched with 32K by test question id under --same-questions (sentence mode drops no story)."""
    s100 = {  # run: its S100 predictions; base seed 2 has no S100 file (that length not evaluated there)
        "w1_good_s1": [PERFECT, PERFECT, ONE_EXTRA, ONE_EXTRA],  # 90
        "w2_good_s2": [PERFECT] * 4,  # 100
        "w1_good_s3": [MISS, PERFECT, PERFECT, PERFECT],  # 75
        "w1_good_s1b": [MISS] * 4,
        "w1_base_s1": [ONE_EXTRA] * 4,  # 80
    }
    for name, preds in s100.items():
        add_eval(rounds / name, "eval_seed42_ns100", preds)
    mod = load_script("seed_report")
    assert mod.eval_stem("S100") == "eval_seed42_ns100" and mod.eval_stem("32K", 43) == "eval_seed43_nt32000"
    rep = mod.main([str(rounds), "--reference", "base", "--lengths", "S100,1K", "--out", str(tmp_path / "s100")])
    assert list(rep["lengths"]) == ["1K", "S100"]
    good, base = rep["settings"]["good"], rep["settings"]["base"]
    assert [good["seeds"][s]["S100"] for s in ("1", "2", "3")] == [90.0, 100.0, 75.0]
    assert good["S100"]["mean"] == pytest.approx(265 / 3, abs=0.01) and "converged" not in good["S100"]
    assert base["S100"]["n"] == 1 and base["S100"]["mean"] == 80.0 and base["seeds"]["2"]["S100"] is None
    assert good["vs_reference"]["S100"]["diff"] == pytest.approx(265 / 3 - 80, abs=0.01)
    assert "| S100 mean ± std [95 % CI] |" in (tmp_path / "s100.md").read_text()

    import shutil

    with_ids = tmp_path / "ids"  # a copy: report_round.read_jsonl keeps what it read per path
    shutil.copytree(rounds, with_ids)
    for name in s100:
        for stem in ("eval_seed42_ns100", "eval_seed42_nt32000"):
            recs = (rounds / name / f"{stem}.jsonl").read_text().splitlines()
            add_eval(with_ids / name, stem, [json.loads(r)["pred_idx"] for r in recs], [0, 1, 2, 3])
    same = mod.main([str(with_ids), "--settings", "good", "--lengths", "32K,S100", "--same-questions"])
    assert same["lengths"] == {"32K": 4, "S100": 4} and same["settings"]["good"]["S100"]["mean"] == pytest.approx(
        265 / 3, abs=0.01
    )
