"""Each step's search over an indexed corpus: the best chunks by Q for a batch of states (docs/RETRIEVER_TOOL.md).

Both searches answer ``top(s_emb, selections, k)``: for every state, the k chunks of highest
Q(s, a) not already selected, with their exact Q, ordered by (−Q, corpus index) — the order in
which evaluation's ``argmax`` (first index among equals) and the beam planner break ties.

* :class:`ExactSearch` computes Q for every chunk, shard by shard, with the Q-network's own
  formula (``q_all`` after the rotation by each chunk's position code, rl/model/qnetwork.py). It
  is the only search for runs with positions: a relative code re-codes every chunk after each
  pick, so no fixed vector index can hold the rotated chunks.
* :class:`FaissSearch` (runs without positions, where Q(s, a) = ⟨E_s(s), u_a⟩ is a plain inner
  product) asks a FAISS inner-product index for candidates — exact (``IndexFlatIP``) or
  approximate (IVF, HNSW) — and re-scores them exactly as :class:`ExactSearch` would.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from envs.env import PositionSettings
from envs.positions import relative_codes_by_gap
from rl.model.qfunc import q_all
from rl.model.qnetwork import QNetwork
from rl.tool.shard_store import IndexStoreError, ShardStore
from runstore import StorageError, atomic_write

SEARCHES = ("auto", "exact", "flat", "ivf", "hnsw")
Top = tuple[np.ndarray, torch.Tensor]  # (corpus indices int64 [m], exact Q float32 [m] on the CPU)


@dataclass
class SearchSettings:
    """configs/retrieve.yaml's ``corpus_index`` search keys (their one default lives there)."""

    search: str
    flat_max: int
    ivf_nlist: int | None
    ivf_nprobe: int
    hnsw_m: int
    hnsw_ef_construction: int
    hnsw_ef_search: int
    candidates: int
    faiss_gpu: bool

    @classmethod
    def from_cfg(cls, node: Any) -> SearchSettings:
        return cls(**{k: node[k] for k in cls.__dataclass_fields__})


def stable_top(q: torch.Tensor, ids: np.ndarray, k: int) -> Top:
    """The k best (q, id) pairs ordered by (−q, id); a tie at the k-th value keeps the lower ids."""
    if len(q) > k:
        kth = torch.topk(q, k).values[-1]
        keep = torch.nonzero(q >= kth).flatten().cpu().numpy()  # more than k only on ties
        q, ids = q[torch.from_numpy(keep).to(q.device)], ids[keep]
    q = q.cpu()
    order = np.lexsort((ids, -q.numpy()))[:k]
    return ids[order], q[torch.from_numpy(order)]


def faiss_module() -> Any | None:
    """faiss if the optional extra ``index`` is installed, else None."""
    # its loader reports at INFO each instruction set it tries: "Could not load library with AVX2
    # support ..." is its expected fallback on a build without one, not an error
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    try:
        import faiss
    except ImportError:
        return None
    return faiss


class ExactSearch:
    """Q of every chunk, streamed over the shards. On a GPU the shards are copied to it once and
    kept there while they fit in half of its free memory; on the CPU they are read through the
    memory map (the page cache holds what the machine can)."""

    def __init__(self, store: ShardStore, qnet: QNetwork, pos: PositionSettings):
        if pos.processor == "random":
            raise IndexStoreError(
                "this run uses random position codes, drawn per sample from a short range "
                "(envs.max_chunks_count): a corpus index has no such sample; use a run with positions "
                "none, relative or absolute"
            )
        self.store, self.qnet, self.pos = store, qnet, pos
        self.on_device: dict[int, torch.Tensor] = {}

    def describe(self) -> str:
        how = "on the GPU" if self.qnet.device.type == "cuda" else "over the memory-mapped shards"
        why = (
            f" ({self.pos.processor} positions: every step re-codes every chunk)"
            if self.pos.processor != "none"
            else ""
        )
        return f"exact Q over all {self.store.n_chunks} chunks, streamed shard by shard {how}{why}"

    def _shard(self, k: int) -> torch.Tensor:
        hit = self.on_device.get(k)
        if hit is not None:
            return hit
        u = torch.from_numpy(self.store.embeddings(k)).to(self.qnet.device)
        if self.qnet.device.type == "cuda" and u.nbytes * 2 < torch.cuda.mem_get_info(self.qnet.device)[0]:
            self.on_device[k] = u
        return u

    def _codes(self, selected: Sequence[int]) -> np.ndarray | None:
        """p̂ of every corpus chunk in the state holding ``selected`` (the corpus is one long text)."""
        n = self.store.n_chunks
        if self.pos.processor == "none":
            return None
        if self.pos.processor == "absolute":
            return np.arange(n)
        return relative_codes_by_gap(n, selected, self.pos.step_size, self.pos.formula)

    def top(self, s_emb: torch.Tensor, selections: Sequence[Sequence[int]], k: int) -> list[Top]:
        out = []
        for i, sel in enumerate(selections):
            codes = self._codes(sel)
            best: Top = (np.zeros(0, dtype=np.int64), torch.zeros(0))
            for shard in range(self.store.n_shards):
                lo = self.store.start(shard)
                u = self._shard(shard)
                if codes is not None:
                    u = self.qnet.rope(u, torch.from_numpy(codes[lo : lo + len(u)]).to(u.device))
                q = q_all(s_emb[i], u)
                taken = [j - lo for j in sel if lo <= j < lo + len(u)]
                if taken:
                    q[torch.tensor(taken, device=q.device)] = float("-inf")
                ids = np.arange(lo, lo + len(u), dtype=np.int64)
                top_ids, top_q = stable_top(q, ids, k)
                best = stable_top(torch.cat([best[1], top_q]), np.concatenate([best[0], top_ids]), k)
            finite = torch.isfinite(best[1]).numpy()
            out.append((best[0][finite], best[1][torch.from_numpy(finite)]))
        return out


