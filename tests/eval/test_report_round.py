"""scripts/report_round.py: the post-hoc oracle-stopping rule and the round tables on tiny run folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prompts_and_metrics.metrics import fact_metrics
from tests.conftest import load_script


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


def _run(folder: Path, curve: list[float], records: dict[str, list[dict]]) -> None:
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": 100 * i, "eval/fact_em": em}) + "\n" for i, em in enumerate(curve))
    )
    for name, recs in records.items():
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in recs))


def _rec(i: int, pred: list[int], gold: list[int], tokens: int = 1000) -> dict:
    return {"index": i, "pred_idx": pred, "sf_idx": gold, "text_len": tokens}


def test_round_tables(tmp_path: Path):
    runs = tmp_path / "runs"
    full = [_rec(0, [1, 2, 3, 7, 8, 9], [1, 2, 3]), _rec(1, [5, 1, 2, 3, 8, 9], [1, 2, 3])]
    miss = [_rec(0, [1, 2, 7, 8, 9, 10], [1, 2, 3]), _rec(1, [1, 2, 7, 8, 9, 10], [1, 2, 3])]
    _run(
        runs / "s_D",
        [0.2, 0.5, 0.7],
        {
            "eval_seed42_ns50.jsonl": full,
            "eval_seed42_ns50_oracle.jsonl": [_rec(0, [1, 2, 3], [1, 2, 3]), _rec(1, [5, 1, 2, 3], [1, 2, 3])],
        },
    )
    _run(runs / "t_qrag_s2", [0.1, 0.4], {"eval_seed42_ns50.jsonl": miss})
    for name in ("t_nosoftq_s1", "t_notarget_s1", "t_sft_s1", "t_noft"):
        _run(runs / name, [0.1], {"eval_seed42_ns50.jsonl": miss[:1]})
    _run(runs / "f_qa1", [1.0], {"eval_seed42_ns50.jsonl": [_rec(0, [4, 5], [4], 1600)]})
    out = tmp_path / "out"
    res = load_script("report_round").main([str(runs), "--out", str(out), "--babi", str(tmp_path / "none.txt")])
    assert res["oracle_check"][0]["post_hoc"] == pytest.approx(res["oracle_check"][0]["oracle_eval"])
    assert res["oracle_check"][0]["post_hoc"] == pytest.approx((1.0 + 6 / 7) / 2)
    sweep = (out / "sweep.md").read_text()
    assert "| s_D | 200 | 0.70 | 0.47 |" in sweep
    t3 = (out / "table3.md").read_text()
    # every method is scored on the samples all runs hold (index 0 only)
    q = next(line for line in t3.splitlines() if line.startswith("| Q-RAG |"))
    assert "[100.0, 44.4] (1)" in q  # oracle F1: seed 1 stops at step 3; seed 2 never completes: 2·2/(3+6)
    lengths = (out / "lengths.md").read_text()
    assert "| qa1 | fact EM | 1.000 |" in lengths and "| qa1 | measured tokens | 1.6K |" in lengths
    for png in ("sweep.png", "lengths.png", "table3.png"):
        assert (out / png).stat().st_size > 1000


def test_table3_of_a_partial_round(tmp_path: Path):
    """A round that ran only the Q-RAG seeds (round 3 on one card) still gets its Table 3 cells;
    the methods without runs are dashes."""
    runs = tmp_path / "runs"
    recs = [_rec(0, [1, 2, 3, 7, 8, 9], [1, 2, 3])]
    for name in ("t_qrag_s1", "t_qrag_s2"):
        _run(runs / name, [0.1, 0.4], {"eval_seed42_ns50.jsonl": recs, "eval_seed42_ns1200.jsonl": recs})
    out = tmp_path / "out"
    load_script("report_round").main(
        [str(runs), "--out", str(out), "--qa3", "t_qrag_s1", "--babi", str(tmp_path / "x")]
    )
    lines = (out / "table3.md").read_text().splitlines()
    assert lines[2].startswith("| method | 1K (n per seed) | 32K (n per seed) | paper")
    assert next(x for x in lines if x.startswith("| Q-RAG |")).count("[100.0, 100.0] (1)") == 2
    assert next(x for x in lines if x.startswith("| SFT |")).startswith("| SFT | – | – |")


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
