"""The LangChain and LlamaIndex adapters (rl/tool/adapters/) against QRAGRetriever.retrieve on the
shipped example text (data/examples/, its first 20 sentences), through each framework's own calls; the
documents-as-haystack path, bad input and the missing-package message. The frameworks are the
optional extras ``langchain`` and ``llamaindex`` (scripts/install.sh installs both)."""

from __future__ import annotations

import asyncio
import importlib
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rl.tool.retriever import QRAGRetriever, Retrieval, RetrieverError, split_text
from tests.conftest import ROOT, load_script

from .conftest import eval_cfg

EXAMPLE = ROOT / "data" / "examples"
BOOK = (EXAMPLE / "persuasion_ch1_qa1.txt").read_text(encoding="utf-8")
TEXT = BOOK[: split_text(BOOK)[1][19][1]]  # its first 20 sentences (4 planted facts among them): fast
QUESTIONS = [
    json.loads(x)["question"] for x in (EXAMPLE / "persuasion_ch1_qa1.questions.jsonl").read_text().splitlines()
]
CHUNKS, _ = split_text(TEXT)
STEPS = 3  # more than the tiny run's T = 2: the position codes go on, as in the tool
FRAMEWORKS = {"langchain": "langchain_core", "llamaindex": "llama_index.core"}  # the extra's name: its module
KEYS = ("step", "q_value", "position", "char_start", "char_end")


def need(extra: str) -> None:
    reason = f"the optional extra '{extra}' is not installed (pip install -e '.[{extra}]')"
    pytest.importorskip(FRAMEWORKS[extra], reason=reason)


Row = tuple[str, int, float, int, int | None, int | None]  # chunk, step, Q, position, char_start, char_end


def tool_rows(result: Retrieval) -> list[Row]:
    return [(p.chunk, p.step, p.q_value, p.index, p.start, p.end) for p in result.picks]


def adapter(framework: str) -> tuple[type, Callable[[Any, str], list[Row]]]:
    """The adapter class and a query function giving its results as rows (the metadata read back)."""
    need(framework)
    if framework == "langchain":
        from rl.tool.adapters.langchain import QRAGLangChainRetriever

        def lc_rows(retriever: Any, question: str) -> list[Row]:
            docs = retriever.invoke(question)
            return [(d.page_content, *(d.metadata.get(k) for k in KEYS)) for d in docs]

        return QRAGLangChainRetriever, lc_rows
    from rl.tool.adapters.llamaindex import QRAGLlamaIndexRetriever

    def li_rows(retriever: Any, question: str) -> list[Row]:
        rows = []
        for n in retriever.retrieve(question):
            m = n.node.metadata
            assert n.score == m["q_value"]
            rows.append((n.node.get_content(), *(m.get(k) for k in KEYS)))
        return rows

    return QRAGLlamaIndexRetriever, li_rows


@pytest.fixture(scope="module")
def qrag(tiny_run: Path) -> QRAGRetriever:
    return QRAGRetriever.from_eval_config(eval_cfg(tiny_run))


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
@pytest.mark.parametrize("planner", ["greedy", "beam"])
def test_documents_are_the_tool_picks_over_a_text(qrag: QRAGRetriever, framework: str, planner: str) -> None:
    cls, rows = adapter(framework)
    retriever = cls(qrag, TEXT, steps=STEPS, planner=planner, beam_width=3, beam_expand=2)
    for question in QUESTIONS[:2]:
        want = tool_rows(qrag.retrieve(question, TEXT, steps=STEPS, planner=planner, beam_width=3, beam_expand=2))
        got = rows(retriever, question)
        assert got == want and len(got) == STEPS
        assert [r[1] for r in got] == [1, 2, 3]
        assert all(TEXT[a:b] == chunk for chunk, _, _, _, a, b in got)


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_stop_threshold_is_the_tools(qrag: QRAGRetriever, framework: str) -> None:
    cls, rows = adapter(framework)
    question = QUESTIONS[0]
    full = qrag.retrieve(question, TEXT, steps=STEPS)
    second = full.picks[1].q_value  # the best Q before step 2: a threshold at it stops there
    for threshold, n in ((second, 1), (min(p.q_value for p in full.picks) - 1.0, STEPS)):
        retriever = cls(qrag, TEXT, steps=STEPS, stop_threshold=threshold)
        got = rows(retriever, question)
        assert got == tool_rows(qrag.retrieve(question, TEXT, steps=STEPS, stop_threshold=threshold))
        assert len(got) == n and got == tool_rows(full)[:n]


