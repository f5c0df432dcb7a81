"""The reader scripts apply the official metrics end to end (through the server backend and a local
fake server): reasoning blocks are not scored, the open-QA benchmark is found per record, the
2Wiki test split is refused, and output files of the first scorer are rescored on load."""

import json
import shutil

import pytest

from .conftest import load_script

eval_llm_openqa = load_script("eval_llm_openqa")
eval_llm_synthetics = load_script("eval_llm_synthetics")


class NoBackend:
    """A backend that must not be called (everything is already in the output file)."""

    def generate(self, *a, **k):
        raise AssertionError("generation was not expected")


def _qa1_log(tmp_path, fixtures_dir, n=2):
    log = tmp_path / "eval_seed0_ns30.jsonl"
    lines = (fixtures_dir / "eval_seed0_ns30.jsonl").read_text().splitlines()[:n]
    log.write_text("\n".join(lines) + "\n")
    return log, [json.loads(x) for x in lines]


def test_synthetics_think_block_is_not_scored(tmp_path, fixtures_dir, chat_server):
    log, recs = _qa1_log(tmp_path, fixtures_dir)
    gold = {r["question"].strip(): r["answer"] for r in recs}
    wrong = {"kitchen": "garden"}.get

    def answer(payload):
        q = payload["messages"][-1]["content"].split("Question:")[-1].strip()
        g = gold[q]
        return f"<think>Maybe the {wrong(g, 'kitchen')}.</think>\n\nThe answer is {g}."

    chat_server.answer_fn = answer
    res = eval_llm_synthetics.main(
        [
            str(log),
            "--llm_name",
            "served/qwen3",
            "--babi_task",
            "qa1",
            "--backend",
            "server",
            "--api_base_url",
            chat_server.url,
            "--think",
        ]
    )
    assert res["acc"] == 1.0 and res["acc_fixed"] == 1.0 and res["n"] == 2
    assert chat_server.requests[0]["chat_template_kwargs"] == {"enable_thinking": True}
    line = json.loads((tmp_path / "qwen3_eval_seed0_ns30.jsonl").read_text().splitlines()[0])
    assert line["full_model_output"].startswith("<think>") and "<think>" not in line["prediction"]
    assert line["scoring"] == 2


def test_synthetics_rescores_first_release_output(tmp_path, fixtures_dir):
    """A file written by the first scorer (robust acc, raw output in ``prediction``) keeps loading:
    its lines are rescored with the official rule, nothing is regenerated."""
    log, recs = _qa1_log(tmp_path, fixtures_dir)
    settings = {"babi_task": "qa1", "max_tokens": 32, "think": False, "llm_name": "m", "extra_question_mark": False}
    g0, g1 = recs[0]["answer"], recs[1]["answer"]
    other = "office" if g1 != "office" else "garden"
    old = [
        # the first scorer cut at the newline and credited this; the official scorer reads both rooms
        {
            **recs[0],
            "prediction": f"{g0}\n{other if other != g0 else 'hallway'}.",
            "answer_em": 0.0,
            "answer_acc": 1.0,
            "answer_f1": 0.67,
            "filter_idx": [],
            "filter_texts": [],
            "filter": "gt",
            "reader_settings": settings,
        },
        {
            **recs[1],
            "prediction": f"<think>{other}</think>{g1}",
            "answer_em": 0.0,
            "answer_acc": 0.0,
            "answer_f1": 0.67,
            "filter_idx": [],
            "filter_texts": [],
            "filter": "gt",
            "reader_settings": settings,
        },
    ]
    out = tmp_path / "m_eval_seed0_ns30.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in old))
    args = eval_llm_synthetics.build_parser().parse_args(
        [str(log), "--llm_name", "m", "--babi_task", "qa1", "--max_tokens", "32", "--chunk_filter", "gt"]
    )
    res = eval_llm_synthetics.run(args, NoBackend())
    assert res["n"] == 2 and res["acc"] == 0.5
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["answer_acc"] for r in lines] == [0.0, 1.0]
    assert all(r["scoring"] == 2 and "answer_acc_fixed" in r for r in lines)
    assert lines[1]["prediction"] == g1 and lines[1]["full_model_output"].startswith("<think>")


def _hotpot_log(tmp_path, records, dataset=None):
    log = tmp_path / "eval_seed0.jsonl"
    base = {"sf_idx": [0], "sf_texts": ["t"], "pred_idx": [0], "pred_texts": ["t"], "q_values": [0.5]}
    log.write_text("".join(json.dumps({**base, **r}) + "\n" for r in records))
    if dataset:
        (tmp_path / "eval_seed0.jsonl.meta.json").write_text(json.dumps({"dataset": dataset}))
    return log


def _openqa(log, server, *extra):
    return eval_llm_openqa.main(
        [
            "--retriever_logfile",
            str(log),
            "--llm_name",
            "m",
            "--backend",
            "server",
            "--api_base_url",
            server.url,
            *extra,
        ]
    )


def test_openqa_official_metric_from_log_meta(tmp_path, chat_server):
    chat_server.answer_fn = lambda p: "Final answer: The answer is yes."
    log = _hotpot_log(tmp_path, [{"id": "a", "question": "Is it?", "answer": "yes"}], dataset="hotpotqa")
    res = _openqa(log, chat_server)
    assert res["F1"] == 0.0 and res["F1_plain"] == pytest.approx(0.5) and res["benchmark"] == "auto"
    row = json.loads((tmp_path / "eval_seed0_eval_llm.jsonl").read_text())
    assert row["benchmark"] == "hotpotqa" and row["scoring"] == 2
    # the same log scored as MuSiQue (explicit flag): SQuAD F1, no F1_plain
    res = _openqa(log, chat_server, "--benchmark", "musique", "--output_file_path", str(tmp_path / "m.jsonl"))
    assert res["F1"] == pytest.approx(0.5) and "F1_plain" not in res


