"""eval_retriever's run(cfg): the JSONL/summary contract, resume and staleness protection,
Q-value stopping and the beam planner on the real agent (tiny untrained run, CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl.run.evaluate import EvalError, run

from .conftest import eval_cfg

RECORD_FIELDS = {
    "id",
    "question",
    "answer",
    "sf_idx",
    "pred_idx",
    "q_values",
    "sf_texts",
    "pred_texts",
    "return",
    "text_len",
    "f1",
    "em",
    "precision",
    "recall",
    "steps",
    "num_sentences",
    "num_tokens",
    "split",
    "episode_s",
    "index",
}
SUMMARY_FIELDS = {
    "n",
    "fact_em",
    "fact_f1",
    "return",
    "return_std",
    "mean_text_len",
    "episode_s_mean",
    "max_steps",
    "settings",
}
META_FIELDS = {
    "checkpoint",
    "checkpoint_hash",
    "max_steps",
    "oracle_stop",
    "num_sentences",
    "split",
    "seed",
    "caps",
    "planner",
    "stop_q_threshold",
    "model",
}


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def go(run_dir: Path, out: Path, *overrides: str) -> dict:
    return run(eval_cfg(run_dir, f"output_dir={out}", "envs.num_sentences=12", *overrides))


def test_contract_resume_and_staleness(tiny_run: Path, tmp_path: Path) -> None:
    summary = go(tiny_run, tmp_path, "num_samples=3")
    out = tmp_path / "eval_seed42_ns12.jsonl"
    recs = lines(out)
    assert len(recs) == 3 and RECORD_FIELDS <= set(recs[0])
    assert all(r["steps"] == 2 and len(r["pred_idx"]) == 2 == len(r["q_values"]) for r in recs)  # no oracle stop
    assert all(r["num_sentences"] == 12 for r in recs)
    assert all(r["num_tokens"] > 12 for r in recs)  # the haystack's GPT-2 length (envs.length_tokenizer)
    assert SUMMARY_FIELDS <= set(summary) and summary["n"] == 3
    on_disk = json.loads((tmp_path / "eval_seed42_ns12.summary.json").read_text())
    assert on_disk["n"] == 3 and on_disk["max_steps"] == 2
    meta = json.loads((tmp_path / "eval_seed42_ns12.jsonl.meta.json").read_text())
    assert META_FIELDS <= set(meta) and meta["checkpoint"] == "model_best.pt" and meta["num_sentences"] == 12

    # an interrupted run: half-written last line; resuming truncates it and fills the gap
    with open(out, "a", encoding="utf-8") as f:
        f.write('{"id": 3, "question": "trunc')
    summary = go(tiny_run, tmp_path, "num_samples=5")
    recs = lines(out)
    assert [r["index"] for r in recs] == [0, 1, 2, 3, 4]
    assert len({r["id"] for r in recs}) == 5 and summary["n"] == 5
    # nothing left to do: no duplicates, same aggregate
    again = go(tiny_run, tmp_path, "num_samples=5")
    assert len(lines(out)) == 5 and again["fact_f1"] == summary["fact_f1"]
    # a smaller request summarises only its samples
    assert go(tiny_run, tmp_path, "num_samples=2")["n"] == 2

    # other settings that the name does not carry: refused, file untouched, and the advice keeps
    # the earlier evaluation (overwrite=true would delete it)
    with pytest.raises(EvalError) as e:
        go(tiny_run, tmp_path, "num_samples=5", "++max_state_length=40")
    assert "max_state_length" in str(e.value) and "overwrite=true" not in str(e.value)
    assert str(e.value).endswith(
        "It holds a valid evaluation made with those settings: write this one elsewhere (output_dir=<another "
        "folder>), or delete eval_seed42_ns12.jsonl (and eval_seed42_ns12.jsonl.meta.json) to replace it."
    )
    assert len(lines(out)) == 5
    # another T than the run's: a file of its own
    assert go(tiny_run, tmp_path, "num_samples=1", "envs.max_steps=3")["max_steps"] == 3
    assert len(lines(tmp_path / "eval_seed42_ns12_T3.jsonl")) == 1 and len(lines(out)) == 5
    (tiny_run / "model_best.pt").touch()  # mtime alone is not a new checkpoint
    go(tiny_run, tmp_path, "num_samples=5")
    meta = json.loads((tmp_path / "eval_seed42_ns12.jsonl.meta.json").read_text())
    meta["checkpoint_hash"] = "sha256:other"
    (tmp_path / "eval_seed42_ns12.jsonl.meta.json").write_text(json.dumps(meta))
    with pytest.raises(EvalError, match="(?s)checkpoint_hash.*or pass overwrite=true to evaluate again"):
        go(tiny_run, tmp_path, "num_samples=5")  # a retrained checkpoint: the file is stale
    assert go(tiny_run, tmp_path, "num_samples=1", "overwrite=true")["n"] == 1
    assert len(lines(out)) == 1


def test_file_without_meta_is_refused(tiny_run: Path, tmp_path: Path) -> None:
    (tmp_path / "eval_seed42_ns12.jsonl").write_text('{"id": 0}\n')
    with pytest.raises(EvalError, match="without"):
        go(tiny_run, tmp_path, "num_samples=1")


def test_q_threshold_stopping(tiny_run: Path, tmp_path: Path) -> None:
    high = go(tiny_run, tmp_path, "num_samples=2", "envs.max_steps=3", "eval.stop_q_threshold=1e9")
    recs = lines(tmp_path / "eval_seed42_ns12_T3_qstop1e+09.jsonl")
    assert all(r["steps"] == 1 and len(r["q_values"]) == 1 for r in recs)  # step 0 always taken
    assert high["settings"]["stop_q_threshold"] == 1e9
    go(tiny_run, tmp_path, "num_samples=2", "envs.max_steps=3", "eval.stop_q_threshold=-1e9")
    assert all(r["steps"] == 3 for r in lines(tmp_path / "eval_seed42_ns12_T3_qstop-1e+09.jsonl"))


def test_beam_planner_records(tiny_run: Path, tmp_path: Path) -> None:
    # one sample at a time: states are then encoded alone in both planners, as the beam does
    go(tiny_run, tmp_path, "num_samples=3", "envs.max_steps=3", "eval.group_size=1")
    greedy = lines(tmp_path / "eval_seed42_ns12_T3.jsonl")
    go(
        tiny_run,
        tmp_path,
        "num_samples=3",
        "envs.max_steps=3",
        "eval.group_size=1",
        "eval.planner=beam",
        "eval.beam_width=1",
        "eval.beam_expand=1",
    )
    b11 = lines(tmp_path / "eval_seed42_ns12_T3_beam1x1.jsonl")
    assert [r["pred_idx"] for r in b11] == [r["pred_idx"] for r in greedy]  # width 1 = greedy
    for b, g in zip(b11, greedy):
        assert b["q_values"] == g["q_values"]  # the same scores as greedy, bit for bit
    assert [r["return"] for r in b11] == [r["return"] for r in greedy]
    go(tiny_run, tmp_path, "num_samples=3", "envs.max_steps=3", "eval.planner=beam")
    b43 = lines(tmp_path / "eval_seed42_ns12_T3_beam4x3.jsonl")
    assert set(b43[0]) == set(greedy[0])
    for r in b43:
        assert len(r["pred_idx"]) == 3 == len(set(r["pred_idx"])) == len(r["q_values"])


def test_longbench_eval_env_log_feeds_its_reader(tiny_run: Path, tmp_path: Path) -> None:
    """eval_env=longbench on the fixture subset: one file per subset, null fact metrics (LongBench
    names no gold chunk), and the record carries what LongBench's scorer needs."""
    fix = Path(__file__).resolve().parents[1] / "fixtures" / "longbench"
    summary = run(
        eval_cfg(
            tiny_run,
            f"output_dir={tmp_path}",
            "eval_env=longbench",
            "envs.task=hotpotqa",
            f"+envs.data_path={fix}",
            "+envs.longbench_e=true",
            "num_samples=-1",
        )
    )
    recs = lines(tmp_path / "eval_seed42_lb-hotpotqa_e.jsonl")
    assert summary["n"] == 3 and summary["fact_f1"] is None
    assert all(r["f1"] is None and r["sf_idx"] == [] and len(r["pred_idx"]) == 2 for r in recs)
    by_id = {r["id"]: r for r in recs}
    assert by_id["e3"]["longbench"] == {
        "dataset": "hotpotqa",
        "all_classes": None,
        "length": 9100,
        "input": by_id["e3"]["question"],
    }
    assert by_id["e3"]["answer_aliases"] == ["Dijon, France"] and by_id["e3"]["source"] == "longbench/hotpotqa"
    meta = json.loads((tmp_path / "eval_seed42_lb-hotpotqa_e.jsonl.meta.json").read_text())
    assert meta["dataset"] == "longbench" and meta["task"] == "hotpotqa"