def test_langchain_documents_keep_their_source(qrag: QRAGRetriever) -> None:
    need("langchain")
    from langchain_core.documents import Document

    from rl.tool.adapters.langchain import QRAGLangChainRetriever

    chunks = CHUNKS[:8]
    docs = [
        Document(page_content=c, metadata={"source": "persuasion", "line": k}, id=f"d{k}") for k, c in enumerate(chunks)
    ]
    retriever = QRAGLangChainRetriever(qrag, docs, steps=STEPS)
    got = retriever.invoke(QUESTIONS[1])
    want = qrag.retrieve(QUESTIONS[1], chunks, steps=STEPS).picks
    assert [d.page_content for d in got] == [p.chunk for p in want]
    for d, p in zip(got, want):
        assert d.id == f"d{p.index}"
        assert d.metadata == {
            "source": "persuasion",
            "line": p.index,
            "step": p.step,
            "q_value": p.q_value,
            "position": p.index,
        }
    assert docs[want[0].index].metadata == {"source": "persuasion", "line": want[0].index}  # the source is not touched


def test_llamaindex_nodes_keep_their_source(qrag: QRAGRetriever) -> None:
    need("llamaindex")
    from llama_index.core.schema import (
        Document,
        MetadataMode,
        NodeRelationship,
        NodeWithScore,
        RelatedNodeInfo,
        TextNode,
    )

    from rl.tool.adapters.llamaindex import QRAGLlamaIndexRetriever

    chunks = CHUNKS[:8]
    parent = RelatedNodeInfo(node_id="book")
    nodes: list[Any] = [
        TextNode(text=c, id_=f"n{k}", metadata={"line": k}, relationships={NodeRelationship.SOURCE: parent})
        for k, c in enumerate(chunks)
    ]
    nodes[0] = Document(text=chunks[0], id_="n0", metadata={"line": 0}, excluded_llm_metadata_keys=["line"])
    nodes[1] = NodeWithScore(node=nodes[1], score=0.5)  # another retriever's output, reused as a haystack
    retriever = QRAGLlamaIndexRetriever(qrag, nodes, steps=len(chunks))  # every chunk is picked once
    got = retriever.retrieve(QUESTIONS[1])
    want = qrag.retrieve(QUESTIONS[1], chunks, steps=len(chunks)).picks
    assert [(n.node.get_content(), n.score) for n in got] == [(p.chunk, p.q_value) for p in want]
    for n, p in zip(got, want):
        node = n.node
        assert node.node_id == f"n{p.index}" and type(node) is (Document if p.index == 0 else TextNode)
        assert node.metadata == {"line": p.index, "step": p.step, "q_value": p.q_value, "position": p.index}
        llm_view = node.get_content(metadata_mode=MetadataMode.LLM)
        assert "q_value" not in llm_view and "step" not in llm_view  # the retrieval's keys stay out of prompts
        assert ("line: " in llm_view) == (p.index != 0)  # the source's own exclusions kept
        if p.index > 0:
            assert node.source_node.node_id == "book"
    assert nodes[2].metadata == {"line": 2}  # the source is not touched


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_a_text_haystack_gives_spans(qrag: QRAGRetriever, framework: str) -> None:
    cls, _ = adapter(framework)
    retriever = cls(qrag, TEXT, steps=1)
    if framework == "langchain":
        (doc,) = retriever.invoke(QUESTIONS[2])
        meta = doc.metadata
    else:
        (hit,) = retriever.retrieve(QUESTIONS[2])
        meta = hit.node.metadata
        assert (hit.node.start_char_idx, hit.node.end_char_idx) == (meta["char_start"], meta["char_end"])
    assert set(meta) == set(KEYS)
    (p,) = qrag.retrieve(QUESTIONS[2], TEXT, steps=1).picks
    assert (meta["char_start"], meta["char_end"]) == (p.start, p.end)


def test_langchain_invoke_batch_async_and_a_chain(qrag: QRAGRetriever) -> None:
    need("langchain")
    from langchain_core.runnables import RunnableLambda

    from rl.tool.adapters.langchain import QRAGLangChainRetriever

    retriever = QRAGLangChainRetriever(qrag, TEXT, steps=2)
    want = {q: qrag.retrieve(q, TEXT, steps=2).picks for q in QUESTIONS[:4]}

    def context(docs: list[Any]) -> str:
        return "\n".join(f"[{d.metadata['step']}, Q={d.metadata['q_value']:.4f}] {d.page_content}" for d in docs)

    chain = retriever | RunnableLambda(context)
    expected = {q: "\n".join(f"[{p.step}, Q={p.q_value:.4f}] {p.chunk}" for p in picks) for q, picks in want.items()}
    assert chain.invoke(QUESTIONS[0]) == expected[QUESTIONS[0]]
    # batch runs its inputs in worker threads: the episodes must not mix
    assert chain.batch(QUESTIONS[1:3]) == [expected[q] for q in QUESTIONS[1:3]]
    got = asyncio.run(retriever.ainvoke(QUESTIONS[3]))
    assert [(d.page_content, d.metadata["q_value"]) for d in got] == [(p.chunk, p.q_value) for p in want[QUESTIONS[3]]]


