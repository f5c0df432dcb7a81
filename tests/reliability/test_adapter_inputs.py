"""The LangChain and LlamaIndex retrievers' keywords (issue 46 items 8 and 15): a misspelt option is
a RetrieverError naming it, not a keyword the framework drops while the run's defaults are used;
numpy's integers are integers; ``split=`` given with a list of chunks is refused, not ignored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rl.tool.retriever import QRAGRetriever, RetrieverError

TEXT = "John went to the garden. Mary moved to the kitchen.\nThe sky is blue. Sandra journeyed to the office.\n"
CHUNKS = ["John went to the garden.", "Mary moved to the kitchen.", "The sky is blue.", "Sandra went to the office."]
FRAMEWORKS = {"langchain": "langchain_core", "llamaindex": "llama_index.core"}


def adapter(framework: str) -> type:
    pytest.importorskip(FRAMEWORKS[framework])
    if framework == "langchain":
        from rl.tool.adapters.langchain import QRAGLangChainRetriever

        return QRAGLangChainRetriever
    from rl.tool.adapters.llamaindex import QRAGLlamaIndexRetriever

    return QRAGLlamaIndexRetriever


def picks(retriever: Any, question: str) -> list[tuple[str, float]]:
    if hasattr(retriever, "invoke"):
        return [(d.page_content, d.metadata["q_value"]) for d in retriever.invoke(question)]
    return [(n.node.get_content(), n.score) for n in retriever.retrieve(question)]


@pytest.fixture(scope="module")
def qrag(eval_run_dir: Path) -> QRAGRetriever:
    return QRAGRetriever.from_run(eval_run_dir, device="cpu")


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
@pytest.mark.parametrize(
    ("keyword", "message"),
    [
        ({"step": 5}, r"has no keyword step= \(did you mean steps=\?\)"),
        ({"stop_treshold": 0.9}, r"has no keyword stop_treshold= \(did you mean stop_threshold=\?\)"),
        ({"k": 3}, r"has no keyword k=; it takes steps, stop_threshold, planner"),
    ],
)
def test_a_misspelt_keyword_is_named(qrag, tmp_path, framework, keyword, message):
    cls = adapter(framework)
    with pytest.raises(RetrieverError, match=message):
        cls(qrag, TEXT, **keyword)
    with pytest.raises(RetrieverError, match=message):  # before a run folder is loaded
        cls(tmp_path / "missing", TEXT, **keyword)


def test_the_frameworks_own_keywords_pass(qrag):
    lc, li = adapter("langchain"), adapter("llamaindex")
    from llama_index.core.callbacks import CallbackManager

    retriever = lc(qrag, TEXT, steps=1, tags=["qrag"], metadata={"corpus": "demo"}, name="qrag-demo")
    assert (retriever.tags, retriever.metadata, retriever.name) == (["qrag"], {"corpus": "demo"}, "qrag-demo")
    manager = CallbackManager([])
    retriever = li(qrag, TEXT, steps=1, callback_manager=manager, verbose=True)
    assert retriever.callback_manager is manager and retriever._verbose is True


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_numpy_numbers_are_numbers(qrag, framework):
    cls = adapter(framework)
    want = picks(cls(qrag, TEXT, steps=2), "Where is Mary?")
    assert picks(cls(qrag, TEXT, steps=np.int64(2)), "Where is Mary?") == want
    beam = dict(planner="beam", beam_width=3, beam_expand=2)
    numpy_beam = dict(planner="beam", beam_width=np.int32(3), beam_expand=np.uint8(2))
    assert picks(cls(qrag, TEXT, steps=2, **numpy_beam), "Where is Mary?") == picks(
        cls(qrag, TEXT, steps=2, **beam), "Where is Mary?"
    )
    threshold = want[1][1]  # stops before the second pick
    assert picks(cls(qrag, TEXT, steps=2, stop_threshold=np.float32(threshold) + 1e-3), "Where is Mary?") == want[:1]
    for bad in (np.int64(0), np.float64(2.0), np.bool_(True)):
        with pytest.raises(RetrieverError, match="steps=.*expected an integer"):
            cls(qrag, TEXT, steps=bad)


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_split_with_a_list_of_chunks_is_refused(qrag, framework):
    cls = adapter(framework)
    for split in ("lines", "sentences"):
        with pytest.raises(RetrieverError, match=f"split='{split}' splits a text haystack; this haystack is a list"):
            cls(qrag, CHUNKS, split=split)
    assert len(picks(cls(qrag, CHUNKS, steps=4), "Where is Mary?")) == 4  # without split=: the chunks as given
    assert len(picks(cls(qrag, TEXT, split="lines", steps=2), "Where is Mary?")) == 2  # a text is split
