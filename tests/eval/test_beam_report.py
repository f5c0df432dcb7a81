"""experiments/table2/beam_report.py: the path score chosen on validation, then the beam against greedy.

The fixture is a round-12 folder of two runs made of committed records: the CPU path scores of the
untrained encoder (experiments/table2/beam_scores/h_noft) in ``beam_{val,test,ood_musique}/``, and the
greedy records of the same questions from round 5's h_noft (experiments/table2/runs.tar.xz, the CPU
rebuild's greedy picks equal them, beam_scores/README.md). ``w1_hnoft_s1`` holds them whole.
``w1_hnoft_s2`` holds 97 of the 485 validation questions, picked by their per-score fact EM so that the
rule is testable: 8 that `last` and `min` get right and `first` and `sum` miss, the one that only
`last` gets right, and the first 88 on which every score agrees. Over the two runs `last` and `first`
then tie exactly at the top (261/970), `min` is 1/970 below; `first` wins on the first run alone, on
fact F1, on the questions pooled (a run weighted by its question count) and on test. Its test
questions are s1's (the test file holds no per-question paths to subset), its out-of-domain ones the
first 100. Each wrong rule below must change the choice."""

from __future__ import annotations

import gzip
import json
import shutil
import tarfile
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from prompts_and_metrics.metrics import fact_metrics
from tests.conftest import EXPERIMENTS, ROOT, load_script

CPU = EXPERIMENTS / "table2" / "beam_scores" / "h_noft"
BEAM = {"val_train": "beam_val", "test": "beam_test", "ood_musique": "beam_ood_musique"}
STEM = {"val_train": "eval_seed42_beam4x3", "test": "eval_seed42_beam4x3", "ood_musique": "eval_seed42_musique_T4_beam4x3"}  # fmt: skip


@pytest.fixture(scope="module")
def br():
    return load_script("beam_report", "experiments/table2")


