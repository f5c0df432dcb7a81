"""LongBench: its per-subset metrics (worked cases from THUDM/LongBench's metrics.py / eval.py),
the loader and chunker on fixture files in the official JSONL format, and the reader end to end
through the server backend."""

import json
import re
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from envs.data.longbench import build_longbench, chunk_text, load_longbench
from envs.data.registry import build_dataset
from envs.errors import DatasetFormatError, DatasetNotFoundError
from prompts_and_metrics.longbench import (
    SUBSETS,
    classification,
    code_sim,
    count,
    length_bucket,
    longbench_score,
    normalize_zh,
    qa_f1,
    qa_f1_zh,
    retrieval,
    retrieval_zh,
    rouge_l,
    rouge_l_zh,
)

from .conftest import load_script, longbench_log_records

eval_llm_longbench = load_script("eval_llm_longbench")

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "longbench"


# ---------------------------------------------------------------- metrics


CLASSES = ["City", "Country", "Other location"]
# worked cases: (metric, its arguments, score)
METRIC_CASES = [
    # normalised "eiffel tower" vs "eiffel tower in paris": P = 1, R = 1/2
    (qa_f1, ("The Eiffel Tower!", "Eiffel Tower in Paris"), 2 / 3),
    (qa_f1, ("", ""), 0.0),  # no overlap -> 0 (LongBench has no empty-answer convention)
    # jieba: 我 / 爱 / 北京 / 天安门 vs 我 / 爱 / 北京 -> P = 3/4, R = 1
    (qa_f1_zh, ("我爱北京天安门", "我爱北京"), 6 / 7),
    (qa_f1_zh, ("北京。", "北京"), 1.0),  # punctuation tokens are dropped
    # LCS of "a b c d" and "a c d e" is "a c d": P = R = 3/4
    (rouge_l, ("a b c d", "a c d e"), 0.75),
    (rouge_l, ("", "a b"), 0.0),  # the rouge package fails -> 0
    (rouge_l, ("...", "a b"), 0.0),
    (rouge_l_zh, ("我爱北京天安门", "我爱北京"), 6 / 7),
    (classification, ("Other location", "Other location", CLASSES), 1.0),
    (classification, ("City or Country", "City", CLASSES), 0.5),  # two names found
    (classification, ("Mountain", "City", CLASSES), 0.0),
    # names that are proper substrings of the gold are dropped, but the scan skips the name after
    # a dropped one: "city" stays, so the gold shares the credit with it
    (classification, ("a big city", "big city", ["big", "city", "big city"]), 0.5),
    (count, ("There are 3 unique paragraphs, not 4", "3"), 0.5),
    (count, ("none", "3"), 0.0),
    (retrieval, ("Paragraph 12", "Paragraph 12"), 1.0),
    (retrieval, ("Paragraph 1 or Paragraph 12", "Paragraph 12"), 0.5),
    (retrieval_zh, ("答案是段落5", "段落5"), 1.0),
    # the gold number comes from "段落N" (LongBench's zh pattern); every number of the output counts
    (retrieval_zh, ("段落3，不是段落12", "段落12"), 0.5),
    # first line without a backtick, '#' or '//'; difflib ratio 2*3/8
    (code_sim, ("```python\n# next\nx = foo(1)\n", "x = foo(1)"), 1.0),
    (code_sim, ("abcd", "abce"), 0.75),
    (code_sim, ("", "x = 1"), 0.0),
]


@pytest.mark.parametrize(
    ("metric", "args", "want"), METRIC_CASES, ids=[f"{m.__name__}-{k}" for k, (m, _, _) in enumerate(METRIC_CASES)]
)
def test_metric_worked_cases(metric, args, want):
    assert metric(*args) == pytest.approx(want, abs=1e-6)


def test_chinese_normalisation_and_classes_required():
    assert normalize_zh("北京， 是 Capital。") == "北京是capital"
    with pytest.raises(ValueError, match="all_classes"):
        classification("City", "City", None)
    with pytest.raises(ValueError, match="names no paragraph"):
        retrieval_zh("Paragraph 2", "Paragraph 2")


def test_score_first_line_and_max_over_answers():
    trec = SUBSETS["trec"]
    assert trec.metric == "classification" and trec.first_line and trec.max_new_tokens == 64
    assert longbench_score("trec", "\nCity\nCountry", ["City"], ["City", "Country"]) == 1.0  # first line only
    assert longbench_score("hotpotqa", "x\nParis", ["Paris"], None) == pytest.approx(2 / 3)  # whole output
    assert longbench_score("hotpotqa", "Dijon", ["Paris", "Dijon"], None) == 1.0
    assert [length_bucket(n) for n in (3999, 4000, 7999, 8000)] == ["0-4k", "4-8k", "4-8k", "8k+"]
    assert len(SUBSETS) == 21
    with pytest.raises(ValueError, match="unknown LongBench subset"):
        longbench_score("nq", "a", ["a"], None)


