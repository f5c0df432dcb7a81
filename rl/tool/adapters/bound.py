"""What the LangChain and LlamaIndex adapters share, without either framework: a QRAGRetriever with a
haystack, a stop rule and a planner bound at construction, and the metadata of each pick.

A text is split into chunks and character spans once, here, with the tool's own ``split_text``, and
every query sends that chunk list: the picks are those of ``QRAGRetriever.retrieve(question, text)``
(tests/tool/test_adapters.py compares them) without splitting a long text again for each question.
Framework documents become the chunks in the order given. That order is their position in the
haystack, which Q-RAG's relative position codes read (DESIGN §3): a reordered list is another haystack.
"""

from __future__ import annotations

import asyncio
import difflib
import math
import numbers
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rl.tool.retriever import PLANNERS, Pick, QRAGRetriever, RetrieverError, split_text

# the metadata keys every returned document carries (the span keys only when a text was bound)
PICK_KEYS = ("step", "q_value", "position", "char_start", "char_end")
# the keywords both adapters take besides ``run`` and ``haystack`` (the framework's own come after them)
OWN_KEYWORDS = ("steps", "stop_threshold", "planner", "beam_width", "beam_expand", "split", "use_last", "device")

# One episode at a time in a process: the frameworks call retrievers from worker threads
# (LangChain's batch and ainvoke), and on a GPU the Q-network replays CUDA graphs whose static
# buffers and memory pool all its calls share (rl/model/fast/cuda_graphs.py).
_EPISODE = threading.Lock()

# a framework's reader of its own document objects: (text, metadata), or None for anything else
ReadDocument = Callable[[Any], "tuple[str, dict[str, Any]] | None"]


@dataclass(frozen=True)
class Options:
    """The stop rule and the planner, as ``QRAGRetriever.retrieve`` takes them. The retriever checks
    them again at each query; checked here too, a wrong argument fails where it is written."""

    steps: int | None = None  # picks at most; None: the run's T
    stop_threshold: float | None = None  # stop before a step t > 0 whose best Q is ≤ it (greedy only)
    planner: str = "greedy"
    beam_width: int = 4
    beam_expand: int = 3

    def __post_init__(self) -> None:
        if self.planner not in PLANNERS:
            raise RetrieverError(f"planner={self.planner!r}: expected one of {', '.join(PLANNERS)}")
        # numbers.Integral / numbers.Real take numpy's scalars too (np.int64 from an array of budgets);
        # they are stored as Python numbers, the types QRAGRetriever.retrieve checks for
        for name in ("steps", "beam_width", "beam_expand"):
            value = getattr(self, name)
            if value is None and name == "steps":
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise RetrieverError(f"{name}={value!r}: expected an integer ≥ 1")
            object.__setattr__(self, name, int(value))
        if self.stop_threshold is not None:
            if isinstance(self.stop_threshold, bool) or not isinstance(self.stop_threshold, numbers.Real):
                raise RetrieverError(f"stop_threshold={self.stop_threshold!r}: expected a number")
            if not math.isfinite(self.stop_threshold):
                raise RetrieverError(f"stop_threshold={self.stop_threshold!r}: expected a finite number")
            if self.planner == "beam":
                raise RetrieverError("stop_threshold works with the greedy planner only (as in evaluation)")
            object.__setattr__(self, "stop_threshold", float(self.stop_threshold))


def framework_keywords(adapter: str, given: dict[str, Any], accepted: Iterable[str]) -> dict[str, Any]:
    """``given`` when each is a keyword of the framework's own BaseRetriever (``accepted``), else a
    RetrieverError naming the others: a misspelt option (``step=``, ``stop_treshold=``) must not
    vanish into the framework's keywords and leave the run's defaults in force."""
    accepted = sorted(accepted)
    unknown = sorted(set(given) - set(accepted))
    if not unknown:
        return given
    words = []
    for name in unknown:
        close = difflib.get_close_matches(name, [*OWN_KEYWORDS, *accepted], n=1)
        words.append(f"{name}=" + (f" (did you mean {close[0]}=?)" if close else ""))
    raise RetrieverError(
        f"{adapter} has no keyword {', '.join(words)}; it takes {', '.join(OWN_KEYWORDS)} "
        f"and its framework's {', '.join(accepted)}"
    )


@dataclass(frozen=True)
class Haystack:
    """The chunks retrieved from, with their character spans when a text was bound, and the
    framework documents they came from when documents were bound."""

    chunks: list[str]
    spans: list[tuple[int, int]] | None
    sources: list[Any] | None
    source_metadata: list[dict[str, Any]] | None