def ruler_niah_file(folder: Path, n: int = 6) -> Path:
    """Current RULER format: ``index`` is the character offset of the first answer (as
    RULER's niah.py writes it), so samples laid out alike share it; the prefix is its own field."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        key, value = f"key-{i}", str(1000000 + i)
        filler = " ".join(["The grass is green. The sky is blue."] * (1 + i % 2))
        text = (
            "Some special magic numbers are hidden within the following text. Make sure to memorize it. "
            f"I will quiz you about the numbers afterwards.\n{filler} One of the special magic numbers for "
            f"{key} is: {value}. Here we go.\nWhat are all the special magic numbers for {key} mentioned in "
            "the provided text?"
        )
        rows.append(
            {
                "index": text.find(value),
                "input": text,
                "outputs": [value],
                "length": 60,
                "answer_prefix": f" The special magic numbers for {key} mentioned in the provided text are",
            }
        )
    assert len({r["index"] for r in rows}) == 2  # two layouts, two offsets for six samples
    path = folder / "test4k.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_ruler_index_repeats_and_no_sample_is_dropped(tiny_run: Path, tmp_path: Path) -> None:
    ruler_niah_file(tmp_path / "niah")
    args = ("eval_env=niah", f"+envs.data_path={tmp_path / 'niah'}", "envs.test_split=test4k", "num_samples=-1")
    out_dir = tmp_path / "out"
    summary = run(eval_cfg(tiny_run, f"output_dir={out_dir}", *args))
    out = out_dir / "eval_seed42_test4k.jsonl"
    recs = lines(out)
    assert summary["n"] == 6 and len(recs) == 6
    assert sorted(r["id"] for r in recs) == list(range(6))  # ids are record positions, not RULER's index
    assert len({r["ruler_index"] for r in recs}) == 2
    assert all(r["question"].startswith("What are all the special magic numbers") for r in recs)
    # an interrupted run resumes by sample position: the three missing samples are added
    out.write_text("".join(json.dumps(r) + "\n" for r in recs[:3]), encoding="utf-8")
    assert run(eval_cfg(tiny_run, f"output_dir={out_dir}", *args))["n"] == 6
    assert sorted(r["index"] for r in lines(out)) == list(range(6))


def test_old_eval_file_is_refused_with_a_message(tiny_run: Path, tmp_path: Path) -> None:
    go(tiny_run, tmp_path, "num_samples=2")
    meta_path = tmp_path / "eval_seed42_ns12.jsonl.meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["record_format"]  # what eval_retriever wrote before records were keyed on position only
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(EvalError, match="older eval_retriever .record format 1, now 2.*overwrite=true"):
        go(tiny_run, tmp_path, "num_samples=3")
    assert len(lines(tmp_path / "eval_seed42_ns12.jsonl")) == 2  # untouched


def test_babilong_token_mode_evaluation(tiny_run: Path, tmp_path: Path) -> None:
    summary = run(
        eval_cfg(tiny_run, f"output_dir={tmp_path}", "num_samples=2", "envs.length_unit=tokens", "envs.num_tokens=800")
    )
    recs = lines(tmp_path / "eval_seed42_nt800.jsonl")
    assert [r["num_tokens"] for r in recs] == [500, 500]  # 800 - 300 reserved, facts included
    assert summary["mean_num_tokens"] == 500 and summary["settings"]["length"]["unit"] == "tokens"
    assert summary["settings"]["num_sentences"] is None  # not sized in sentences


def test_empty_or_unknown_gold_gives_null_fact_metrics_not_em_one() -> None:
    # fact_metrics(∅, ∅) is 1.0 everywhere; a sample with no gold chunks (sf_idx empty, or gold
    # unknown) must be left out of the fact means instead of scoring fact EM 1.0
    from types import SimpleNamespace

    from rl.eval.greedy import _record, summarize

    def rec(**sample):
        s = {"id": 0, "question": "q?", "answer": "a", "chunks": ["c0", "c1"], **sample}
        return _record(SimpleNamespace(sample=s, selected=[], ret=0.0, t=1), [], 10, 0.1)

    empty, unknown, found = rec(sf_idx=[]), rec(sf_idx=[1], sf_known=False), rec(sf_idx=[1])
    assert empty["em"] is None and empty["f1"] is None and unknown["em"] is None
    assert found["em"] == 0.0 and found["recall"] == 0.0
    s = summarize([empty, unknown, found])
    assert s["fact_em"] == 0.0 and s["n_gold_known"] == 1


def test_summary_names_the_checkpoint_it_scored(tiny_run: Path, tmp_path: Path) -> None:
    """The summary records the evaluated checkpoint's step, the validation row written at that step
    (not the last one) and the commit that trained it."""
    import shutil

    import torch

    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run, run_dir)
    state = torch.load(run_dir / "model_best.pt", weights_only=False)
    torch.save({**state, "step": 200, "best": 0.5, "code_version": "abc1234"}, run_dir / "model_best.pt")
    rows = [
        {"step": s, "eval/return": r, "eval/fact_em": e, "eval/fact_f1": f}
        for s, r, e, f in [(100, 0.2, 0.1, 0.3), (200, 0.5, 0.4, 0.6), (300, 0.3, 0.2, 0.5)]
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = go(run_dir, tmp_path / "out", "num_samples=1")
    expected = {
        "file": "model_best.pt",
        "step": 200,
        "validation": {"return": 0.5, "fact_em": 0.4, "fact_f1": 0.6},
        "code_version": "abc1234",
    }
    assert summary["checkpoint"] == expected
    on_disk = json.loads((tmp_path / "out" / "eval_seed42_ns12.summary.json").read_text())
    assert on_disk["checkpoint"] == expected