# ---------------------------------------------------------------- chunker and loader


def _words(text):
    return re.findall(r"[\u3400-\u9fff]|[^\s\u3400-\u9fff]+", text)


def test_chunker_keeps_all_text_documents_and_budget():
    text = (
        "Paragraph 1: " + " ".join(f"w{i}." for i in range(25)) + "\n\nParagraph 2: short one.\n" + "北京是首都。" * 4
    )
    chunks = chunk_text(text, 10)
    assert all(len(_words(c)) <= 10 for c in chunks)
    assert [w for c in chunks for w in _words(c)] == _words(text)  # nothing lost, order kept
    assert any(c.startswith("Paragraph 2:") for c in chunks)  # a numbered document starts a chunk
    assert not any("Paragraph 1" in c and "Paragraph 2" in c for c in chunks)
    # a sentence longer than the budget is cut between words
    long = chunk_text("one two three four five six seven", 3)
    assert long == ["one two three", "four five six", "seven"]
    # code keeps its lines
    code = "def f(x):\n    y = x + 1\n    return y\n"
    assert chunk_text(code, 100) == [code.strip()]
    with pytest.raises(ValueError):
        chunk_text("a", 0)


def test_loader_official_fields():
    s = load_longbench(FIX, "hotpotqa", False, 150)
    assert [x["id"] for x in s] == ["3b1e8c0f2a6d4e9b8f7a6c5d4e3f2a1b", "9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a49"]
    a = s[0]
    assert a["question"].startswith("In which city") and a["answer"] == "Dijon" and a["answer_aliases"] == []
    assert a["sf_idx"] == [] and a["sf_known"] is False and a["source"] == "longbench/hotpotqa"
    assert [c.split("\n")[0] for c in a["chunks"]] == ["Passage 1:", "Passage 2:", "Passage 3:"]
    assert a["longbench"] == {"dataset": "hotpotqa", "all_classes": None, "length": 62, "input": a["question"]}
    e = load_longbench(FIX, "hotpotqa", True, 150)
    assert e[2]["answer_aliases"] == ["Dijon, France"] and e[2]["longbench"]["length"] == 9100
    # no input: the subset's fixed retrieval query, the empty input kept for the prompt
    g = load_longbench(FIX, "gov_report", False, 150)[0]
    assert g["question"] == SUBSETS["gov_report"].query and g["longbench"]["input"] == ""
    t = load_longbench(FIX, "trec", False, 150)[0]
    assert "Other location" in t["longbench"]["all_classes"]
    z = load_longbench(FIX, "multifieldqa_zh", False, 10)[0]
    assert len(z["chunks"]) > 1 and "".join(z["chunks"]).startswith("北京是中华人民共和国的首都。")


@pytest.mark.parametrize(
    ("folder", "task", "error", "match"),
    [
        ("", "narrativeqa", DatasetNotFoundError, "data.zip"),
        ("bad_answers", "hotpotqa", DatasetFormatError, r"hotpotqa.jsonl \(line 2.*missing field 'answers'"),
        ("bad_json", "hotpotqa", DatasetFormatError, r"hotpotqa.jsonl:2: invalid JSON"),
        ("bad_subset", "hotpotqa", DatasetFormatError, "subset 'musique' in the file of subset 'hotpotqa'"),
        ("bad_context", "hotpotqa", DatasetFormatError, "'context' is empty"),
        ("", "nq", ValueError, "unknown LongBench subset"),
    ],
)
def test_loader_errors(folder, task, error, match):
    with pytest.raises(error, match=match):
        load_longbench(FIX / folder, task, False, 150)


def test_config_builds_and_has_no_train_split():
    envs = OmegaConf.load(ROOT / "configs" / "envs" / "longbench.yaml")
    root = OmegaConf.create({"paths": {"data_root": str(ROOT / "data")}, "envs": envs})
    root.envs.data_path = str(FIX)
    root.envs.task = "passage_retrieval_en"
    OmegaConf.resolve(root)
    test = build_dataset(root.envs, "test", 3)
    assert len(test) == 1 and len(test[0]["chunks"]) == 3
    with pytest.raises(ValueError, match="only a test split"):
        build_longbench(root.envs, "train", 3)


# ---------------------------------------------------------------- reader


def _log(tmp_path, task, longbench_e=False, reverse=True):
    log = tmp_path / f"eval_seed0_lb-{task}.jsonl"
    log.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in longbench_log_records(task, longbench_e, reverse))
    )
    return log


