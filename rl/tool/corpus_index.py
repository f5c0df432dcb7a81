"""A corpus embedded once, on disk, and searched by any number of questions (docs/RETRIEVER_TOOL.md, *Corpus index*).

    retriever = QRAGRetriever.from_run("runs/<run>")
    CorpusIndex.build(retriever, "index/", ["passages.jsonl"])  # resumes if interrupted
    result = CorpusIndex.open(retriever, "index/").retrieve("Who wrote ...?")

Building embeds the chunks with the run's chunk encoder exactly as evaluation embeds a sample's
chunks (the Q-network's own tokenisation and encoding path, ``QNetwork.embed_chunks``), one shard at
a time, into an index folder (rl/tool/shard_store.py). Retrieval runs evaluation's episode on the
whole corpus as one sample: the state ``[CLS] q [SEP] c_j1 [SEP] …`` is spliced by
``rl.model.tokens.splice.state_ids`` from the question's ids (``SampleInput.question_ids``, as every
state's) and the picked chunks' and embedded by the state encoder, each step takes the best
available chunk by Q (greedy, first index among equals), the Q-value stop rule and the beam planner
(``rl.eval.beam.beam_search``) are evaluation's, and only the search over the chunks differs
(rl/tool/corpus_search.py). With the exact search the picks equal QRAGRetriever's on the same chunk
list (tests/tool/test_corpus_index.py).
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf
from tqdm.auto import tqdm

from rl.eval.beam import beam_search
from rl.model.qnetwork import QNetwork
from rl.model.tokens.tokenize import SampleTokens, encode_texts
from rl.run.config import PROJECT_ROOT
from rl.tool.corpus_files import TITLE_SEPS, Chunk, fingerprint, iter_chunks, resolve_files
from rl.tool.corpus_search import ExactSearch, FaissSearch, SearchSettings, open_search
from rl.tool.retriever import Pick, QRAGRetriever, Retrieval, RetrieverError
from rl.tool.shard_store import MANIFEST, IndexStoreError, ShardStore


@dataclass
class CorpusPick(Pick):
    """A :class:`Pick` from a corpus: ``index`` is the chunk's place in the corpus, ``start``/``end``
    its character span in its text file; ``source`` the file, ``line`` its line there, ``id`` and
    ``title`` a JSONL record's own."""

    source: str = ""
    line: int = 0
    id: Any = None
    title: str | None = None


def default_settings() -> Any:
    """configs/retrieve.yaml's ``corpus_index`` node (the one place its defaults are written)."""
    return OmegaConf.load(PROJECT_ROOT / "configs" / "retrieve.yaml").corpus_index


