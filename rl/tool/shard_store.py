"""An index folder on disk: a manifest and shards of chunk embeddings and texts (docs/RETRIEVER_TOOL.md).

    <folder>/manifest.json                 identity of the run, encoder, chunking and corpus; the shard list
    <folder>/shard-00000.emb.npy           float32 [n, d] un-rotated chunk embeddings u_j
    <folder>/shard-00000.chunks.jsonl      one line per chunk: its text and where it came from
    <folder>/shard-00000.offsets.npy       int64 [n + 1] byte offsets of those lines (random access)

Every file is written by ``runstore.atomic_write`` (a new temporary file under an unpredictable
name, so a symlink planted in a folder someone sent is never written through, then renamed into
place), and a shard counts only once the manifest lists it (the manifest is replaced last, also by
a rename): a process killed at any moment leaves the shards the manifest lists whole, and indexing
resumes after the last of them. Embeddings are memory-mapped when read, so a query process holds
only what it touches.

The manifest records each shard file's byte size and sha256. Opening an index checks every
shard's files against their sizes and the arrays' shapes against the chunk counts and the
encoder's dimension; a shard's checksums are checked when it is first read.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from runstore import atomic_write_bytes, raise_storage_error

MANIFEST = "manifest.json"
FORMAT = 1
TMP = re.compile(r"\..+\.tmp\d+")  # runstore.atomic_write's temporary files


class IndexStoreError(ValueError):
    """An index folder that cannot be used as asked (missing, foreign, built for another run or corpus)."""


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


class ShardStore:
    """The shards of one index folder and its manifest (a plain dict, written as JSON)."""

    def __init__(self, folder: Path, manifest: dict[str, Any]):
        self.folder, self.manifest = folder, manifest
        self._mmaps: dict[int, np.ndarray] = {}
        self._verified: set[tuple[int, str]] = set()  # (shard, file) whose checksum matched
        self._starts = np.cumsum([0] + [s["n"] for s in manifest["shards"]])

    # -- opening --------------------------------------------------------------------------
    @classmethod
    def open(cls, folder: Path) -> ShardStore:
        path = folder / MANIFEST
        if not folder.is_dir():
            raise IndexStoreError(
                f"index={folder}: no such folder (build an index there with run=<run> corpus=<files>)"
            )
        if not path.is_file():
            raise IndexStoreError(f"index={folder}: no {MANIFEST} (not an index folder; build one with corpus=<files>)")
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise IndexStoreError(f"{path}: not valid JSON ({e.msg})") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            have = manifest.get("format") if isinstance(manifest, dict) else None
            raise IndexStoreError(f"{path}: index format {have!r}, this code reads {FORMAT}")
        problem = _manifest_problem(manifest)
        if problem:
            raise IndexStoreError(f"{path}: {problem}; the manifest was altered: rebuild the index")
        store = cls(folder, manifest)
        for k in range(store.n_shards):
            store._check_shapes(k)
        return store

    @classmethod
    def create(cls, folder: Path, header: dict[str, Any]) -> ShardStore:
        """A new index in ``folder``, which must not exist or hold nothing but the temporary files of
        writers killed mid-write (a kill before the first manifest leaves one)."""
        if folder.exists() and (not folder.is_dir() or not all(TMP.fullmatch(p.name) for p in folder.iterdir())):
            raise IndexStoreError(f"index={folder}: exists and is not an index folder; name a new or empty folder")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise_storage_error(e, folder)
            raise
        store = cls(folder, {"format": FORMAT, **header, "shards": [], "n_chunks": 0, "tokens": 0, "complete": False})
        store.save_manifest()
        return store

    def save_manifest(self) -> None:
        atomic_write_bytes(
            self.folder / MANIFEST, (json.dumps(self.manifest, indent=1, ensure_ascii=False) + "\n").encode()
        )

    # -- writing --------------------------------------------------------------------------
    def add_shard(self, emb: np.ndarray, chunks: Sequence[dict[str, Any]], tokens: int) -> None:
        """Write the next shard (embeddings [n, d] and the chunks' records), then list it."""
        k = len(self.manifest["shards"])
        lines = [(json.dumps(c, ensure_ascii=False) + "\n").encode() for c in chunks]
        offsets = np.concatenate(([0], np.cumsum([len(x) for x in lines]))).astype(np.int64)
        files = {}
        for what, data in (
            ("emb.npy", npy_bytes(np.ascontiguousarray(emb, dtype=np.float32))),
            ("chunks.jsonl", b"".join(lines)),
            ("offsets.npy", npy_bytes(offsets)),
        ):
            atomic_write_bytes(self._path(k, what), data)
            files[what] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        self.manifest["shards"].append(
            {"name": f"shard-{k:05d}", "n": len(chunks), "tokens": int(tokens), "files": files}
        )
        self.manifest["n_chunks"] += len(chunks)
        self.manifest["tokens"] += int(tokens)
        self._starts = np.append(self._starts, self._starts[-1] + len(chunks))
        self.save_manifest()

    # -- checking -------------------------------------------------------------------------
    def _damaged(self, k: int, why: str) -> IndexStoreError:
        return IndexStoreError(f"index={self.folder}: shard {k} is missing or damaged ({why}); rebuild the index")

    def _check_shapes(self, k: int) -> None:
        """Shard k's files: present, of the recorded sizes, the arrays of the shapes the manifest's
        counts and the encoder's dimension give (cheap: no file is read whole)."""
        n, files = self.manifest["shards"][k]["n"], self.manifest["shards"][k].get("files", {})
        for what in ("emb.npy", "chunks.jsonl", "offsets.npy"):
            path = self._path(k, what)
            if not path.is_file():
                raise self._damaged(k, f"{path.name} is missing")
            size = path.stat().st_size
            if what in files and size != files[what]["bytes"]:
                raise self._damaged(k, f"{path.name} has {size} bytes, the manifest says {files[what]['bytes']}")
        try:
            emb = np.load(self._path(k, "emb.npy"), mmap_mode="r")
            offsets = np.load(self._path(k, "offsets.npy"), allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:  # a truncated or foreign .npy
            raise self._damaged(k, f"not a readable .npy: {e}") from None
        want = (n, int(self.manifest["encoder"]["dim"]))
        if emb.shape != want or emb.dtype != np.float32:
            raise self._damaged(k, f"embeddings {emb.dtype}{list(emb.shape)}, expected float32{list(want)}")
        if (
            offsets.shape != (n + 1,)
            or offsets[0] != 0
            or np.any(np.diff(offsets) <= 0)
            or offsets[-1] != self._path(k, "chunks.jsonl").stat().st_size
        ):
            raise self._damaged(k, f"offsets do not fit {n} chunk lines")

    def _verify(self, k: int, what: str) -> None:
        """Shard k's file ``what`` against its recorded sha256, once per process (indexes of
        versions before checksums carry none and are read unchecked)."""
        recorded = self.manifest["shards"][k].get("files", {}).get(what)
        if recorded is None or (k, what) in self._verified:
            return
        h = hashlib.sha256()
        with open(self._path(k, what), "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                h.update(block)
        if h.hexdigest() != recorded["sha256"]:
            raise self._damaged(k, f"{self._path(k, what).name} changed since it was written (sha256 differs)")
        self._verified.add((k, what))

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
            self._verify(k, "emb.npy")
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
        self._verify(k, "offsets.npy")
        self._verify(k, "chunks.jsonl")
        offsets = np.load(self._path(k, "offsets.npy"), mmap_mode="r")
        i = j - int(self._starts[k])
        with open(self._path(k, "chunks.jsonl"), "rb") as f:
            f.seek(int(offsets[i]))
            return json.loads(f.read(int(offsets[i + 1] - offsets[i])))

    def _path(self, k: int, what: str) -> Path:
        return self.folder / f"shard-{k:05d}.{what}"


def _manifest_problem(m: dict[str, Any]) -> str | None:
    """What in a manifest's structure this code cannot read (an altered manifest), or None."""
    shards = m.get("shards")
    if not isinstance(shards, list) or not all(
        isinstance(x, dict) and _count(x.get("n")) and _count(x.get("tokens")) for x in shards
    ):
        return "'shards' is not a list of shards with counts 'n' and 'tokens'"
    if not all(_files_ok(x.get("files", {})) for x in shards):
        return "a shard's 'files' is not a list of sizes and checksums"
    if m.get("n_chunks") != sum(x["n"] for x in shards) or m.get("tokens") != sum(x["tokens"] for x in shards):
        return "'n_chunks' or 'tokens' is not the sum of the shards'"
    if not isinstance(m.get("encoder"), dict) or not _count(m["encoder"].get("dim")):
        return "'encoder' holds no dimension 'dim'"
    if not isinstance(m.get("complete"), bool) or not isinstance(m.get("shard_size"), int):
        return "'complete' or 'shard_size' is missing"
    return None


def _files_ok(files: Any) -> bool:
    return isinstance(files, dict) and all(
        isinstance(f, dict) and _count(f.get("bytes")) and isinstance(f.get("sha256"), str) for f in files.values()
    )


def _count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0