def _read(log, server, *extra, llm="m"):
    """The LongBench reader on ``log`` through the fake chat server."""
    argv = ["--retriever_logfile", str(log), "--llm_name", llm, "--backend", "server", "--api_base_url", server.url]
    return eval_llm_longbench.main([*argv, *extra])


def test_reader_end_to_end(tmp_path, chat_server):
    log = _log(tmp_path, "hotpotqa", longbench_e=True)
    chat_server.answer_fn = lambda p: "<think>Paris?</think>Dijon" if "born" in p["messages"][-1]["content"] else "Yes."
    res = _read(log, chat_server, llm="served/qwen3")
    sub = res["subsets"]["hotpotqa"]
    assert sub["n"] == 3 and sub["score"] == pytest.approx(2 / 3)
    assert sub["by_length"] == {"0-4k": 1.0, "4-8k": 0.0, "8k+": 1.0}
    prompt = chat_server.requests[0]["messages"][-1]["content"]
    assert prompt.index("Passage 1:") < prompt.index("Passage 2:") < prompt.index("Passage 3:")  # document order
    assert chat_server.requests[0]["max_tokens"] == 32  # LongBench's length for hotpotqa
    rows = [json.loads(x) for x in Path(res["output"]).read_text().splitlines()]
    assert rows[0]["pred"] == "Dijon" and rows[0]["full_model_output"].startswith("<think>")
    assert {"answers", "all_classes", "length", "score", "scoring", "sample_key"} <= set(rows[0])
    # resume: nothing left to generate
    n = len(chat_server.requests)
    _read(log, chat_server, llm="served/qwen3")
    assert len(chat_server.requests) == n
    with pytest.raises(SystemExit, match="holds results made with"):
        _read(log, chat_server, "--max_tokens", "8", llm="served/qwen3")


def test_reader_official_prompt_file_classification_and_code(tmp_path, chat_server):
    prompts = tmp_path / "dataset2prompt.json"
    prompts.write_text(
        json.dumps({"trec": "Classify.\n\n{context}\n{input}", "lcc": "Complete:\n{context}Next line:\n"})
    )
    chat_server.answer_fn = lambda p: (
        "Other location\nCity" if "Classify" in p["messages"][-1]["content"] else "# the end\n    return out\n"
    )
    for task in ("trec", "lcc"):
        assert _read(_log(tmp_path, task), chat_server, "--prompt_file", str(prompts))["subsets"][task]["score"] == 1.0
    assert chat_server.requests[0]["messages"][-1]["content"].startswith("Classify.\n\nQuestion: What city")
    assert chat_server.requests[0]["max_tokens"] == 64
    bad = tmp_path / "p2.json"
    bad.write_text(json.dumps({"trec": "x"}))
    with pytest.raises(SystemExit, match="no template for subset 'lcc'"):
        _read(_log(tmp_path, "lcc"), chat_server, "--prompt_file", str(bad), llm="m2")


def test_openqa_reader_points_to_the_longbench_reader(tmp_path, chat_server):
    eval_llm_openqa = load_script("eval_llm_openqa")
    log = _log(tmp_path, "hotpotqa")
    with pytest.raises(SystemExit, match="eval_llm_longbench.py"):
        eval_llm_openqa.main(
            ["--retriever_logfile", str(log), "--backend", "server", "--api_base_url", chat_server.url]
        )


def test_reader_refuses_other_logs(tmp_path, fixtures_dir):
    log = tmp_path / "eval_seed0.jsonl"
    shutil.copy(fixtures_dir / "eval_seed0.jsonl", log)
    with pytest.raises(SystemExit, match="not a LongBench log"):
        eval_llm_longbench.main(["--retriever_logfile", str(log)])
    with pytest.raises(SystemExit):  # filters that need gold chunks do not exist here
        eval_llm_longbench.main(["--retriever_logfile", str(log), "--chunk_filter", "gt"])


def test_score_prediction_files_like_longbench_eval(tmp_path):
    pred = tmp_path / "pred"
    shutil.copytree(FIX / "pred", pred)
    # hotpotqa: 1, 0, qa_f1("Dijon, France", "Dijon") = 2/3 -> mean x 100; trec: first line is the gold class
    assert eval_llm_longbench.main(["--score_predictions", str(pred)]) == {"hotpotqa": 55.56, "trec": 100.0}
    assert json.loads((pred / "result.json").read_text()) == {"hotpotqa": 55.56, "trec": 100.0}
    e = eval_llm_longbench.main(["--score_predictions", str(pred), "--e"])
    assert e["hotpotqa"] == {"0-4k": 100.0, "4-8k": 0.0, "8k+": 66.67}
    assert e["trec"] == {"0-4k": 100.0, "4-8k": None, "8k+": None}