class FaissSearch:
    """FAISS candidates re-scored exactly: ``candidates`` per state (at least k), the selected
    chunks excluded; a state left with fewer than it needs (an IVF probe that found too few) is
    searched exactly instead, so the answer never holds fewer chunks than exact search's."""

    def __init__(self, store: ShardStore, qnet: QNetwork, index: Any, kind: str, settings: SearchSettings):
        self.store, self.qnet, self.index, self.kind, self.settings = store, qnet, index, kind, settings
        self.exact = ExactSearch(store, qnet, PositionSettings("none", 1, "linspace", 1))
        self.fallbacks = 0  # states searched exactly instead (reported by the demo)

    def describe(self) -> str:
        s = self.settings
        params = {
            "flat": "exact inner product",
            "ivf": f"nprobe {s.ivf_nprobe}",
            "hnsw": f"efSearch {s.hnsw_ef_search}",
        }
        where = "GPU" if "Gpu" in type(self.index).__name__ else "CPU"
        return (
            f"FAISS {self.kind} ({params[self.kind]}, {where}) over {self.store.n_chunks} chunks, "
            f"{s.candidates} candidates per step re-scored exactly"
        )

    def top(self, s_emb: torch.Tensor, selections: Sequence[Sequence[int]], k: int) -> list[Top]:
        want = max(k, self.settings.candidates)
        n = self.store.n_chunks
        depth = min(n, want + max(len(sel) for sel in selections))
        _, found = self.index.search(s_emb.float().cpu().numpy(), depth)
        out = []
        for i, sel in enumerate(selections):
            taken = set(sel)
            ids = np.array([j for j in found[i] if j >= 0 and j not in taken][:want], dtype=np.int64)
            if len(ids) < min(k, n - len(sel)):
                self.fallbacks += 1
                out += self.exact.top(s_emb[i : i + 1], [sel], k)
                continue
            u = torch.from_numpy(self.store.rows(ids)).to(self.qnet.device)
            out.append(stable_top(q_all(s_emb[i], u), ids, k))
        return out


# -- building and loading a FAISS index ------------------------------------------------------