def _records(path: Path) -> list[dict]:
    with (gzip.open if path.suffix == ".gz" else open)(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _write_records(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def _subset(src: Path, dest: Path, stem: str, keep: list[int]) -> None:
    """beam_path_scores.py's file and records for the questions at ``keep`` (places in index order),
    its summary recomputed from the kept paths as the script computes it."""
    data = json.loads((src / f"{stem}.path_scores.json").read_text())
    records = sorted(_records(src / f"{stem}.jsonl.gz"), key=lambda r: r["index"])
    kept = [records[i] for i in keep]
    paths = {s: [ps[i] for i in keep] for s, ps in data["paths"].items()}
    scores = {}
    for s, ps in paths.items():
        facts = [fact_metrics(p, r["sf_idx"]) for p, r in zip(ps, kept)]
        scores[s] = {
            "fact_em": float(np.mean([f["em"] for f in facts])),
            "fact_f1": float(np.mean([f["f1"] for f in facts])),
            "differs_from_last": sum(p != q for p, q in zip(ps, paths["last"])),
        }
    dest.mkdir(parents=True)
    out = {"file": data["file"], "n": len(kept), "scores": scores, "paths": paths}
    (dest / f"{stem}.path_scores.json").write_text(json.dumps(out) + "\n")
    _write_records(dest / f"{stem}.jsonl", kept)
    shutil.copy(src / f"{stem}.jsonl.meta.json", dest / f"{stem}.jsonl.meta.json")


def _chosen_questions() -> list[int]:
    """w1_hnoft_s2's validation questions (module docstring), by each score's fact EM per question."""
    data = json.loads((CPU / "val_train" / f"{STEM['val_train']}.path_scores.json").read_text())
    records = sorted(_records(CPU / "val_train" / f"{STEM['val_train']}.jsonl.gz"), key=lambda r: r["index"])
    em = [
        {s: fact_metrics(data["paths"][s][i], r["sf_idx"])["em"] for s in ("last", "sum", "first", "min")}
        for i, r in enumerate(records)
    ]
    pattern = [(e["last"], e["sum"], e["first"], e["min"]) for e in em]
    last_min = [i for i, p in enumerate(pattern) if p == (1, 0, 0, 1)][:8]
    last_only = [i for i, p in enumerate(pattern) if p == (1, 0, 0, 0)]
    agree = [i for i, p in enumerate(pattern) if len(set(p)) == 1][:88]
    assert len(last_min) == 8 and len(last_only) == 1 and len(agree) == 88
    return sorted(last_min + last_only + agree)


def _greedy(tmp: Path) -> Path:
    """Round 5's h_noft run folder (greedy records of the same test questions)."""
    with tarfile.open(EXPERIMENTS / "table2" / "runs.tar.xz") as tar:
        tar.extractall(tmp, filter="data", members=[m for m in tar if m.name.startswith("h_noft/")])
    return tmp / "h_noft"


def _copy_greedy(src: Path, dest: Path, keep_ids: set[str] | None = None) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    records = _records(src)
    _write_records(dest, [r for r in records if keep_ids is None or str(r["id"]) in keep_ids])
    shutil.copy(src.with_name(src.name + ".meta.json"), dest.with_name(dest.name + ".meta.json"))


@pytest.fixture(scope="module")
def fixture(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("beam")
    greedy = _greedy(tmp / "r5")
    runs = tmp / "runs"
    s1, s2 = runs / "w1_hnoft_s1", runs / "w1_hnoft_s2"
    for run in (s1, s2):
        run.mkdir(parents=True)
        shutil.copy(CPU / "config.yaml", run / "config.yaml")
    for src, name in BEAM.items():
        shutil.copytree(CPU / src, s1 / name)
    shutil.copytree(CPU / "test", s2 / "beam_test")
    _subset(CPU / "val_train", s2 / "beam_val", STEM["val_train"], _chosen_questions())
    _subset(CPU / "ood_musique", s2 / "beam_ood_musique", STEM["ood_musique"], list(range(100)))
    ood_ids = {str(r["id"]) for r in _records(s2 / "beam_ood_musique" / f"{STEM['ood_musique']}.jsonl")}
    for run in (s1, s2):
        _copy_greedy(greedy / "eval_seed42.jsonl", run / "eval_seed42.jsonl")
    # s1 as round 12 names it; s2 under round 5's bare name, which the report reads too
    _copy_greedy(greedy / "ood_musique" / "eval_seed42.jsonl", s1 / "ood_musique" / "eval_seed42_musique_T4.jsonl")
    _copy_greedy(greedy / "ood_musique" / "eval_seed42.jsonl", s2 / "ood_musique" / "eval_seed42.jsonl", ood_ids)
    return runs


def _report(br, root: Path):
    runs = br.find_runs(root, dict(zip(br.SPLITS, br.DEFAULT_DIRS.split(","))))
    return br.report(runs), runs


def test_scores_are_the_planners(br):
    beam = pytest.importorskip("rl.eval.beam")
    assert br.SCORES == tuple(beam.PATH_SCORES) and br.SCORES[0] == br.DEFAULT == "last"


def test_choice_ties_go_to_last(br, fixture):
    rep, runs = _report(br, fixture)
    val = {n: r.evals["val"] for n, r in runs.items()}
    mean = {s: sum(e.em(s) for e in val.values()) / 2 for s in br.SCORES}
    assert mean["last"] == mean["first"] == max(mean.values())  # exactly: fractions of questions
    assert mean["last"] - mean["min"] == Fraction(1, 970)
    assert rep["chosen"] == "last"
    assert rep["validation"]["w1_hnoft_s2"]["n"] == 97


def _f1_means(val):
    return {s: np.mean([e.summary[s]["fact_f1"] for e in val.values()]) for s in val[next(iter(val))].summary}


# wrong choice rules, each (the script's module, its own rule, the validation evaluations, the runs) -> score:
# each must pick another score than the right rule's `last` on the fixture
MUTANTS = {
    "fact F1 instead of EM": lambda br, right, val, runs: max(br.SCORES, key=_f1_means(val).get),
    "the first validation run alone": lambda br, right, val, runs: right(dict([next(iter(val.items()))])),
    "questions pooled, not runs": lambda br, right, val, runs: max(
        br.SCORES, key=lambda s: sum(e.em(s) * e.n for e in val.values()) / sum(e.n for e in val.values())
    ),
    "ties to the later score": lambda br, right, val, runs: max(
        reversed(br.SCORES), key=lambda s: sum(e.em(s) for e in val.values())
    ),
    "ties alphabetically": lambda br, right, val, runs: max(
        sorted(br.SCORES), key=lambda s: sum(e.em(s) for e in val.values())
    ),
    "chosen on test": lambda br, right, val, runs: right({n: runs[n].evals["test"] for n in val}),
}


@pytest.mark.parametrize("mutant", MUTANTS)
def test_a_wrong_choice_rule_is_caught(br, fixture, monkeypatch, mutant):
    runs = br.find_runs(fixture, dict(zip(br.SPLITS, br.DEFAULT_DIRS.split(","))))
    right = br.choose
    monkeypatch.setattr(br, "choose", lambda val: MUTANTS[mutant](br, right, val, runs))
    assert br.report(runs)["chosen"] != "last"


def test_tables_pair_beam_and_greedy_on_the_same_questions(br, fixture):
    rep, runs = _report(br, fixture)
    (test,) = rep["splits"]["test"]
    cell = test["pooled"]["last"]
    assert cell["seeds"] == 2 and cell["n"] == 300 and cell["exact"]
    # the committed numbers: beam `last` 0.227 / 0.493, greedy 0.317 / 0.583 (beam_scores/README.md)
    assert cell["em"]["beam"] == pytest.approx(68 / 300) and cell["em"]["greedy"] == pytest.approx(95 / 300)
    assert cell["f1"]["beam"] == pytest.approx(0.49333333) and cell["f1"]["greedy"] == pytest.approx(0.58333333)
    lo, hi = cell["em"]["diff_ci"]
    assert lo <= cell["em"]["diff"] <= hi < 0
    (ood,) = rep["splits"]["ood"]
    cell = ood["pooled"]["last"]
    assert cell["n"] == 100 and cell["seeds"] == 2  # the questions both runs answered
    s1, s2 = runs["w1_hnoft_s1"], runs["w1_hnoft_s2"]
    qs = sorted(s2.evals["ood"].ids)
    both = [[r.evals["ood"].per_question["last"][q][0] - r.greedy["ood"][q][0] for q in qs] for r in (s1, s2)]
    assert cell["em"]["diff"] == pytest.approx(np.mean(both))
    per_run = dict(ood["runs"])
    assert per_run["w1_hnoft_s1"]["last"]["n"] == 200 and per_run["w1_hnoft_s2"]["last"]["n"] == 100
    assert per_run["w1_hnoft_s1"]["last"]["em"]["beam"] == pytest.approx(0.145)
    assert per_run["w1_hnoft_s1"]["last"]["em"]["greedy"] == pytest.approx(0.225)
    assert s2.greedy_files["ood"].name == "eval_seed42.jsonl"  # round 5's bare name
    text = br.markdown(rep, "fixture")
    assert (
        "Chosen: **`last`** (the default; tied with `first`)." in text
        and "2 seeds pooled" in text
        and "1 seed" not in text
    )


def test_an_archive_reads_as_its_folder(br, fixture, tmp_path):
    dest = tmp_path / "runs.tar.xz"
    load_script("pack_round").main([str(fixture), str(dest)])
    out = tmp_path / "beam.md"
    from_archive = br.main([str(dest), "--out", str(out)])
    assert from_archive == br.main([str(fixture)])
    assert out.read_text().startswith("# Plan Q-RAG")


def test_the_committed_cpu_files(br, capsys, monkeypatch):
    """What the report prints on experiments/table2/beam_scores, greedy from round 5's archive: its beam.md."""
    monkeypatch.chdir(ROOT)  # the command of beam_scores/README.md, whose paths the text names
    args = ["experiments/table2/beam_scores", "--dirs", "val_train,test,ood_musique"]
    rep = br.main([*args, "--greedy", "experiments/table2/runs.tar.xz"])
    text = capsys.readouterr().out
    assert text == (CPU.parent / "beam.md").read_text(encoding="utf-8")
    assert rep["chosen"] == "first"
    assert "The choice rests on **one run**." in text and "**1 seed only** (h_noft" in text
    (test,) = rep["splits"]["test"]
    first, last = test["pooled"]["first"], test["pooled"]["last"]
    assert not first["exact"] and first["em"]["beam_ci"] is None and "†" in text  # no paths in the test file
    assert first["em"]["beam"] == pytest.approx(first["em"]["greedy"])  # at T = 2 `first` is greedy
    assert last["exact"] and last["em"]["diff"] == pytest.approx(-27 / 300)
    (ood,) = rep["splits"]["ood"]
    assert ood["pooled"]["first"]["em"]["beam"] == pytest.approx(0.165)
    assert ood["pooled"]["first"]["em"]["greedy"] == pytest.approx(0.225)
    with pytest.raises(br.BeamReportError, match="no greedy records"):
        br.main(args)  # beam_scores holds no greedy records of its own


def test_mismatched_greedy_records_are_refused(br, fixture, tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(fixture / "w1_hnoft_s1", runs / "w1_hnoft_s1")
    greedy = runs / "w1_hnoft_s1" / "ood_musique" / "eval_seed42_musique_T4.jsonl"
    _write_records(greedy, _records(greedy)[:-1])  # a question short
    with pytest.raises(br.BeamReportError, match="not the same questions"):
        _report(br, runs)
    shutil.copy(runs / "w1_hnoft_s1" / "eval_seed42.jsonl.meta.json", greedy.with_name(greedy.name + ".meta.json"))
    with pytest.raises(br.BeamReportError, match="dataset 'musique' vs 'hotpotqa'"):
        _report(br, runs)  # HotpotQA's settings beside MuSiQue's beam file
    greedy.unlink()
    with pytest.raises(br.BeamReportError, match="no greedy records"):
        _report(br, runs)


def _renamed(fixture: Path, dest: Path, names: dict[str, str]) -> Path:
    """A copy of the fixture with some run folders renamed (another setting, the same records)."""
    shutil.copytree(fixture, dest)
    for old, new in names.items():
        (dest / old).rename(dest / new)
    return dest


def test_choose_on_leaves_other_settings_out_of_the_choice(br, fixture, tmp_path):
    """Chosen on s1's validation alone (`first` beats `last` there: .301 against .208), whereas both runs
    tie `last` with `first`; the other run is still listed, marked, and a setting with no run is refused."""
    root = _renamed(fixture, tmp_path / "runs", {"w1_hnoft_s1": "w1_hqrag_s1"})
    runs = br.find_runs(root, dict(zip(br.SPLITS, br.DEFAULT_DIRS.split(","))))
    assert br.report(runs)["chosen"] == "last"
    rep = br.report(runs, choose_on=["hqrag"])
    assert rep["chosen"] == "first" and rep["not_choosing"] == ["w1_hnoft_s2"]
    assert set(rep["validation"]) == {"w1_hqrag_s1", "w1_hnoft_s2"}
    assert rep["validation_mean"]["first"] == rep["validation"]["w1_hqrag_s1"]["first"]
    text = br.markdown(rep, "fixture")
    assert "| w1_hnoft_s2 (not choosing) |" in text and "The choice rests on **one run**." in text
    with pytest.raises(br.BeamReportError, match="no validation run"):
        br.report(runs, choose_on=["mqrag"])


def test_report_table2_writes_it_beside_table2(br, fixture, tmp_path, capsys):
    """What scripts/make_results.sh runs for table2b when pack_round.py's --report adds --beam: the score is
    chosen on the trained settings' runs only."""
    table2 = load_script("report_table2", "experiments/table2")
    root = _renamed(fixture, tmp_path / "runs", {"w1_hnoft_s1": "w1_hqrag_s1", "w1_hnoft_s2": "w1_hqrag_s2"})
    beam = tmp_path / "beam.md"
    assert table2.main([str(root), "--round", "table2b", "--out", str(tmp_path / "t.md"), "--beam", str(beam)]) == 0
    assert "path score `last` chosen on validation" in capsys.readouterr().out
    made = beam.read_text()
    assert "the run folders of experiments/table2b/{rows,curve,noft}_train.txt (committed in" in made
    assert str(root) not in made  # make_results.sh's temporary folder would change the file at every rebuild
    source = made.split(" from ", 1)[1].split(".\n", 1)[0]
    assert made == br.build(root, source=source, choose_on=table2.TRAINED)[1]
    with pytest.raises(SystemExit, match="no validation run"):  # the untrained encoder alone chooses nothing
        table2.main([str(fixture), "--round", "table2b", "--out", str(tmp_path / "u.md"), "--beam", str(beam)])
