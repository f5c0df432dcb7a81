"""scripts/report_round.py: the post-hoc oracle-stopping rule and the round tables on tiny run folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prompts_and_metrics.metrics import fact_metrics
from tests.conftest import ROOT, load_script


@pytest.mark.parametrize(
    "pred, gold, prefix",
    [
        ([4, 48, 42, 24, 27, 39], [39, 42, 48], [4, 48, 42, 24, 27, 39]),  # last gold at the last step
        ([48, 42, 39, 1, 2, 3], [39, 42, 48], [48, 42, 39]),  # complete after 3 steps
        ([7, 8, 9], [1], [7, 8, 9]),  # never complete: all kept
        ([1, 2], [1], [1]),  # complete at once
        ([1, 2], [], [1, 2]),  # no gold: never stops
    ],
)
def test_oracle_prefix(pred, gold, prefix):
    assert load_script("report_round").oracle_prefix(pred, gold) == prefix


def test_fact_scores_worked_cases():
    """The report scores records with the project's own fact metrics (EM, F1 over index sets)."""
    scores = [fact_metrics(p, g) for p, g in (([1, 2, 3, 4, 5, 6], [1, 2, 3]), ([1, 9], [1, 2]), ([9], [1]))]
    assert [(s["em"], s["f1"]) for s in scores] == [
        (1.0, pytest.approx(2 * 3 / 9)),
        (0.0, pytest.approx(0.5)),
        (0.0, 0.0),
    ]


def _run(folder: Path, curve: list[float], records: dict[str, list[dict]], sidecars: dict | None = None) -> None:
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": 100 * i, "eval/fact_em": em}) + "\n" for i, em in enumerate(curve))
    )
    for name, recs in records.items():
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in recs))
    for name, doc in (sidecars or {}).items():
        (folder / name).write_text(json.dumps(doc))


def _rec(i: int, pred: list[int], gold: list[int], tokens: int = 1000) -> dict:
    return {"index": i, "pred_idx": pred, "sf_idx": gold, "text_len": tokens}


def _row(md: str, start: str) -> list[str]:
    line = next(x for x in md.splitlines() if x.startswith(start))
    return [c.strip() for c in line.strip("|").split("|")]


FULL = [_rec(0, [1, 2, 3, 7, 8, 9], [1, 2, 3], 900), _rec(1, [5, 1, 2, 3, 8, 9], [1, 2, 3], 1100)]
MISS = _rec(0, [1, 2, 7, 8, 9, 10], [1, 2, 3])  # EM 0, F1 2·(1/3)(2/3)/(1/3 + 2/3) = 4/9, never complete
REAL_QA3_TEST = next(  # the shipped real qa3 test file, as data/babilong/babi/MANIFEST.json lists it
    f["sha256"]
    for f in json.loads((ROOT / "data" / "babilong" / "babi" / "MANIFEST.json").read_text())["files"]
    if f["file"] == "en-10k/qa3_three-supporting-facts_test.txt.gz"
)