def encoder_identity(qnet: QNetwork, cfg: Any) -> dict[str, Any]:
    """Everything a chunk embedding depends on; ``sha256`` hashes the chunk encoder's weights,
    so a retrained checkpoint under the same path is caught."""
    h = hashlib.sha256()
    for name, t in sorted(qnet.action_enc.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    model = cfg.algo.model
    return {
        "model": str(model.name),
        "sha256": h.hexdigest(),
        "pooling": str(model.get("pooling", "mean")),
        "pool_scale": float(model.get("pool_scale", 0.1)),
        "normalize": bool(model.get("normalize", False)),
        "passage_prefix": qnet.inputs.passage_prefix,
        "max_action_length": qnet.inputs.layout.action_cap,
        "dim": qnet.dim,
    }


def _check_same(store: ShardStore, key: str, want: Any, fix: str) -> None:
    have = store.manifest.get(key)
    if have != want:
        diff = (
            [k for k in want if have.get(k) != want.get(k)]
            if isinstance(want, dict) and isinstance(have, dict)
            else None
        )
        what = f" ({', '.join(diff)} differ)" if diff else ""
        raise IndexStoreError(f"index={store.folder}: built with another {key}{what}: {fix}")


def _check_unchanged(files: Sequence[Path], recorded: list[dict[str, Any]]) -> None:
    if fingerprint(files) != recorded:
        raise IndexStoreError(
            f"corpus={', '.join(map(str, files))}: changed while it was being indexed; run the command "
            "again once nothing writes to it (with a new index folder if shards were already written)"
        )


class CorpusIndex:
    """An index folder opened for retrieval with a loaded retriever; see the module docstring."""

    def __init__(self, retriever: QRAGRetriever, store: ShardStore, search: ExactSearch | FaissSearch):
        self.retriever, self.store, self.search = retriever, store, search
        self.qnet: QNetwork = retriever.qnet
        self._chunk_ids: dict[int, list[int]] = {}  # content ids of chunks picked so far (state splicing)

    # -- building ---------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        retriever: QRAGRetriever,
        folder: str | Path,
        corpus: str | Sequence[str],
        split: str = "sentences",
        settings: Any = None,
        progress: bool = True,
        on_shard: Callable[[int], None] | None = None,
    ) -> ShardStore:
        """Embed ``corpus`` into ``folder`` (new, empty, or an interrupted build of the same corpus
        with the same run, which continues after its last complete shard). ``settings``: the
        ``corpus_index`` keys (default: configs/retrieve.yaml's). ``on_shard(k)`` is called after
        shard k is on disk."""
        s = default_settings() if settings is None else settings
        folder = Path(folder).expanduser()
        files = resolve_files(corpus)
        envs_name = str(retriever.cfg.envs.name)
        title_sep = s.title_sep if s.title_sep is not None else TITLE_SEPS.get(envs_name)
        header = {
            "run": str(retriever.cfg.pretrained_path),
            "checkpoint": str(retriever.checkpoint),
            "encoder": encoder_identity(retriever.qnet, retriever.cfg),
            "chunking": {"split": split, "title_sep": title_sep, "text_key": str(s.text_key)},
            "corpus": fingerprint(files),
            "shard_size": int(s.shard_size),
        }
        store = None
        if (folder / MANIFEST).is_file():
            store = ShardStore.open(folder)
            _check_same(store, "encoder", header["encoder"], "this run's chunk encoder differs; use a new index folder")
            new = "name a new index folder (or remove this one)"
            _check_same(store, "chunking", header["chunking"], f"the chunks would differ; {new}")
            _check_same(store, "corpus", header["corpus"], f"the corpus files changed since; {new}")
            _check_same(store, "shard_size", header["shard_size"], f"resume with the same shard_size or {new}")
            if store.manifest["complete"]:
                return store

        def chunks() -> Iterator[Chunk]:
            return iter_chunks(files, split, title_sep, str(s.text_key))

        total = sum(1 for _ in chunks())  # reads the whole corpus once: a bad line stops us before any embedding
        if total == 0:
            raise IndexStoreError(f"corpus={', '.join(map(str, files))}: holds no chunk")
        _check_unchanged(files, header["corpus"])
        if store is None:  # only now: a refused corpus leaves no folder that would block the corrected rerun
            store = ShardStore.create(folder, header)
        done = store.n_chunks
        bar = tqdm(total=total, initial=done, unit="chunk", desc="index", disable=not progress, file=sys.stderr)
        buf: list[Any] = []
        try:
            for k, chunk in enumerate(chunks()):
                if k < done:
                    continue
                buf.append(chunk)
                if len(buf) == store.manifest["shard_size"] or k == total - 1:
                    cls._write_shard(retriever.qnet, store, buf, [str(p) for p in files])
                    bar.update(len(buf))
                    buf = []
                    if on_shard is not None:
                        on_shard(store.n_shards - 1)
        finally:
            bar.close()
        _check_unchanged(files, header["corpus"])  # records appended meanwhile would be indexed uncounted
        store.manifest["complete"] = True
        store.save_manifest()
        return store

    @staticmethod
    @torch.no_grad()
    def _write_shard(qnet: QNetwork, store: ShardStore, chunks: list[Any], files: list[str]) -> None:
        # evaluation's chunk embeddings (a GPU tokenises a large shard on a thread while it embeds)
        hay, emb = qnet.embed_chunks([c.text for c in chunks])
        shard_tokens = hay.count + qnet.inputs.layout.n_special * len(
            chunks
        )  # each chunk's tokens with its special tokens
        records = [{"text": c.text, **c.meta(), "source": files[c.source]} for c in chunks]
        store.add_shard(emb.float().cpu().numpy(), records, shard_tokens)

    # -- opening ----------------------------------------------------------------------------
    @classmethod
    def open(cls, retriever: QRAGRetriever, folder: str | Path, settings: Any = None) -> CorpusIndex:
        """A complete index folder built with this run's chunk encoder, ready to retrieve."""
        s = default_settings() if settings is None else settings
        store = ShardStore.open(Path(folder).expanduser())
        _check_same(
            store,
            "encoder",
            encoder_identity(retriever.qnet, retriever.cfg),
            f"this run's chunk encoder differs from the one of {store.manifest.get('checkpoint')}; "
            "use that run, or build a new index with this one",
        )
        if not store.manifest["complete"]:
            raise IndexStoreError(
                f"index={store.folder}: indexing stopped after {store.n_chunks} chunks; run the same command "
                "with corpus=<files> again to finish it"
            )
        qnet = retriever.qnet
        return cls(retriever, store, open_search(store, qnet, qnet.positions, SearchSettings.from_cfg(s)))

    def describe(self) -> str:
        m = self.store.manifest
        return f"index {self.store.folder}: {m['n_chunks']} chunks, {m['tokens']} tokens; {self.search.describe()}"

    # -- retrieval ----------------------------------------------------------------------------
    def retrieve(self, question: str, **kwargs: Any) -> Retrieval:
        return self.retrieve_batch([question], **kwargs)[0]

    @torch.no_grad()
    def retrieve_batch(
        self,
        questions: Sequence[str],
        steps: int | None = None,
        stop_threshold: float | None = None,
        planner: str = "greedy",
        beam_width: int = 4,
        beam_expand: int = 3,
        on_result: Callable[[Retrieval], None] | None = None,
    ) -> list[Retrieval]:
        """QRAGRetriever.retrieve_batch's rules over the whole corpus (its arguments, no text):
        greedy questions stepped together in groups of the run's ``eval_group_size``."""
        questions = list(questions)
        if not questions:
            raise RetrieverError("no question given")
        for k, q in enumerate(questions):
            if not isinstance(q, str) or not q.strip():
                raise RetrieverError(f"question {k + 1} is empty")
            self.retriever.check_question(q)
        settings = self.retriever.settings(steps, stop_threshold, planner, beam_width, beam_expand)
        out: list[Retrieval] = []
        group = 1 if planner == "beam" else max(1, settings.group_size)
        for lo in range(0, len(questions), group):
            batch = questions[lo : lo + group]
            if planner == "beam":
                found = [self._beam(batch[0], settings, int(beam_width), int(beam_expand))]
            else:
                found = self._greedy(batch, settings)
            for question, (picked, q_values, q_count) in zip(batch, found):
                out.append(self._result(question, picked, q_values, q_count))
                if on_result is not None:
                    on_result(out[-1])
        return out

    def _state(self, q_ids: list[int], selected: Sequence[int]) -> list[int]:
        """Evaluation's state for ``selected``: ``state_ids`` over the question and the picked
        chunks' content ids (each chunk tokenised alone, as the Rust tokenizer does in a batch)."""
        inputs = self.qnet.inputs
        for j in selected:
            if j not in self._chunk_ids:
                ids, _ = encode_texts(inputs.tokenizer, [self.store.chunk(j)["text"]], inputs.layout.content_cut)
                self._chunk_ids[j] = ids[0]
        return inputs.state_ids_of(SampleTokens(q_ids, self._chunk_ids), selected, evaluation=True)

    def _greedy(self, questions: list[str], settings: Any) -> list[tuple[list[int], list[float], int]]:
        """greedy_episodes' loop (rl/eval/greedy.py) with the corpus as every episode's sample."""
        qnet, n = self.qnet, self.store.n_chunks
        tokens = [self.qnet.inputs.question_ids(q) for q in questions]
        picked: list[list[int]] = [[] for _ in questions]
        q_log: list[list[float]] = [[] for _ in questions]
        active = list(range(len(questions)))
        while active:
            states = [self._state(tokens[s][0], picked[s]) for s in active]
            s_emb = qnet.state_embeddings(states)
            tops = self.search.top(s_emb, [picked[s] for s in active], 1)
            still = []
            for (ids, q), s in zip(tops, active):
                a, qa = int(ids[0]), float(q[0])
                if settings.stop_q_threshold is not None and picked[s] and qa <= settings.stop_q_threshold:
                    continue  # the Q-value stopping rule ends this episode before step t
                picked[s].append(a)
                q_log[s].append(qa)
                if len(picked[s]) < min(settings.max_steps, n):  # the env's done: T picks or nothing left
                    still.append(s)
            active = still
        return [(picked[s], q_log[s], tokens[s][1]) for s in range(len(questions))]

    def _beam(self, question: str, settings: Any, width: int, expand: int) -> tuple[list[int], list[float], int]:
        """beam_episodes (rl/eval/beam.py): ``beam_search`` with a Q-function whose rows hold the
        exact Q of each member's best ``expand`` available chunks and −∞ elsewhere: the planner
        reads nothing else of a row."""
        qnet, n = self.qnet, self.store.n_chunks
        q_ids, q_count = self.qnet.inputs.question_ids(question)

        def q_fn(selections: Sequence[Sequence[int]]) -> torch.Tensor:
            s_emb = qnet.state_embeddings([self._state(q_ids, sel) for sel in selections])
            rows = torch.full((len(selections), n), float("-inf"))
            for i, (ids, q) in enumerate(self.search.top(s_emb, selections, expand)):
                rows[i, torch.from_numpy(ids)] = q
            return rows

        best = beam_search(q_fn, n, settings.max_steps, width, expand)
        return best.selected, best.q_values, q_count

    def _result(self, question: str, picked: list[int], q_values: list[float], q_count: int) -> Retrieval:
        picks = []
        for t, (j, q) in enumerate(zip(picked, q_values)):
            c = self.store.chunk(j)
            picks.append(
                CorpusPick(t + 1, j, c["text"], q, c["start"], c["end"], c["source"], c["line"], c["id"], c["title"])
            )
        # evaluation's text_len: question + every chunk, each with its special tokens
        n_special = self.qnet.inputs.layout.n_special
        return Retrieval(question, picks, self.store.n_chunks, q_count + n_special + int(self.store.manifest["tokens"]))


def recall_of(approx: Sequence[Retrieval], exact: Sequence[Retrieval]) -> dict[str, float]:
    """How much of the exact search's picks an approximate search found: the mean over questions
    of |approx picks ∩ exact picks| / |exact picks|, and the share of questions whose pick lists
    are identical (same chunks, same order)."""
    shares, same = [], 0
    for a, e in zip(approx, exact):
        ea, ee = [p.index for p in a.picks], [p.index for p in e.picks]
        shares.append(len(set(ea) & set(ee)) / max(1, len(ee)))
        same += ea == ee
    return {"recall_of_exact_picks": float(np.mean(shares)), "identical_pick_lists": same / max(1, len(exact))}
