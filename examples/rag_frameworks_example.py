"""A trained run inside LangChain and LlamaIndex (docs/RETRIEVER_TOOL.md, "LangChain and LlamaIndex"):
the worked example's text and questions (data/examples/; docs/RETRIEVER_TOOL.md,
"Worked example"), retrieved through a LangChain chain and a LlamaIndex retriever over one loaded run.

    python examples/rag_frameworks_example.py runs/<demo run> [--steps 3] [--stop-threshold 0.85] [--device cpu]

Needs the extras ``langchain`` and ``llamaindex`` (scripts/install.sh installs both).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableLambda
from llama_index.core.schema import TextNode

from rl.tool.adapters.langchain import QRAGLangChainRetriever
from rl.tool.adapters.llamaindex import QRAGLlamaIndexRetriever
from rl.tool.retriever import QRAGRetriever, split_text

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "examples"


def context(docs: list[Any]) -> str:
    """What a reader prompt would get: the picks in the order taken, with their step, Q and span."""
    return "\n".join(
        f"  [step {d.metadata['step']}, Q={d.metadata['q_value']:.4f}, chars {d.metadata['char_start']}-"
        f"{d.metadata['char_end']}] {d.page_content}"
        for d in docs
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="a training run folder (its model_best.pt)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--stop-threshold", type=float, default=None)
    ap.add_argument("--device", default="auto")
    args = ap.parse_args(argv)
    text = (EXAMPLE / "persuasion_ch1_qa1.txt").read_text(encoding="utf-8")
    lines = (EXAMPLE / "persuasion_ch1_qa1.questions.jsonl").read_text(encoding="utf-8").splitlines()
    questions = [json.loads(line)["question"] for line in lines]

    qrag = QRAGRetriever.from_run(args.run, device=args.device)  # loaded once, shared by both adapters
    print(qrag.describe())

    # LangChain: the text bound as the haystack, the retriever piped into a formatting step
    retriever = QRAGLangChainRetriever(qrag, text, steps=args.steps, stop_threshold=args.stop_threshold)
    chain = retriever | RunnableLambda(context)
    for question, block in zip(questions, chain.batch(questions)):
        print(f"LangChain  {question}\n{block}")

    # LlamaIndex: the sentences as nodes carrying their own metadata, kept on the results
    sentences, _ = split_text(text)
    nodes = [
        TextNode(text=s, metadata={"file": "persuasion_ch1_qa1.txt", "sentence": k}) for k, s in enumerate(sentences)
    ]
    li = QRAGLlamaIndexRetriever(qrag, nodes, steps=args.steps, stop_threshold=args.stop_threshold)
    for hit in li.retrieve(questions[0]):
        m = hit.node.metadata
        print(
            f"LlamaIndex {questions[0]}  score={hit.score:.4f} step {m['step']} {m['file']}#{m['sentence']}  {hit.text}"
        )


if __name__ == "__main__":
    main()
