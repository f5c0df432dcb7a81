"""A trained Q-RAG run as a LangChain retriever (docs/RETRIEVER_TOOL.md, "LangChain and LlamaIndex").

    retriever = QRAGLangChainRetriever("runs/<run>", open("book.txt").read(), steps=3)
    docs = retriever.invoke("Where is Mary?")  # Documents in pick order, metadata step, q_value, ...
    docs = await retriever.ainvoke("Where is Mary?")  # the encoder runs in a worker thread
    tool = retriever_tool(retriever, "search_book", "Finds the sentences of the book that answer a question")

Needs the optional extra ``langchain`` (langchain-core).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rl.tool.adapters.bound import BoundRetriever, Hit, Options, bind_haystack, framework_keywords, load_retriever
from rl.tool.retriever import QRAGRetriever

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.prompts import PromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.tools import BaseTool, create_retriever_tool
except ImportError as e:
    raise ImportError(
        f"the LangChain adapter needs langchain-core ({e}): pip install -e '.[langchain]' "
        "(scripts/install.sh installs it)"
    ) from e


def read_document(item: Any) -> tuple[str, dict[str, Any]] | None:
    return (item.page_content, item.metadata) if isinstance(item, Document) else None


class QRAGLangChainRetriever(BaseRetriever):
    """The picks of a Q-RAG run over a haystack bound at construction, as LangChain Documents.

    ``run``: a run folder (its ``model_best.pt``, or ``model_last.pt`` with ``use_last``, on
    ``device``) or a loaded QRAGRetriever. ``haystack``: a text (split into chunks by ``split``), a
    list of chunk strings, or a list of Documents whose texts are the chunks, in this order. The stop
    rule and planner are QRAGRetriever.retrieve's; any other keyword must be one of LangChain's
    BaseRetriever (``name``, ``tags``, ``metadata``). Each returned Document holds the picked chunk, the
    source Document's metadata and id, and ``step`` (1 = first pick), ``q_value``, ``position`` (the
    chunk's index) and, for a text, ``char_start`` / ``char_end`` (``text[char_start:char_end]``)."""

    bound: BoundRetriever

    def __init__(
        self,
        run: str | Path | QRAGRetriever,
        haystack: str | list[str] | list[Document],
        *,
        steps: int | None = None,
        stop_threshold: float | None = None,
        planner: str = "greedy",
        beam_width: int = 4,
        beam_expand: int = 3,
        split: str | None = None,
        use_last: bool = False,
        device: str = "auto",
        **kwargs: Any,  # BaseRetriever's own: name, tags, metadata
    ):
        # pydantic ignores unknown fields: checked here, so that a misspelt option is not dropped
        own = set(BaseRetriever.model_fields)
        kwargs = framework_keywords(type(self).__name__, kwargs, own)
        options = Options(steps, stop_threshold, planner, beam_width, beam_expand)
        hay = bind_haystack(haystack, split, read_document, "LangChain Documents")
        bound = BoundRetriever(load_retriever(run, use_last, device), hay, options)
        super().__init__(bound=bound, **kwargs)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return as_documents(self.bound.query(query))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return as_documents(await self.bound.aquery(query))


def as_documents(hits: list[Hit]) -> list[Document]:
    return [
        Document(page_content=hit.pick.chunk, metadata=hit.metadata, id=getattr(hit.source, "id", None)) for hit in hits
    ]


# each pick as an agent reads it: its step and Q-value tell how sure the retriever was and in which order it found them
TOOL_DOCUMENT = "[step {step}, Q={q_value:.4f}] {page_content}"


def retriever_tool(
    retriever: QRAGLangChainRetriever,
    name: str = "qrag_search",
    description: str = "Finds, in several steps, the passages of the bound text that answer a question; "
    "give the question in plain words. Returns the passages in the order found, with their step and Q-value.",
    **options: Any,
) -> BaseTool:
    """The retriever as a tool for LangChain agents: langchain-core's ``create_retriever_tool`` (sync
    and async), each pick written as ``[step 1, Q=0.9411] <chunk>``. ``options``: that helper's
    ``document_prompt``, ``document_separator`` or ``response_format``."""
    options.setdefault("document_prompt", PromptTemplate.from_template(TOOL_DOCUMENT))
    return create_retriever_tool(retriever, name, description, **options)


__all__ = ["QRAGLangChainRetriever", "retriever_tool"]
