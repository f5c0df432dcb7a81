"""An index folder on disk: a manifest and shards of chunk embeddings and texts (docs/RETRIEVER_TOOL.md).

    <folder>/manifest.json                 identity of the run, encoder, chunking and corpus; the shard list
    <folder>/shard-00000.emb.npy           float32 [n, d] un-rotated chunk embeddings u_j
    <folder>/shard-00000.chunks.jsonl      one line per chunk: its text and where it came from
    <folder>/shard-00000.offsets.npy       int64 [n + 1] byte offsets of those lines (random access)

Every file is written under a temporary name and renamed into place, and a shard counts only once
the manifest lists it (the manifest is replaced last, also by a rename): a process killed at any
moment leaves the shards the manifest lists whole, and indexing resumes after the last of them.
Embeddings are memory-mapped when read, so a query process holds only what it touches.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

MANIFEST = "manifest.json"
FORMAT = 1


class IndexStoreError(ValueError):
    """An index folder that cannot be used as asked (missing, foreign, built for another run or corpus)."""


def atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


class ShardStore:
    """The shards of one index folder and its manifest (a plain dict, written as JSON)."""

    def __init__(self, folder: Path, manifest: dict[str, Any]):
        self.folder, self.manifest = folder, manifest
        self._mmaps: dict[int, np.ndarray] = {}
        self._starts = np.cumsum([0] + [s["n"] for s in manifest["shards"]])

    # -- opening --------------------------------------------------------------------------
    @classmethod
    def open(cls, folder: Path) -> ShardStore:
        path = folder / MANIFEST
        if not path.is_file():
            raise IndexStoreError(f"index={folder}: no {MANIFEST} (not an index folder; build one with corpus=<files>)")
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise IndexStoreError(f"{path}: not valid JSON ({e.msg})") from None
        if manifest.get("format") != FORMAT:
            raise IndexStoreError(f"{path}: index format {manifest.get('format')!r}, this code reads {FORMAT}")
        return cls(folder, manifest)

    @classmethod
    def create(cls, folder: Path, header: dict[str, Any]) -> ShardStore:
        """A new index in ``folder``, which must not exist or be empty."""
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            raise IndexStoreError(f"index={folder}: exists and is not an index folder; name a new or empty folder")
        folder.mkdir(parents=True, exist_ok=True)
        store = cls(folder, {"format": FORMAT, **header, "shards": [], "n_chunks": 0, "tokens": 0, "complete": False})
        store.save_manifest()
        return store

    def save_manifest(self) -> None:
        atomic_write(self.folder / MANIFEST, (json.dumps(self.manifest, indent=1, ensure_ascii=False) + "\n").encode())

    # -- writing --------------------------------------------------------------------------
    def add_shard(self, emb: np.ndarray, chunks: Sequence[dict[str, Any]], tokens: int) -> None:
        """Write the next shard (embeddings [n, d] and the chunks' records), then list it."""
        k = len(self.manifest["shards"])
        lines = [(json.dumps(c, ensure_ascii=False) + "\n").encode() for c in chunks]
        offsets = np.concatenate(([0], np.cumsum([len(x) for x in lines]))).astype(np.int64)
        atomic_write(self._path(k, "emb.npy"), npy_bytes(np.ascontiguousarray(emb, dtype=np.float32)))
        atomic_write(self._path(k, "chunks.jsonl"), b"".join(lines))
        atomic_write(self._path(k, "offsets.npy"), npy_bytes(offsets))
        self.manifest["shards"].append({"name": f"shard-{k:05d}", "n": len(chunks), "tokens": int(tokens)})
        self.manifest["n_chunks"] += len(chunks)
        self.manifest["tokens"] += int(tokens)
        self._starts = np.append(self._starts, self._starts[-1] + len(chunks))
        self.save_manifest()

    # -- reading --------------------------------------------------------------------------
    @property
    def n_shards(self) -> int:
        return len(self.manifest["shards"])

    @property
    def n_chunks(self) -> int:
        return int(self.manifest["n_chunks"])

    def start(self, k: int) -> int:
        """Corpus index of shard k's first chunk."""
        return int(self._starts[k])

    def embeddings(self, k: int) -> np.ndarray:
        """Shard k's embeddings, memory-mapped (changes never reach the file)."""
        if k not in self._mmaps:
            self._mmaps[k] = np.load(self._path(k, "emb.npy"), mmap_mode="c")  # copy-on-write: torch may wrap it
        return self._mmaps[k]

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Embeddings of the chunks ``ids`` (corpus indices), in that order: [len(ids), d]."""
        shard = np.searchsorted(self._starts, ids, side="right") - 1
        out = np.empty((len(ids), int(self.manifest["encoder"]["dim"])), dtype=np.float32)
        for k in np.unique(shard):
            at = np.nonzero(shard == k)[0]
            out[at] = self.embeddings(int(k))[ids[at] - self._starts[k]]
        return out

    def chunk(self, j: int) -> dict[str, Any]:
        """The record of corpus chunk ``j`` (its text and where it came from)."""
        k = int(np.searchsorted(self._starts, j, side="right") - 1)
        offsets = np.load(self._path(k, "offsets.npy"), mmap_mode="r")
        i = j - int(self._starts[k])
        with open(self._path(k, "chunks.jsonl"), "rb") as f:
            f.seek(int(offsets[i]))
            return json.loads(f.read(int(offsets[i + 1] - offsets[i])))

    def _path(self, k: int, what: str) -> Path:
        return self.folder / f"shard-{k:05d}.{what}"
