"""Chunk filters (DESIGN §9.3) on one hand-made record."""

import pytest

from prompts_and_metrics.filters import FilterSpec, apply_filter, filter_indices

from .conftest import load_script

REC = {
    "id": "r1",
    "question": "q",
    "answer": "a",
    "sf_idx": [4, 9],
    "sf_texts": ["gold4", "gold9"],
    "pred_idx": [7, 4, 2, 5, 1],
    "pred_texts": ["n7", "gold4", "n2", "n5", "n1"],
    "q_values": [0.9, 0.6, 0.4, -0.2, -0.7],
}


def keep(name, **kw):
    return filter_indices(REC, FilterSpec(name, **kw))


def test_none_gt_no_noise():
    assert keep("none") == [7, 4, 2, 5, 1]
    assert keep("gt") == [4, 9]  # oracle: includes the unretrieved gold chunk 9
    assert keep("no_noise") == [4]


def test_early_stop():
    assert keep("early_stop") == [7, 4]
    miss = dict(REC, sf_idx=[3], sf_texts=["g3"])
    assert filter_indices(miss, FilterSpec("early_stop")) == [7, 4, 2, 5, 1]
    assert filter_indices(miss, FilterSpec("early_stop", empty_if_none=True)) == []


def test_qvalue_le_and_lt():
    assert keep("qvalue", threshold=0.4, comparison="le") == [7, 4]  # stops at Q=0.4 (<=)
    assert keep("qvalue", threshold=0.4, comparison="lt") == [7, 4, 2]  # keeps Q=0.4 (>=)
    assert keep("qvalue", threshold=-0.5) == [7, 4, 2, 5]  # ref default threshold
    assert keep("qvalue", threshold=1.0) == []
    assert keep("qvalue", threshold=-1.0) == [7, 4, 2, 5, 1]
    with pytest.raises(ValueError):
        keep("qvalue", comparison="ge")


def test_retrieval_step_and_llm():
    assert keep("retrieval_step", budget=2) == [7, 4]
    assert keep("retrieval_step", budget=0) == []
    with pytest.raises(ValueError):
        keep("retrieval_step")
    with pytest.raises(NotImplementedError):
        keep("llm")
    with pytest.raises(ValueError):
        keep("bogus")


def test_apply_filter_texts_and_sorting():
    idx, texts = apply_filter(REC, FilterSpec("gt"))
    assert texts == ["gold4", "gold9"]
    idx, texts = apply_filter(REC, FilterSpec("none"), sort_by_index=True)
    assert idx == [1, 2, 4, 5, 7] and texts == ["n1", "n2", "gold4", "n5", "n7"]
    bad = dict(REC, pred_texts=["x"])
    with pytest.raises(ValueError, match="pred_idx"):
        apply_filter(bad, FilterSpec("none"))


def test_filter_keys():
    assert FilterSpec("qvalue", threshold=0.5).key() == "qvalue_le0.5"
    assert FilterSpec("retrieval_step", budget=3).key() == "retrieval_step3"
    assert FilterSpec("none").key() == "none"


@pytest.mark.parametrize("script", ["eval_llm_synthetics", "eval_llm_openqa", "eval_llm_longbench"])
def test_each_reader_builds_its_filter_from_its_flags(script):
    """Every flag reaches its field; LongBench has no --empty_if_none and keeps the default."""
    flags = ["--chunk_filter", "qvalue", "--stopping_threshold", "0.25", "--qvalue_comparison", "lt"]
    flags += ["--max_retrieval_budget", "3"]
    longbench = script == "eval_llm_longbench"
    argv = (
        ["log.jsonl", "--babi_task", "qa1"] if script == "eval_llm_synthetics" else ["--retriever_logfile", "log.jsonl"]
    )
    argv += flags + ([] if longbench else ["--empty_if_none"])
    spec = FilterSpec.from_args(load_script(script).parse_args(argv))
    assert spec == FilterSpec("qvalue", 0.25, "lt", 3, empty_if_none=not longbench)