def test_openqa_per_record_sources_and_ruler(tmp_path, chat_server):
    chat_server.answer_fn = lambda p: "<think>Final answer: no</think>It is Paris. Final answer: Paris, France"
    log = _hotpot_log(
        tmp_path,
        [
            {"id": "h", "question": "Capital?", "answer": "Paris", "source": "hotpotqa"},
            {"id": "r", "question": "Capital?", "answer": "Paris", "source": "ruler_qa"},
        ],
    )
    res = _openqa(log, chat_server)
    assert res["by_benchmark"]["ruler_qa"]["string_match_part"] == 1.0
    assert res["by_benchmark"]["hotpotqa"]["F1"] == pytest.approx(2 / 3) and res["n"] == 2
    assert "string_match_part" not in res["by_benchmark"]["hotpotqa"]


def test_openqa_think_block_is_not_scored(tmp_path, chat_server):
    # the reasoning names another answer after its own "Final answer:"; the answer part has none,
    # so only stripping the block leaves "Paris" (unstripped: "Lyon</think> Paris", F1 2/3)
    chat_server.answer_fn = lambda p: "<think>Final answer: Lyon</think>\nParis"
    log = _hotpot_log(tmp_path, [{"id": "a", "question": "Capital?", "answer": "Paris"}], dataset="hotpotqa")
    res = _openqa(log, chat_server)
    assert res["EM"] == 1.0 and res["F1"] == 1.0
    row = json.loads((tmp_path / "eval_seed0_eval_llm.jsonl").read_text())
    assert row["prediction"] == "Paris" and row["full_model_output"].startswith("<think>")
    # a block that never closes (generation cut while reasoning) leaves nothing to score
    chat_server.answer_fn = lambda p: "<think>Final answer: Paris"
    res = _openqa(log, chat_server, "--output_file_path", str(tmp_path / "cut.jsonl"))
    assert res["EM"] == 0.0 and res["F1"] == 0.0


def test_openqa_refuses_unknown_benchmark_and_unlabelled_2wiki_test(tmp_path, chat_server):
    log = _hotpot_log(tmp_path, [{"id": "a", "question": "q", "answer": "x"}])
    with pytest.raises(SystemExit, match="pass --benchmark"):
        _openqa(log, chat_server)
    log = _hotpot_log(tmp_path, [{"id": "a", "question": "q", "answer": None}], dataset="2WikiMultihopQA")
    with pytest.raises(SystemExit, match="2WikiMultihopQA test split is unlabelled"):
        _openqa(log, chat_server)


def test_openqa_rescores_first_release_output(tmp_path, fixtures_dir):
    log = tmp_path / "eval_seed0.jsonl"
    shutil.copy(fixtures_dir / "eval_seed0.jsonl", log)
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    settings = {
        "llm_name": "m",
        "filter": "none",
        "max_tokens": 8000,
        "think": None,
        "ignore_answer_aliases": False,
        "qa_f1_empty_conventions": False,
    }
    out = tmp_path / "o.jsonl"
    out.write_text(
        "".join(
            json.dumps(
                {
                    "id": r["id"],
                    "question": r["question"],
                    "retrieved_chunks_idx": r["pred_idx"],
                    "ground_truth_chunks_idx": r["sf_idx"],
                    "filter_idx": r["pred_idx"],
                    "filter_texts": r["pred_texts"],
                    "ground_truth": r["answer"],
                    "answer_aliases": r["answer_aliases"],
                    "prediction": "x",
                    "full_model_output": f"<think>Final answer: {r['answer']}</think>Final answer: no",
                    "EM": 1.0,
                    "F1": 1.0,
                    "reader_settings": settings,
                }
            )
            + "\n"
            for r in recs
        )
    )
    args = eval_llm_openqa.parse_args(
        ["--retriever_logfile", str(log), "--llm_name", "m", "--output_file_path", str(out)]
    )
    res = eval_llm_openqa.run(args, NoBackend())
    assert res["n"] == 3 and res["EM"] == 0.0 and res["F1"] == 0.0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert {r["benchmark"] for r in rows} == {"hotpotqa", "musique"} and all(r["prediction"] == "no" for r in rows)
    assert all(r["reader_settings"]["benchmark"] == "auto" for r in rows)
    # other settings than the file's are still refused
    args = eval_llm_openqa.parse_args(
        ["--retriever_logfile", str(log), "--llm_name", "other", "--output_file_path", str(out)]
    )
    with pytest.raises(SystemExit, match="holds results made with"):
        eval_llm_openqa.run(args, NoBackend())


def test_old_output_without_model_output_is_refused_with_a_message(tmp_path, fixtures_dir):
    """An old line that kept neither ``full_model_output`` nor ``prediction`` cannot be rescored:
    the reader stops, naming the file, the line and what to do, and leaves the file as it was."""
    log, recs = _qa1_log(tmp_path, fixtures_dir, n=1)
    settings = {"babi_task": "qa1", "max_tokens": 32, "think": False, "llm_name": "m", "extra_question_mark": False}
    out = tmp_path / "m_eval_seed0_ns30.jsonl"
    text = json.dumps({**recs[0], "answer_acc": 1.0, "filter": "gt", "reader_settings": settings}) + "\n"
    out.write_text(text)
    argv = [str(log), "--llm_name", "m", "--babi_task", "qa1", "--max_tokens", "32", "--chunk_filter", "gt"]
    with pytest.raises(
        SystemExit,
        match=r"m_eval_seed0_ns30.jsonl: line 1 was written by an older scorer and cannot be rescored .*delete the file",
    ):
        eval_llm_synthetics.main(argv)
    assert out.read_text() == text
