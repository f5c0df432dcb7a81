"""Both reader scripts end to end on fixture logs with SmolLM2 (real weights, transformers backend),
plus resume, result accumulation, error messages and the server backend path."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import load_script

eval_llm_openqa = load_script("eval_llm_openqa")
eval_llm_synthetics = load_script("eval_llm_synthetics")

ROOT = Path(__file__).resolve().parents[2]


def synth_args(log, logdir, *extra):
    return eval_llm_synthetics.build_parser().parse_args(
        [
            str(log),
            "--llm_name",
            "smollm2",
            "--babi_task",
            "qa1",
            "--max_tokens",
            "12",
            "--backend",
            "transformers",
            "--logdir",
            str(logdir),
            *extra,
        ]
    )


def test_synthetics_end_to_end_and_resume(tmp_path, fixtures_dir, smollm2_backend):
    log = tmp_path / "eval_seed0_ns30.jsonl"
    shutil.copy(fixtures_dir / "eval_seed0_ns30.jsonl", log)
    res = eval_llm_synthetics.run(synth_args(log, tmp_path, "--chunk_filter", "gt", "--limit", "3"), smollm2_backend)
    out = Path(res["output"])
    assert out.name == "smollm2_eval_seed0_ns30.jsonl"
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 3 and res["n"] == 3 and res["context"] == "30"
    rec = lines[0]
    for k in (
        "prediction",
        "full_model_output",
        "answer_em",
        "answer_acc",
        "answer_acc_fixed",
        "answer_f1",
        "filter_idx",
        "filter_texts",
        "pred_idx",
        "q_values",
        "scoring",
    ):
        assert k in rec
    assert rec["filter_idx"] == sorted(rec["sf_idx"]) and isinstance(rec["prediction"], str)
    # resume: 2 more records, the first 3 are not regenerated
    calls = []

    class Spy:
        def __init__(self, inner):
            self.inner = inner

        def generate(self, batch, *a, **k):
            calls.append(len(batch))
            return self.inner.generate(batch, *a, **k)

    res2 = eval_llm_synthetics.run(
        synth_args(log, tmp_path, "--chunk_filter", "gt", "--limit", "5"), Spy(smollm2_backend)
    )
    assert calls == [2] and res2["n"] == 5
    assert len(out.read_text().splitlines()) == 5
    # a second filter accumulates into the same results file
    res3 = eval_llm_synthetics.run(
        synth_args(log, tmp_path, "--chunk_filter", "qvalue", "--stopping_threshold", "0.5", "--limit", "2"),
        smollm2_backend,
    )
    results = json.loads((tmp_path / "results_smollm2.json").read_text())
    assert set(results["30"]) == {"gt", "qvalue_le0.5"}
    assert results["30"]["gt"]["n"] == 5 and set(results["30"]["gt"]) == {"em", "acc", "acc_fixed", "f1", "n"}
    assert res3["n"] == 2
    # changed reader settings for the same filter are refused
    with pytest.raises(SystemExit, match="already holds"):
        eval_llm_synthetics.run(synth_args(log, tmp_path, "--chunk_filter", "gt", "--max_tokens", "5"), Spy(None))


def test_synthetics_niah_via_server(tmp_path, fixtures_dir, chat_server):
    chat_server.answer_fn = lambda p: (
        "The magic numbers are 1234,5678"
        if "numbers" in p["messages"][-1]["content"].split("Question:")[-1]
        else "The special magic uuid for calm-lake mentioned in the provided text is '4c9f2b7a-1d3e-4f56-8a9b-0c1d2e3f4a5b'."
    )
    log = tmp_path / "eval_seed0_test_4k.jsonl"
    shutil.copy(fixtures_dir / "eval_seed0_test_4k.jsonl", log)
    res = eval_llm_synthetics.main(
        [
            str(log),
            "--llm_name",
            "served/qwen",
            "--babi_task",
            "niah",
            "--backend",
            "server",
            "--api_base_url",
            chat_server.url,
            "--max_tokens",
            "16",
        ]
    )
    assert res["context"] == "test_4k" and res["n"] == 2
    assert res["string_match_all"] == 1.0 and res["f1"] == 1.0 and "acc" not in res
    assert (tmp_path / "qwen_eval_seed0_test_4k.jsonl").is_file()
    assert chat_server.requests[0]["max_tokens"] == 16
    chat_server.mode = "error"
    log2 = tmp_path / "eval_seed1_test_4k.jsonl"
    shutil.copy(log, log2)
    with pytest.raises(Exception, match="failed after"):
        eval_llm_synthetics.main(
            [
                str(log2),
                "--llm_name",
                "q",
                "--babi_task",
                "niah",
                "--backend",
                "server",
                "--api_base_url",
                chat_server.url,
                "--max_retries",
                "0",
            ]
        )


def test_openqa_end_to_end(tmp_path, fixtures_dir, smollm2_backend):
    log = tmp_path / "eval_seed0.jsonl"
    shutil.copy(fixtures_dir / "eval_seed0.jsonl", log)
    args = eval_llm_openqa.build_parser().parse_args(
        [
            "--retriever_logfile",
            str(log),
            "--llm_name",
            "smollm2",
            "--max_tokens",
            "10",
            "--limit",
            "2",
            "--chunk_filter",
            "retrieval_step",
            "--max_retrieval_budget",
            "2",
        ]
    )
    res = eval_llm_openqa.run(args, smollm2_backend)
    out = tmp_path / "eval_seed0_eval_llm.jsonl"
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 2 and res["n"] == 2
    assert rows[0]["filter_idx"] == [5, 2]  # retrieval order kept
    for k in (
        "question",
        "retrieved_chunks_idx",
        "ground_truth_chunks_idx",
        "filter_texts",
        "ground_truth",
        "answer_aliases",
        "prediction",
        "full_model_output",
        "EM",
        "F1",
    ):
        assert k in rows[0]
    summary = json.loads((tmp_path / "eval_seed0_eval_llm.summary.json").read_text())
    assert summary["n"] == 2 and 0.0 <= summary["F1"] <= 1.0


def test_openqa_aliases_via_server(tmp_path, fixtures_dir, chat_server):
    chat_server.answer_fn = lambda p: (
        "Reasoning... Final answer: Melville"
        if "Moby" in p["messages"][-1]["content"]
        else "Final answer: Paris, France"
    )
    out = tmp_path / "o.jsonl"
    res = eval_llm_openqa.main(
        [
            "--retriever_logfile",
            str(fixtures_dir / "eval_seed0.jsonl"),
            "--llm_name",
            "Qwen/Qwen3-4B",
            "--backend",
            "server",
            "--api_base_url",
            chat_server.url,
            "--output_file_path",
            str(out),
            "--no-think",
        ]
    )
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["ms-2"]["EM"] == 1.0 and rows["ms-2"]["prediction"] == "Melville"
    assert rows["hp-0"]["EM"] == 1.0
    assert chat_server.requests[0]["chat_template_kwargs"] == {"enable_thinking": False}
    assert res["n"] == 3
    out2 = tmp_path / "o2.jsonl"
    res2 = eval_llm_openqa.main(
        [
            "--retriever_logfile",
            str(fixtures_dir / "eval_seed0.jsonl"),
            "--llm_name",
            "m",
            "--backend",
            "server",
            "--api_base_url",
            chat_server.url,
            "--output_file_path",
            str(out2),
            "--ignore_answer_aliases",
        ]
    )
    rows2 = {r["id"]: r for r in map(json.loads, out2.read_text().splitlines())}
    assert rows2["ms-2"]["EM"] == 0.0 and "chat_template_kwargs" not in chat_server.requests[-1]
    assert res2["n"] == 3


def test_clear_errors(tmp_path):
    with pytest.raises(SystemExit, match="retriever log not found"):
        eval_llm_synthetics.main([str(tmp_path / "nope.jsonl"), "--babi_task", "qa1"])
    bad = tmp_path / "eval_seed0_ns50.jsonl"
    bad.write_text(
        '{"id": 1, "question": "q", "answer": "a", "sf_idx": [], "pred_idx": [], "sf_texts": [], "pred_texts": []}\n{oops\n'
    )
    with pytest.raises(SystemExit, match=r"eval_seed0_ns50\.jsonl:2"):
        eval_llm_synthetics.main([str(bad), "--babi_task", "qa1"])
    bad.write_text('{"id": 1}\n')
    with pytest.raises(SystemExit, match=r":1: record lacks"):
        eval_llm_openqa.main(["--retriever_logfile", str(bad)])
    with pytest.raises(SystemExit, match="unknown task"):
        eval_llm_synthetics.main([str(bad), "--babi_task", "qa42"])


def test_cli_help_runs():
    for script in ("eval_llm_synthetics.py", "eval_llm_openqa.py"):
        r = subprocess.run([sys.executable, str(ROOT / script), "--help"], capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 0 and "--chunk_filter" in r.stdout


def test_reader_presets():
    a = eval_llm_synthetics.parse_args(["log", "--babi_task", "qa1", "--reader", "ref"])
    assert (a.max_tokens, a.max_model_len) == (32, 2048)
    assert eval_llm_synthetics.parse_args(["log", "--babi_task", "qa1"]).max_tokens == 512
    assert (
        eval_llm_synthetics.parse_args(["log", "--babi_task", "qa1", "--reader", "ref", "--max_tokens", "7"]).max_tokens
        == 7
    )
    o = eval_llm_openqa.parse_args(["--retriever_logfile", "log", "--reader", "ref"])
    assert (o.max_tokens, o.think) == (4000, True)
    assert eval_llm_openqa.parse_args(["--retriever_logfile", "log"]).max_tokens == 8000


def test_backend_flag_defaults_per_script():
    """The backend flags are shared (prompts_and_metrics/reader_loop.py); each script keeps its
    own defaults where they differ."""
    eval_llm_longbench = load_script("eval_llm_longbench")
    for args, want in (
        (eval_llm_synthetics.parse_args(["log", "--babi_task", "qa1"]), (0.9, 2048, 120.0)),
        (eval_llm_openqa.parse_args(["--retriever_logfile", "log"]), (0.95, 32000, 600.0)),
        (eval_llm_longbench.parse_args(["--retriever_logfile", "log"]), (0.9, 32000, 120.0)),
    ):
        assert (args.gpu_util, args.max_model_len, args.timeout_s) == want
        assert (args.backend, args.batch_size, args.dtype, args.trust_remote_code) == ("auto", 64, "auto", False)