def faiss_params(kind: str, n: int, s: SearchSettings) -> dict[str, Any]:
    """What a built FAISS index depends on (recorded in the manifest; query-time knobs excluded)."""
    if kind == "ivf":
        if s.ivf_nlist is not None and s.ivf_nlist > n:  # k-means cannot make more lists than points
            raise IndexStoreError(
                f"corpus_index.ivf_nlist={s.ivf_nlist}: more inverted lists than the {n} chunks to train them "
                f"on; FAISS wants 39 chunks per list (at most {max(1, n // 39)} here): lower it, or leave it null"
            )
        nlist = s.ivf_nlist or max(1, min(n // 39, int(4 * math.sqrt(n))))  # FAISS wants ≥ 39 points per list
        return {"kind": kind, "n_chunks": n, "nlist": int(nlist)}
    if kind == "hnsw":
        return {"kind": kind, "n_chunks": n, "m": s.hnsw_m, "ef_construction": s.hnsw_ef_construction}
    return {"kind": kind, "n_chunks": n}


def _add_shards(index: Any, store: ShardStore) -> None:
    for k in range(store.n_shards):
        index.add(np.ascontiguousarray(store.embeddings(k)))


def build_faiss(faiss: Any, store: ShardStore, params: dict[str, Any]) -> Any:
    d = int(store.manifest["encoder"]["dim"])
    kind, n = params["kind"], store.n_chunks
    if kind == "flat":
        index = faiss.IndexFlatIP(d)
    elif kind == "ivf":
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, params["nlist"], faiss.METRIC_INNER_PRODUCT)
        # k-means on evenly spaced rows, 64 per list (FAISS asks for ≥ 39): deterministic, and a
        # million-chunk corpus trains on a quarter of its rows
        sample = np.linspace(0, n - 1, min(n, 64 * params["nlist"])).astype(np.int64)
        index.train(store.rows(np.unique(sample)))
    else:
        index = faiss.IndexHNSWFlat(d, params["m"], faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = params["ef_construction"]
    _add_shards(index, store)
    return index


def _saved_faiss(faiss: Any, store: ShardStore, kind: str, params: dict[str, Any]) -> Any | None:
    """The FAISS index saved for ``params``, or None (none saved, or its file damaged: rebuilt)."""
    path = store.folder / f"faiss-{kind}.index"
    if store.manifest.get("faiss", {}).get(kind) != params or not path.is_file():
        return None
    try:
        index = faiss.read_index(str(path))
    except RuntimeError as e:  # FAISS's reader on a truncated or foreign file
        print(f"[index] warning: {path} is damaged ({str(e).splitlines()[0]}); building it again", file=sys.stderr)
        return None
    return index if index.ntotal == store.n_chunks and index.d == store.manifest["encoder"]["dim"] else None


def _save_faiss(faiss: Any, store: ShardStore, kind: str, params: dict[str, Any], index: Any) -> None:
    """Keep a built FAISS index in the folder for the next query; a folder that cannot take it (read
    only, full) is searched with it in memory."""
    path = store.folder / f"faiss-{kind}.index"
    try:
        # serialised first, then written by runstore's atomic writer (never through a planted link)
        atomic_write(path, lambda f: f.write(memoryview(faiss.serialize_index(index))))
        store.manifest.setdefault("faiss", {})[kind] = params
        store.save_manifest()
    except StorageError as e:
        print(f"[index] warning: {e}; the FAISS {kind} index is searched in memory, not saved", file=sys.stderr)


def open_search(
    store: ShardStore, qnet: QNetwork, pos: PositionSettings, s: SearchSettings
) -> ExactSearch | FaissSearch:
    """The search ``s.search`` asks for; ``auto``: exact for runs with positions or without faiss,
    else FAISS flat up to ``flat_max`` chunks (torch on the GPU instead when faiss has no GPU
    support) and IVF beyond. A built FAISS index is saved in the folder and reused while its
    parameters and the corpus are unchanged."""
    if s.search not in SEARCHES:
        raise IndexStoreError(f"corpus_index.search={s.search!r}: expected one of {', '.join(SEARCHES)}")
    faiss = faiss_module()
    gpu_faiss = faiss is not None and hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0
    kind = s.search
    if kind == "auto":
        n = store.n_chunks
        if pos.processor != "none" or faiss is None:
            kind = "exact"
        elif n <= s.flat_max:
            kind = "exact" if qnet.device.type == "cuda" and not gpu_faiss else "flat"
        else:
            kind = "ivf"
    if kind == "exact":
        return ExactSearch(store, qnet, pos)
    if pos.processor != "none":
        raise IndexStoreError(
            f"corpus_index.search={kind}: this run has {pos.processor} positions, so Q is no plain inner "
            "product (each step re-codes every chunk); use search=exact or auto"
        )
    if faiss is None:
        raise IndexStoreError(
            f"corpus_index.search={kind} needs faiss: pip install -e '.[index]' (faiss-cpu), or use search=exact"
        )
    params = faiss_params(kind, store.n_chunks, s)
    index = _saved_faiss(faiss, store, kind, params)
    if index is None:
        print(f"[index] building the FAISS {kind} index over {store.n_chunks} chunks", file=sys.stderr, flush=True)
        index = build_faiss(faiss, store, params)
        _save_faiss(faiss, store, kind, params, index)
    if kind == "ivf":
        index.nprobe = s.ivf_nprobe
    elif kind == "hnsw":
        index.hnsw.efSearch = s.hnsw_ef_search
    if gpu_faiss and s.faiss_gpu and kind != "hnsw" and qnet.device.type == "cuda":  # FAISS has no GPU HNSW
        index = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), qnet.device.index or 0, index)
    return FaissSearch(store, qnet, index, kind, s)
