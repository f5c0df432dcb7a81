"""QRAGRetriever (rl/tool/retriever.py) against eval_retriever's loop on the same real samples, its stop
rule, text splitting and bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envs.data.registry import build_dataset
from envs.legacy import Legacy
from rl.run.evaluate import run as eval_run
from rl.tool.retriever import QRAGRetriever, RetrieverError, split_text

from .conftest import eval_cfg

N = 4  # test samples of the shipped qa1 data, 12-sentence haystacks


@pytest.fixture(scope="module")
def retriever(tiny_run: Path) -> QRAGRetriever:
    return QRAGRetriever.from_eval_config(eval_cfg(tiny_run, "envs.num_sentences=12"))


def evaluated(run_dir: Path, out: Path, *overrides: str) -> list[dict]:
    eval_run(eval_cfg(run_dir, f"output_dir={out}", "envs.num_sentences=12", f"num_samples={N}", *overrides))
    (path,) = out.glob("*.jsonl")
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def samples_of(retriever: QRAGRetriever) -> list[dict]:
    cfg = retriever.cfg
    data = build_dataset(cfg.envs, str(cfg.envs.test_split), int(cfg.seed), 0.0, Legacy.from_cfg(cfg.legacy))
    return [data[i] for i in range(N)]


@pytest.mark.parametrize("planner", ["greedy", "beam"])
def test_picks_equal_the_evaluation_loop(retriever: QRAGRetriever, tiny_run: Path, tmp_path: Path, planner) -> None:
    records = evaluated(tiny_run, tmp_path, f"eval.planner={planner}")
    samples = samples_of(retriever)
    assert [s["question"] for s in samples] == [r["question"] for r in records]
    batch = retriever.retrieve_batch([s["question"] for s in samples], [s["chunks"] for s in samples], planner=planner)
    for rec, res, sample in zip(records, batch, samples):
        assert [p.index for p in res.picks] == rec["pred_idx"]
        assert [p.q_value for p in res.picks] == rec["q_values"]  # same groups, same arithmetic
        assert [p.step for p in res.picks] == [1, 2]  # the run's T
        assert [p.chunk for p in res.picks] == rec["pred_texts"]
        assert res.text_tokens == rec["text_len"] and res.n_chunks == len(sample["chunks"])
        alone = retriever.retrieve(sample["question"], sample["chunks"], planner=planner)
        assert [p.index for p in alone.picks] == rec["pred_idx"]
        assert [p.q_value for p in alone.picks] == pytest.approx(rec["q_values"], abs=1e-5)


def test_stop_threshold_is_the_evaluation_rule(retriever: QRAGRetriever, tiny_run: Path, tmp_path: Path) -> None:
    samples = samples_of(retriever)
    full = retriever.retrieve_batch([s["question"] for s in samples], [s["chunks"] for s in samples])
    second = sorted(r.picks[1].q_value for r in full)
    q = (second[1] + second[2]) / 2  # some episodes stop before step 2, some do not
    records = evaluated(tiny_run, tmp_path, f"eval.stop_q_threshold={q}")
    got = retriever.retrieve_batch([s["question"] for s in samples], [s["chunks"] for s in samples], stop_threshold=q)
    assert [[p.index for p in r.picks] for r in got] == [r["pred_idx"] for r in records]
    assert sorted(len(r.picks) for r in got) == [1, 1, 2, 2]
    assert (
        retriever.retrieve(samples[0]["question"], samples[0]["chunks"], steps=5, stop_threshold=1e9).picks[0].step == 1
    )


def test_text_is_split_into_sentences_with_spans(retriever: QRAGRetriever) -> None:
    text = "Mr. Shepherd came in.  Mary went to the office!\n\nJohn moved to the garden. Mary travelled to the kitchen."
    chunks, spans = split_text(text)
    assert chunks == [
        "Mr. Shepherd came in.",
        "Mary went to the office!",
        "John moved to the garden.",
        "Mary travelled to the kitchen.",
    ]
    assert [text[a:b] for a, b in spans] == chunks
    res = retriever.retrieve("Where is Mary?", text, steps=4)
    assert sorted(p.index for p in res.picks) == [0, 1, 2, 3]  # every chunk, each once
    assert all(text[p.start : p.end] == p.chunk == chunks[p.index] for p in res.picks)
    assert split_text("one\n two \n\n", "lines") == (["one", "two"], [(0, 3), (5, 8)])


def test_one_text_serves_a_batch_of_questions(retriever: QRAGRetriever) -> None:
    text = "John went to the garden. Mary moved to the kitchen. Sandra journeyed to the office."
    out = retriever.retrieve_batch(["Where is Mary?", "Where is John?", "Where is Sandra?"], text, steps=1)
    assert [r.question for r in out] == ["Where is Mary?", "Where is John?", "Where is Sandra?"]
    assert [r.picks[0].index for r in out] == [
        retriever.retrieve(q, text, steps=1).picks[0].index
        for q in ("Where is Mary?", "Where is John?", "Where is Sandra?")
    ]


@pytest.mark.parametrize(
    ("question", "context", "kwargs", "message"),
    [
        ("Where is Mary?", "", {}, "the text is empty"),
        ("Where is Mary?", "  \n ", {}, "the text is empty"),
        ("Where is Mary?", [], {}, "the chunk list is empty"),
        ("Where is Mary?", ["a.", ""], {}, "chunk 1 is empty"),
        ("", "Mary went home.", {}, "question 1 is empty"),
        (
            "where is mary " * 40,
            "Mary went home.",
            {},
            "the question is 120 tokens long; this retriever reads at most 62",
        ),
        ("Where is Mary?", "Mary went home.", {"steps": 0}, "steps=0: expected an integer ≥ 1"),
        ("Where is Mary?", "Mary went home.", {"planner": "best"}, "planner='best'"),
        ("Where is Mary?", "Mary went home.", {"planner": "beam", "stop_threshold": 0.1}, "greedy planner only"),
        ("Where is Mary?", "Mary went home.", {"stop_threshold": float("nan")}, "expected a finite number"),
    ],
)
def test_bad_input_is_one_clear_line(retriever: QRAGRetriever, question, context, kwargs, message) -> None:
    with pytest.raises(RetrieverError, match=message) as err:
        retriever.retrieve(question, context, **kwargs)
    assert "\n" not in str(err.value)


def test_missing_run_folder(tmp_path: Path) -> None:
    with pytest.raises(RetrieverError, match=f"run={tmp_path / 'nope'}: no such folder"):
        QRAGRetriever.from_run(tmp_path / "nope")