def test_llamaindex_retrieve_query_bundle_and_async(qrag: QRAGRetriever) -> None:
    need("llamaindex")
    from llama_index.core.schema import QueryBundle

    from rl.tool.adapters.llamaindex import QRAGLlamaIndexRetriever

    retriever = QRAGLlamaIndexRetriever(qrag, TEXT, steps=2)
    want = [(p.chunk, p.q_value) for p in qrag.retrieve(QUESTIONS[1], TEXT, steps=2).picks]
    for got in (
        retriever.retrieve(QUESTIONS[1]),
        retriever.retrieve(QueryBundle(query_str=QUESTIONS[1], embedding=[0.0] * 384)),  # its embedding is not used
        asyncio.run(retriever.aretrieve(QUESTIONS[1])),
    ):
        assert [(n.node.get_content(), n.score) for n in got] == want


async def arows(framework: str, retriever: Any, question: str) -> list[Row]:
    """The adapter's async query (``ainvoke`` / ``aretrieve``) as rows."""
    if framework == "langchain":
        return [(d.page_content, *(d.metadata.get(k) for k in KEYS)) for d in await retriever.ainvoke(question)]
    return [
        (n.node.get_content(), *(n.node.metadata.get(k) for k in KEYS)) for n in await retriever.aretrieve(question)
    ]


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_concurrent_async_queries_are_the_serial_picks(qrag: QRAGRetriever, framework: str) -> None:
    cls, rows = adapter(framework)
    retriever = cls(qrag, TEXT, steps=STEPS)
    serial = [rows(retriever, q) for q in QUESTIONS]

    async def together() -> list[list[Row]]:
        return await asyncio.gather(*(arows(framework, retriever, q) for q in QUESTIONS * 2))

    assert asyncio.run(together()) == serial * 2


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_async_queries_leave_the_event_loop_free(
    qrag: QRAGRetriever, framework: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the encoder runs (here slowed to 0.3 s an episode) other coroutines go on: LlamaIndex's
    own ``aretrieve`` ran the episode in the event loop, which then stood still."""
    cls, _ = adapter(framework)
    retriever = cls(qrag, TEXT, steps=1)
    real = qrag.retrieve

    def slow(*args: Any, **kwargs: Any) -> Retrieval:
        time.sleep(0.3)
        return real(*args, **kwargs)

    monkeypatch.setattr(qrag, "retrieve", slow)

    async def ticks_during_three_queries() -> int:
        ticks, finished = 0, False

        async def ticker() -> None:
            nonlocal ticks
            while not finished:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        await asyncio.gather(*(arows(framework, retriever, q) for q in QUESTIONS[:3]))
        finished = True
        await task
        return ticks

    assert asyncio.run(ticks_during_three_queries()) >= 20  # about 90 when free, 3 or 4 when blocked


def test_langchain_tool_for_agents(qrag: QRAGRetriever) -> None:
    need("langchain")
    from rl.tool.adapters.langchain import QRAGLangChainRetriever, retriever_tool

    retriever = QRAGLangChainRetriever(qrag, TEXT, steps=2)
    question = QUESTIONS[1]
    picks = qrag.retrieve(question, TEXT, steps=2).picks
    want = "\n\n".join(f"[step {p.step}, Q={p.q_value:.4f}] {p.chunk}" for p in picks)
    tool = retriever_tool(retriever, "search_book", "Finds the sentences of the book that answer a question")
    assert (tool.name, list(tool.args)) == ("search_book", ["query"])
    assert tool.invoke({"query": question}) == want
    assert asyncio.run(tool.ainvoke({"query": question})) == want
    call = {"name": "search_book", "args": {"query": question}, "id": "call_1", "type": "tool_call"}
    message = tool.invoke(call)  # as an agent calls it: a ToolMessage answering the call
    assert (message.content, message.tool_call_id) == (want, "call_1")
    with_docs = retriever_tool(retriever, response_format="content_and_artifact")
    message = with_docs.invoke({**call, "name": "qrag_search"})
    assert message.content == want and [d.metadata["q_value"] for d in message.artifact] == [p.q_value for p in picks]


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_built_from_a_run_folder(tiny_run: Path, qrag: QRAGRetriever, framework: str) -> None:
    cls, rows = adapter(framework)
    retriever = cls(tiny_run, TEXT, steps=2, device="cpu")
    assert rows(retriever, QUESTIONS[0]) == tool_rows(qrag.retrieve(QUESTIONS[0], TEXT, steps=2))


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_bad_input_is_one_clear_error(qrag: QRAGRetriever, framework: str, tmp_path: Path) -> None:
    cls, rows = adapter(framework)
    bad: list[tuple[dict[str, Any], str]] = [
        ({"haystack": "  \n"}, "haystack text is empty"),
        ({"haystack": []}, "empty list"),
        ({"haystack": ["a chunk.", " "]}, "chunk 1 is empty"),
        ({"haystack": 42}, "got int"),
        ({"haystack": {"a": "b"}}, "got dict"),
        ({"haystack": ["a chunk.", 3]}, "item 1 is a int"),
        ({"haystack": TEXT, "planner": "bfs"}, "planner='bfs'"),
        ({"haystack": TEXT, "steps": 0}, "steps=0"),
        ({"haystack": TEXT, "steps": True}, "steps=True"),
        ({"haystack": TEXT, "beam_width": 0, "planner": "beam"}, "beam_width=0"),
        ({"haystack": TEXT, "stop_threshold": math.nan}, "finite"),
        ({"haystack": TEXT, "stop_threshold": "0.5"}, "expected a number"),
        ({"haystack": TEXT, "stop_threshold": 0.5, "planner": "beam"}, "greedy planner only"),
        ({"haystack": TEXT, "split": "words"}, "split='words'"),
    ]
    for kwargs, message in bad:
        with pytest.raises(RetrieverError, match=message):
            cls(qrag, **kwargs)
    with pytest.raises(RetrieverError, match="expected a run folder or a QRAGRetriever"):
        cls(42, TEXT)
    with pytest.raises(RetrieverError, match="no such folder"):
        cls(tmp_path / "missing", TEXT)
    # the other framework's documents are not this one's
    need("llamaindex" if framework == "langchain" else "langchain")
    if framework == "langchain":
        from llama_index.core.schema import TextNode

        other, own = TextNode(text="Mary went home."), "LangChain Documents"
    else:
        from langchain_core.documents import Document

        other, own = Document(page_content="Mary went home."), "LlamaIndex nodes"
    with pytest.raises(
        RetrieverError, match=f"item 0 is a {type(other).__name__}: expected all chunk strings or all {own}"
    ):
        cls(qrag, [other])
    retriever = cls(qrag, TEXT, steps=1)
    with pytest.raises(RetrieverError, match="tokens long"):
        rows(retriever, "Where is Mary? " * 40)  # the tool's own check, reached through the framework
    if framework == "langchain":
        with pytest.raises(RetrieverError, match="the query must be a string, got int"):
            retriever.invoke(5)


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_bad_documents_are_one_clear_error(qrag: QRAGRetriever, framework: str) -> None:
    cls, _ = adapter(framework)
    if framework == "langchain":
        from langchain_core.documents import Document

        def doc(text: str, **metadata: Any) -> Any:
            return Document(page_content=text, metadata=metadata)
    else:
        from llama_index.core.schema import TextNode

        def doc(text: str, **metadata: Any) -> Any:
            return TextNode(text=text, metadata=metadata)

    with pytest.raises(
        RetrieverError, match=r"document 1: its metadata keys \['q_value', 'step'\] are set on every pick"
    ):
        cls(qrag, [doc("Mary went home."), doc("John left.", step=4, q_value=1, page=2)])
    with pytest.raises(RetrieverError, match="document 1 has no text"):
        cls(qrag, [doc("Mary went home."), doc(" \n")])
    with pytest.raises(RetrieverError, match="item 1 is a str"):
        cls(qrag, [doc("Mary went home."), "John left."])


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [
        ("rl.tool.adapters.langchain", "langchain_core.retrievers", "langchain"),
        ("rl.tool.adapters.llamaindex", "llama_index.core.retrievers", "llamaindex"),
    ],
)
def test_a_missing_framework_names_its_extra(monkeypatch: pytest.MonkeyPatch, module: str, blocked: str, extra: str):
    monkeypatch.setitem(sys.modules, blocked, None)  # makes its import fail, as if not installed
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ImportError, match=rf"pip install -e '\.\[{extra}\]'"):
        importlib.import_module(module)


def test_the_example_script_prints_the_tool_picks(tiny_run: Path, qrag: QRAGRetriever, capsys) -> None:
    need("langchain")
    need("llamaindex")
    load_script("rag_frameworks_example", "examples").main([str(tiny_run), "--device", "cpu", "--steps", "1"])
    out = capsys.readouterr().out.splitlines()
    want = {q: qrag.retrieve(q, BOOK, steps=1).picks[0] for q in QUESTIONS}
    for q, p in want.items():
        k = out.index(f"LangChain  {q}")
        assert out[k + 1] == f"  [step 1, Q={p.q_value:.4f}, chars {p.start}-{p.end}] {p.chunk}"
    p = want[QUESTIONS[0]]
    assert out[-1] == (
        f"LlamaIndex {QUESTIONS[0]}  score={p.q_value:.4f} step 1 persuasion_ch1_qa1.txt#{p.index}  {p.chunk}"
    )