def bind_haystack(haystack: Any, split: str | None, read_document: ReadDocument, documents: str) -> Haystack:
    """A text (split by ``split``, by default into sentences), a list of chunk strings, or a list of
    the framework's documents (``documents`` names them in errors) as a :class:`Haystack`."""
    if isinstance(haystack, str):
        if not haystack.strip():
            raise RetrieverError("the haystack text is empty: there is nothing to retrieve from")
        chunks, spans = split_text(haystack, "sentences" if split is None else split)
        return Haystack(chunks, spans, None, None)
    if not isinstance(haystack, (list, tuple)):
        raise RetrieverError(
            f"haystack: expected a text, a list of chunk strings or a list of {documents}, got {type(haystack).__name__}"
        )
    if split is not None:  # a list is never split: saying nothing would retrieve from other chunks than asked
        raise RetrieverError(
            f"split={split!r} splits a text haystack; this haystack is a list, whose items are the chunks "
            "as given (pass the text itself to have it split, or leave split= out)"
        )
    if not haystack:
        raise RetrieverError("the haystack is an empty list: there is nothing to retrieve from")
    if isinstance(haystack[0], str):  # the first item says which kind of list this is
        return Haystack(chunk_strings(haystack, documents), None, None, None)
    texts, metadata = [], []
    for k, item in enumerate(haystack):
        read = read_document(item)
        if read is None:
            raise wrong_item(k, item, documents)
        text, meta = read
        if not text.strip():
            raise RetrieverError(f"haystack document {k} has no text")
        taken = sorted(set(meta) & set(PICK_KEYS))
        if taken:
            raise RetrieverError(
                f"haystack document {k}: its metadata keys {taken} are set on every pick (rename them)"
            )
        texts.append(text)
        metadata.append(dict(meta))
    return Haystack(texts, None, list(haystack), metadata)


def chunk_strings(items: list[Any] | tuple[Any, ...], documents: str) -> list[str]:
    for k, item in enumerate(items):
        if not isinstance(item, str):
            raise wrong_item(k, item, documents)
        if not item.strip():
            raise RetrieverError(f"haystack chunk {k} is empty")
    return list(items)


def wrong_item(k: int, item: Any, documents: str) -> RetrieverError:
    return RetrieverError(
        f"haystack item {k} is a {type(item).__name__}: expected all chunk strings or all {documents}"
    )


def load_retriever(run: str | Path | QRAGRetriever, use_last: bool, device: str) -> QRAGRetriever:
    """``run`` itself when it is a loaded retriever, else the run folder's retriever."""
    if isinstance(run, QRAGRetriever):
        return run
    if not isinstance(run, (str, Path)):
        raise RetrieverError(f"run: expected a run folder or a QRAGRetriever, got {type(run).__name__}")
    return QRAGRetriever.from_run(run, use_last=use_last, device=device)


@dataclass
class Hit:
    """One pick with the metadata its document gets, and the document it came from (or None)."""

    pick: Pick
    metadata: dict[str, Any]
    source: Any


class BoundRetriever:
    """A QRAGRetriever with its haystack and options bound: what both adapters query."""

    def __init__(self, retriever: QRAGRetriever, haystack: Haystack, options: Options):
        self.retriever, self.haystack, self.options = retriever, haystack, options

    def query(self, question: str) -> list[Hit]:
        """The picks of ``question`` in the order taken."""
        if not isinstance(question, str):
            raise RetrieverError(f"the query must be a string, got {type(question).__name__}")
        hay = self.haystack
        with _EPISODE:
            result = self.retriever.retrieve(question, hay.chunks, **asdict(self.options))
        hits = []
        for p in result.picks:
            own: dict[str, Any] = {"step": p.step, "q_value": p.q_value, "position": p.index}
            if hay.spans is not None:
                p.start, p.end = hay.spans[p.index]
                own["char_start"], own["char_end"] = p.start, p.end
            source = None if hay.sources is None else hay.sources[p.index]
            base = {} if hay.source_metadata is None else hay.source_metadata[p.index]
            hits.append(Hit(p, {**base, **own}, source))
        return hits

    async def aquery(self, question: str) -> list[Hit]:
        """``query`` in a worker thread: the event loop goes on while the encoder runs, and
        concurrent queries wait for the episode lock in their threads, not in the loop."""
        return await asyncio.to_thread(self.query, question)