def test_partial_token_round(tmp_path: Path):
    """A round 4 layout in token mode (files _nt<N>) with runs and lengths missing: every number
    checked against a hand computation, the missing ones are dashes."""
    runs = tmp_path / "runs"
    settings = {"data_sha256": REAL_QA3_TEST, "task": "qa3_three-supporting-facts"}
    sha = {"eval_seed42_nt1000.summary.json": {"settings": settings}}
    _run(
        runs / "t_qrag_s1",
        [0.2, 0.5, 0.7],
        {"eval_seed42_nt1000.jsonl": FULL, "eval_seed42_nt32000.jsonl": [MISS]},
        sha,
    )
    with open(runs / "t_qrag_s1" / "metrics.jsonl", "a") as f:  # the final test row is no validation point
        f.write(json.dumps({"step": 300, "eval/fact_em": 0.1, "eval/split": "test"}) + "\n")
    s2 = [MISS, _rec(1, [1, 2, 3, 7, 8, 9], [1, 2, 3])]
    _run(runs / "t_qrag_s2", [0.1, 0.4], {"eval_seed42_nt1000.jsonl": s2, "eval_seed42_nt32000.jsonl": [MISS]}, sha)
    _run(runs / "t_sft_s1", [0.1], {"eval_seed42_nt1000.jsonl": [MISS, {**MISS, "index": 1}]})
    _run(runs / "g_qa3", [0.3], {"eval_seed42_nt1000.jsonl": [FULL[0], {**MISS, "index": 1}]}, sha)
    _run(
        runs / "f_qa1",
        [1.0],
        {"eval_seed42_nt1000.jsonl": [_rec(0, [4, 5], [4], 700), _rec(1, [4], [], 5000)]},  # 1: no gold
        {"eval_seed42_nt1000.jsonl.meta.json": {"data_sha256": "ab" * 32, "task": "qa2_two-supporting-facts"}},
    )
    out = tmp_path / "out"
    res = load_script("report_round").main([str(runs), "--out", str(out)])
    assert res["qa3"] == "t_qrag_s1"

    lengths = (out / "lengths.md").read_text()
    assert "official token budgets" in lengths
    # a run whose evaluations are of another task than its name says is flagged (only that one)
    assert [x for x in lengths.splitlines() if "warning" in x] == [
        "**warning**: qa1 = `f_qa1` holds evaluations of qa2"
    ]
    assert _row(lengths, "| task | metric |") == ["task", "metric", "1K", "4K", "32K", "128K", "1M", "10M"]
    # qa3 = t_qrag_s1: 1K both records complete the gold set (EM 1), fixed-T F1 2·(1/2)·1/(3/2) = 2/3;
    # oracle stop after 3 and 4 steps: F1 1 and 2·(3/4)/(7/4) = 6/7, mean 13/14 = 0.929
    assert _row(lengths, "| qa3 | `t_qrag_s1` |")[2:5] == ["1.000 / 0.929 (2)", "–", "0.000 / 0.444 (1)"]
    assert _row(lengths, "| qa2 | – |")[2:] == ["–"] * 6
    assert _row(lengths, "| qa3 | fact EM")[2:] == ["1.000", "–", "0.000", "–", "–", "–"]
    assert _row(lengths, "| qa3 | fact F1 (fixed T)")[2:4] == ["0.667", "–"]
    assert _row(lengths, "| qa3 | fact F1 (oracle stop)")[2:5] == ["0.929", "–", "0.444"]
    assert _row(lengths, "| qa3 | samples")[2:5] == ["2", "–", "1"]
    assert _row(lengths, "| qa3 | measured encoder tokens")[2] == "1.0K"
    assert _row(lengths, "| qa3 | test data sha256")[2:5] == [REAL_QA3_TEST[:12], "–", "–"]
    assert "en-10k/qa3_three-supporting-facts_test.txt.gz" in lengths  # named from the shipped manifest
    assert _row(lengths, "| qa1 | fact F1 (oracle stop)")[2] == "1.000"  # [4, 5] stops after [4]
    # a record without gold facts is unscored (the evaluation's own rule), not EM 1
    assert _row(lengths, "| qa1 | samples")[2] == "1" and _row(lengths, "| qa1 | measured encoder tokens")[2] == "0.7K"
    assert _row(lengths, "| qa1 | fact F1 (fixed T)")[2] == "0.667"
    assert _row(lengths, "| qa1 | test data sha256")[2] == "ab" * 6  # from the .meta.json
    assert set(_row(lengths, "| qa2 | fact EM")[2:]) == {"–"}  # no f_qa2 run

    t3 = (out / "table3.md").read_text()
    oracle = t3.split("**fact F1 × 100, fixed budget T**")[0]
    head = _row(oracle, "| method |")
    assert head[2:4] == ["1K", "32K"] and head[-1] == "paper, same lengths"
    q = _row(oracle, "| Q-RAG |")
    # s1 (13/14, above); s2: [4/9, 1] -> 13/18; mean 82.5, population std 10.3
    assert q[1] == "t_qrag_s1, t_qrag_s2"
    assert q[2] == "82.5 ± 10.3 [92.9, 72.2] (2)"
    assert q[3] == "44.4 ± 0.0 [44.4, 44.4] (1)"
    assert q[4] == "97.8 / 97.1"
    assert _row(oracle, "| SFT |")[2:4] == ["44.4 [44.4] (2)", "–"]  # never complete: oracle = fixed
    assert _row(oracle, "| w/o Soft-Q |")[1:4] == ["–", "–", "–"]
    em = t3.split("**fact EM × 100")[1]
    assert _row(em, "| Q-RAG |")[2] == "75.0 ± 25.0 [100.0, 50.0] (2)"
    assert _row(em, "| SFT |")[2] == "0.0 [0.0] (2)"
    assert (
        "Test data: `17795c977100`; no data_sha256 recorded: t_sft_s1 at 1K, t_qrag_s1 at 32K, t_qrag_s2 at 32K" in t3
    )

    gen = (out / "generated.md").read_text()
    assert _row(gen, "| g_qa3* fact EM")[1:4] == ["0.500 [0.500]", "–", "–"]
    assert _row(gen, "| t_qrag_s* fact EM")[1] == "0.750 ± 0.250 [1.000, 0.500]"
    assert _row(gen, "| g_qa3* − t_qrag mean")[1] == "-0.250"
    assert _row(gen, "| test data sha256")[1] == REAL_QA3_TEST[:12]  # the same real file for both
    assert res["generated_minus_real"] == {load_script("report_round").Length("nt", 1000): pytest.approx(-0.25)}

    curves = (out / "curves.md").read_text()
    assert _row(curves, "| t_qrag_s1 |")[2:5] == ["200", "0.70", "0.47"]
    for png in ("curves.png", "lengths.png", "table3.png"):
        assert (out / png).stat().st_size > 1000


