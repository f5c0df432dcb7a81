"""A trained Q-RAG run as a LlamaIndex retriever (docs/RETRIEVER_TOOL.md, "LangChain and LlamaIndex").

    retriever = QRAGLlamaIndexRetriever("runs/<run>", open("book.txt").read(), steps=3)
    nodes = retriever.retrieve("Where is Mary?")  # NodeWithScore in pick order, score = Q-value

Needs the optional extra ``llamaindex`` (llama-index-core).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from rl.tool.adapters.bound import (
    PICK_KEYS,
    BoundRetriever,
    Hit,
    Options,
    bind_haystack,
    framework_keywords,
    load_retriever,
)
from rl.tool.retriever import QRAGRetriever

try:
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle, TextNode
except ImportError as e:
    raise ImportError(
        f"the LlamaIndex adapter needs llama-index-core ({e}): pip install -e '.[llamaindex]' "
        "(scripts/install.sh installs it)"
    ) from e


def read_document(item: Any) -> tuple[str, dict[str, Any]] | None:
    node = item.node if isinstance(item, NodeWithScore) else item
    return (node.get_content(metadata_mode=MetadataMode.NONE), node.metadata) if isinstance(node, BaseNode) else None


def as_node(hit: Hit) -> BaseNode:
    """The picked chunk as a node: a copy of its source node (id, relationships, templates kept), or a
    TextNode. The pick's own keys are hidden from the LLM and embedding views of the metadata, which
    LlamaIndex's synthesizers put into the prompt: they describe the retrieval, not the text."""
    own = [k for k in PICK_KEYS if k in hit.metadata]
    if hit.source is None:
        p = hit.pick
        return TextNode(
            text=p.chunk,
            metadata=hit.metadata,
            start_char_idx=p.start,
            end_char_idx=p.end,
            excluded_llm_metadata_keys=own,
            excluded_embed_metadata_keys=own,
        )
    src = hit.source.node if isinstance(hit.source, NodeWithScore) else hit.source
    return src.model_copy(
        deep=True,
        update={
            "metadata": hit.metadata,
            "excluded_llm_metadata_keys": [*src.excluded_llm_metadata_keys, *own],
            "excluded_embed_metadata_keys": [*src.excluded_embed_metadata_keys, *own],
        },
    )


class QRAGLlamaIndexRetriever(BaseRetriever):
    """The picks of a Q-RAG run over a haystack bound at construction, as LlamaIndex nodes.

    ``run``: a run folder (its ``model_best.pt``, or ``model_last.pt`` with ``use_last``, on
    ``device``) or a loaded QRAGRetriever. ``haystack``: a text (split into chunks by ``split``), a
    list of chunk strings, or a list of nodes or Documents (or NodeWithScore) whose texts are the
    chunks, in this order. The stop rule and planner are QRAGRetriever.retrieve's; any other keyword
    must be one of LlamaIndex's BaseRetriever (``callback_manager``, ``verbose``, ...). Each result is a
    NodeWithScore whose score is the pick's Q-value and whose node holds the chunk, the source node's
    metadata and ``step`` (1 = first pick), ``q_value``, ``position`` (the chunk's index) and, for a
    text, ``char_start`` / ``char_end`` (also the TextNode's ``start_char_idx`` / ``end_char_idx``).
    The question is the query bundle's ``query_str`` (Q-RAG embeds its own state: a bundle's
    embedding is not used)."""

    def __init__(
        self,
        run: str | Path | QRAGRetriever,
        haystack: str | list[str] | list[BaseNode] | list[NodeWithScore],
        *,
        steps: int | None = None,
        stop_threshold: float | None = None,
        planner: str = "greedy",
        beam_width: int = 4,
        beam_expand: int = 3,
        split: str | None = None,
        use_last: bool = False,
        device: str = "auto",
        **kwargs: Any,  # BaseRetriever's own: callback_manager, verbose, object_map, objects
    ):
        own = set(inspect.signature(BaseRetriever.__init__).parameters) - {"self"}
        kwargs = framework_keywords(type(self).__name__, kwargs, own)
        options = Options(steps, stop_threshold, planner, beam_width, beam_expand)
        hay = bind_haystack(haystack, split, read_document, "LlamaIndex nodes or Documents")
        self.bound = BoundRetriever(load_retriever(run, use_last, device), hay, options)
        super().__init__(**kwargs)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return as_nodes(self.bound.query(query_bundle.query_str))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        # LlamaIndex's default runs _retrieve in the event loop, which the encoder would block
        return as_nodes(await self.bound.aquery(query_bundle.query_str))


def as_nodes(hits: list[Hit]) -> list[NodeWithScore]:
    return [NodeWithScore(node=as_node(hit), score=hit.pick.q_value) for hit in hits]


__all__ = ["QRAGLlamaIndexRetriever"]