def test_targets(tmp_path: Path):
    """The target lines of lengths.md: qa2 evaluated at 1K-1M (one miss at 1M), qa3 at 1K only."""
    runs = tmp_path / "runs"
    hit, half = [FULL[0], {**FULL[0], "index": 1}], [FULL[0], {**MISS, "index": 1}]
    files = {f"eval_seed42_nt{n}.jsonl": hit for n in (1000, 4000, 32000, 128000)}
    _run(runs / "f_qa2", [1.0], {**files, "eval_seed42_nt1000000.jsonl": half})
    _run(runs / "f_qa1", [1.0], {f"eval_seed42_nt{n}.jsonl": hit for n in (1000, 4000, 32000, 128000, 1000000)})
    _run(runs / "t_qrag_s1", [1.0], {"eval_seed42_nt1000.jsonl": hit})
    out = tmp_path / "out"
    load_script("report_round").main([str(runs), "--out", str(out)])
    md = (out / "lengths.md").read_text().split("Targets of the real-bAbI reproduction")[1]
    assert _row(md, "| qa1 | yes") == ["qa1", "yes (min 1.000 at 1K)", "yes (+0.000)", ""]
    assert _row(md, "| qa2 | NO") == ["qa2", "NO (min 0.500 at 1M)", "NO (+0.500)", ""]
    assert _row(md, "| qa3 | –") == ["qa3", "– (no 4K, 32K, 128K, 1M)", "– (no 1M)", "– (no 32K, 1M)"]
    assert _row(md, "| qa4 | –")[1] == "– (no 1K, 4K, 32K, 128K, 1M)"


def test_sentence_mode_round_and_oracle_check(tmp_path: Path):
    """Files of the reference's sentence unit (_ns<N>) keep working, labelled with their sentence
    count; an oracle-stopped evaluation file checks the post-hoc rule."""
    runs = tmp_path / "runs"
    _run(
        runs / "s_D",
        [0.2, 0.5, 0.7],
        {
            "eval_seed42_ns50.jsonl": FULL,
            "eval_seed42_ns50_oracle.jsonl": [_rec(0, [1, 2, 3], [1, 2, 3]), _rec(1, [5, 1, 2, 3], [1, 2, 3])],
        },
    )
    _run(runs / "t_qrag_s2", [0.1, 0.4], {"eval_seed42_ns50.jsonl": [MISS, {**MISS, "index": 1}]})
    _run(runs / "f_qa1", [1.0], {"eval_seed42_ns50.jsonl": [_rec(0, [4, 5], [4], 1600)]})
    out = tmp_path / "out"
    res = load_script("report_round").main([str(runs), "--out", str(out)])
    assert res["qa3"] == "s_D"
    assert res["oracle_check"][0]["post_hoc"] == pytest.approx(res["oracle_check"][0]["oracle_eval"])
    assert res["oracle_check"][0]["post_hoc"] == pytest.approx((1.0 + 6 / 7) / 2)
    lengths = (out / "lengths.md").read_text()
    assert _row(lengths, "| task | metric |")[2:] == ["1K≈ (50 sent.)"]
    assert (
        _row(lengths, "| qa1 | fact EM")[2] == "1.000" and _row(lengths, "| qa1 | measured encoder tokens")[2] == "1.6K"
    )
    assert "sentences as the reference did" in lengths
    q = _row((out / "table3.md").read_text(), "| Q-RAG |")
    assert q[1] == "s_D, t_qrag_s2" and q[2] == "68.7 ± 24.2 [92.9, 44.4] (2)"  # (13/14 + 4/9) / 2


def test_half_written_last_line_and_malformed_line(tmp_path: Path):
    m = load_script("report_round")
    runs = tmp_path / "runs"
    _run(runs / "f_qa1", [1.0], {"eval_seed42_nt1000.jsonl": [_rec(0, [4], [4])]})
    path = runs / "f_qa1" / "eval_seed42_nt1000.jsonl"
    with open(path, "a") as f:
        f.write('{"index": 1, "pred_')  # a run killed mid-write
    m.main([str(runs), "--out", str(tmp_path / "a")])
    assert _row((tmp_path / "a" / "lengths.md").read_text(), "| qa1 | samples")[2] == "1"
    path.write_text('{"index": 0}\nnot json\n' + json.dumps(_rec(1, [4], [4])) + "\n")
    with pytest.raises(SystemExit, match=r"eval_seed42_nt1000.jsonl:2: not valid JSON"):
        m.main([str(runs), "--out", str(tmp_path / "b")])


def test_decoy_pick_up():
    from envs.data.babi import BabiSample

    facts = [
        "Sandra went to the kitchen.",
        "Sandra picked up the milk there.",
        "Sandra moved to the garden.",
        "Sandra dropped the milk.",
        "John went to the garden.",
        "John got the milk there.",
    ]
    q = "Where was the milk before the garden? "
    m = load_script("report_round")
    decoy = BabiSample(facts=facts, question=q, answer="kitchen", references_idx=[0, 1, 2])
    assert m.has_decoy(decoy)  # John's later pick-up (5) is not the asked transition's (1)
    clean = BabiSample(facts=facts[:5], question=q, answer="kitchen", references_idx=[0, 1, 2])
    assert not m.has_decoy(clean)
    other = BabiSample(
        facts=facts[:5] + ["John got the apple there."], question=q, answer="kitchen", references_idx=[0, 1, 2]
    )
    assert not m.has_decoy(other)  # another object's pick-up is no decoy
    assert list(m.decoy_flags([decoy]).values()) == [True]
    assert m.decoy_flags([decoy, clean]) == {}  # one key, both answers: ambiguous, left out


def test_pack_round_then_make_results(tmp_path: Path):
    """scripts/pack_round.py copies exactly the raw files (records plain, gzipped ones unpacked, the
    same bytes every time, a half-written last record dropped); scripts/make_results.sh makes the
    tables from them, and they equal the tables made from the unpacked run folders."""
    import gzip
    import hashlib
    import os
    import subprocess
    import sys
    import tarfile

    raw = tmp_path / "raw"
    _run(raw / "t_qrag_s1", [0.2, 0.6], {"eval_seed42_nt1000.jsonl": FULL}, {"eval_seed42_nt1000.summary.json": {}})
    run = raw / "t_qrag_s1"
    for name in ("config.yaml", "summary.json", "eval_seed42_nt1000.jsonl.meta.json", "model_best.pt"):
        (run / name).write_text("x: 1\n" if name.endswith("yaml") else "{}")
    (run / "eval_seed42_nt4000.rank0.jsonl").write_text(json.dumps(MISS) + "\n")  # an interrupted shard
    (run / "tb_logs").mkdir()
    with open(run / "eval_seed42_nt1000.jsonl", "a") as f:
        f.write('{"index": 2, "pred')
    (run / "eval_seed42_nt4000.jsonl.gz").write_bytes(gzip.compress((json.dumps(MISS) + "\n").encode()))
    (raw / "logs").mkdir()  # not a run folder
    (raw / "logs" / "eval.log").write_text("log")

    pack = load_script("pack_round")
    results = tmp_path / "experiments"
    dest = results / "round9" / "runs.tar.xz"
    res = pack.main([str(raw), str(dest)])
    assert res["runs"] == 1 and len(res["dropped"]) == 1
    with tarfile.open(dest) as tar:
        assert tar.getnames() == [
            "t_qrag_s1",
            "t_qrag_s1/config.yaml",
            "t_qrag_s1/eval_seed42_nt1000.jsonl",
            "t_qrag_s1/eval_seed42_nt1000.jsonl.meta.json",
            "t_qrag_s1/eval_seed42_nt1000.summary.json",
            "t_qrag_s1/eval_seed42_nt4000.jsonl",
            "t_qrag_s1/metrics.jsonl",
            "t_qrag_s1/summary.json",
        ]
        assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in tar.getmembers()} == {(0, 0, 0, "", "")}
        records = tar.extractfile("t_qrag_s1/eval_seed42_nt1000.jsonl").read()  # type: ignore[union-attr]
        unpacked = tar.extractfile("t_qrag_s1/eval_seed42_nt4000.jsonl").read()  # type: ignore[union-attr]
    assert records.decode() == "".join(json.dumps(r) + "\n" for r in FULL)
    assert unpacked.decode() == json.dumps(MISS) + "\n"  # a gzipped record file is packed plain
    first = dest.read_bytes()
    manifest = json.loads((results / "round9" / "MANIFEST.json").read_text())
    assert manifest["archives"]["runs.tar.xz"] == {"sha256": hashlib.sha256(first).hexdigest(), "bytes": len(first)}
    for f in run.iterdir():
        os.utime(f, (1e9, 1e9))  # other times, the same records
    pack.main([str(raw), str(dest)])
    assert dest.read_bytes() == first  # deterministic: re-packing leaves git nothing to commit
    with pytest.raises(SystemExit, match=r"packed as \.tar\.xz now"):
        pack.main([str(raw), str(results / "round9" / "runs.tgz")])  # the old format is read, not written
    assert not (results / "round9" / "runs.tgz").exists()

    (results / "round8").mkdir()  # a round without raw files is left alone
    env = dict(os.environ, PYTHON=sys.executable, EXPERIMENTS=str(results))
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "make_results.sh")], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "made the reports of 1 round(s)" in out.stdout
    assert sorted(p.name for p in (results / "round8").iterdir()) == []
    load_script("report_round").main([str(raw), "--out", str(tmp_path / "direct")])
    for name in ("lengths.md", "table3.md", "curves.md", "generated.md"):
        assert (results / "round9" / name).read_text() == (tmp_path / "direct" / name).read_text(), name
    assert "| qa3 | fact F1 (oracle stop) | 0.929 |" in (results / "round9" / "lengths.md").read_text()


def test_pack_round_refuses_a_malformed_record(tmp_path: Path):
    raw = tmp_path / "raw"
    _run(raw / "f_qa1", [1.0], {"eval_seed42_nt1000.jsonl": FULL})
    (raw / "f_qa1" / "eval_seed42_nt1000.jsonl").write_text('{"index": 0}\n{oops\n{"index": 1}\n')
    with pytest.raises(SystemExit, match=r"eval_seed42_nt1000.jsonl:2: not valid JSON"):
        load_script("pack_round").main([str(raw), str(tmp_path / "dest")])
    assert not (tmp_path / "dest").exists()  # nothing half-packed


def test_pack_round_refuses_files_git_ignores(tmp_path: Path):
    """Raw files are packed to be committed: a .gitignore that swallows them (the old `runs/`) is an error."""
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text("runs/\n")
    raw = tmp_path / "raw"
    _run(raw / "f_qa1", [1.0], {"eval_seed42_nt1000.jsonl": FULL})
    pack = load_script("pack_round")
    with pytest.raises(SystemExit, match=r"\.gitignore keeps 2 packed file\(s\) out of git"):
        pack.main([str(raw), str(repo / "experiments" / "r" / "runs")])
    (repo / ".gitignore").write_text("/runs/\n")  # root-anchored: experiments/<round>/runs/ is committed
    assert pack.main([str(raw), str(repo / "experiments" / "r" / "runs")])["files"] == 2
    (repo / ".gitignore").write_text("*.xz\n")  # the round's archive, as well
    with pytest.raises(SystemExit, match=r"\.gitignore keeps 1 packed file\(s\) out of git, e.g. .*runs\.tar\.xz"):
        pack.main([str(raw), str(repo / "experiments" / "r" / "runs.tar.xz")])


def test_training_facts_names_each_file_of_a_list(tmp_path: Path):
    report = load_script("report_round")
    real, gen = "babilong/babi/en-10k/qa3_train.txt", "babilong/babi-generated/en-10k/qa3_train.txt"
    one, both = tmp_path / "one", tmp_path / "both"
    for run, facts in ((one, f"/x/data/{real}"), (both, [f"/x/data/{real}", f"/y/data/{gen}"])):
        run.mkdir()
        (run / "config_resolved.yaml").write_text(json.dumps({"envs": {"facts_train_path": facts}}))
    assert report.training_facts(one) == real
    assert report.training_facts(both) == f"{real} + {gen}"


def test_generated_seeds_are_grouped_like_the_table3_methods():
    """g_qa3 alone, or g_qa3_s1, g_qa3_s2, ... as seeds of one row; nothing else joins them."""
    rr = load_script("report_round")
    names = ["g_qa3_s2", "g_qa3_s1", "g_qa3x", "g_mix_qa3_s1", "t_qrag_s1", "g_qa3_s1b"]
    assert rr.generated_runs(dict.fromkeys(names, Path("."))) == ["g_qa3_s1", "g_qa3_s2"]
    assert rr.generated_runs({"g_qa3": Path(".")}) == ["g_qa3"]
