"""Disk cache of tokenised evaluation haystacks (DESIGN §7.12).

A 400 000-sentence BabiLong sample costs seconds to assemble and much longer to tokenise; it is
the same for every checkpoint evaluated on (task, N, seed, split, sample index). The cache stores
the sample (question, answer, gold indices, chunk texts) and its content token ids, under a key
that hashes everything that determines them:

* the resolved dataset node (``envs``) minus the keys that only affect acting (positions, T,
  feedback), and the ``legacy`` switches;
* the identity (path, size, mtime) of every file or folder the dataset node names;
* the split, the seed and the sample index;
* the tokeniser (model name + revision), the token cut and the query/passage prefixes.

Anything else changing gives another key, so a wrong haystack is never served. Only samples
with at least ``min_chunks`` chunks are written. Entries are single ``.npz`` files written
atomically (temporary file + rename), safe to share between concurrent evaluations.

A large sample is returned as a :class:`CachedSample` and its tokens are handed to the Q-network
(``QNetwork.inputs.adopt_tokens``), which keeps them while that sample object lives.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from envs.data.registry import NON_SAMPLE_KEYS
from envs.legacy import Legacy
from rl.model.tokens.ragged import RaggedIds
from rl.model.tokens.tokenize import SampleTokens

log = logging.getLogger(__name__)

_MAX_LISTED_FILES = 2000


def path_identity(value: str) -> Any:
    """(size, mtime) of a file, or of every file under a folder (bounded), or of the compressed
    variants of an absent path; None if nothing is there."""
    p = Path(value)
    if not p.exists():  # loaders also read compressed siblings (x.txt -> x.txt.gz)
        alts = sorted(p.parent.glob(p.name + ".*")) if p.parent.is_dir() else []
        return {a.name: path_identity(str(a)) for a in alts[:8]} or None
    if p.is_file():
        st = p.stat()
        return [st.st_size, st.st_mtime_ns]
    out = []
    for f in sorted(p.rglob("*"))[:_MAX_LISTED_FILES]:
        if f.is_file():
            st = f.stat()
            out.append([str(f.relative_to(p)), st.st_size, st.st_mtime_ns])
    return out


def _files_in(node: Any, out: dict[str, Any]) -> None:
    if isinstance(node, dict):
        for v in node.values():
            _files_in(v, out)
    elif isinstance(node, list):
        for v in node:
            _files_in(v, out)
    elif isinstance(node, str) and ("/" in node or os.sep in node) and node not in out:
        out[node] = path_identity(node)


def dataset_identity(envs: dict[str, Any], legacy: Legacy) -> dict[str, Any]:
    """What determines the test samples, apart from split, seed and index."""
    data = {k: v for k, v in envs.items() if k not in NON_SAMPLE_KEYS}
    files: dict[str, Any] = {}
    _files_in(data, files)
    return {"envs": data, "files": files, "legacy": dataclasses.asdict(legacy)}


def tokenizer_identity(model_cfg: dict[str, Any], cut: int) -> dict[str, Any]:
    return {
        "name": str(model_cfg["name"]),
        "revision": str(model_cfg["revision"]),
        "use_fast": bool(model_cfg["use_fast_tokenizer"]),
        "query_prefix": str(model_cfg["query_prefix"]),
        "passage_prefix": str(model_cfg["passage_prefix"]),
        "cut": int(cut),
    }


def sample_key(dataset_id: dict[str, Any], tokenizer_id: dict[str, Any], split: str, seed: int, index: int) -> str:
    blob = json.dumps(
        {"data": dataset_id, "tok": tokenizer_id, "split": split, "seed": int(seed), "index": int(index), "format": 1},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _pack(ids: Any) -> tuple[np.ndarray, np.ndarray]:
    r = RaggedIds.from_lists(ids).compact()
    return r.flat.astype(np.int32, copy=False), np.append(r.starts, int(r.lens.sum()))


def _unpack(flat: np.ndarray, offsets: np.ndarray) -> RaggedIds:
    return RaggedIds.tiling(flat.astype(np.int32, copy=False), np.diff(offsets).astype(np.int64))


def save_entry(path: Path, sample: dict[str, Any], tokens: SampleTokens) -> None:
    fields = {k: v for k, v in sample.items() if k != "chunks"}
    texts = [c.encode("utf-8") for c in sample["chunks"]]
    text_off = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in texts], out=text_off[1:])
    arrays = {
        "fields": np.frombuffer(json.dumps(fields, ensure_ascii=False).encode("utf-8"), dtype=np.uint8),
        "text": np.frombuffer(b"".join(texts), dtype=np.uint8),
        "text_off": text_off,
        "question": np.asarray(tokens.question, dtype=np.int32),
        "text_len": np.asarray(-1 if tokens.text_len is None else tokens.text_len, dtype=np.int64),
    }
    arrays["chunks"], arrays["chunks_off"] = _pack(tokens.chunks)
    if tokens.action_chunks is not tokens.chunks:
        arrays["action"], arrays["action_off"] = _pack(tokens.action_chunks)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)
    os.replace(tmp, path)


def load_entry(path: Path) -> tuple[dict[str, Any], SampleTokens]:
    with np.load(path) as z:
        sample = json.loads(z["fields"].tobytes().decode("utf-8"))
        raw, off = z["text"].tobytes(), z["text_off"]
        sample["chunks"] = [raw[off[i] : off[i + 1]].decode("utf-8") for i in range(len(off) - 1)]
        chunks = _unpack(z["chunks"], z["chunks_off"])
        action = _unpack(z["action"], z["action_off"]) if "action" in z.files else None
        text_len = int(z["text_len"]) if "text_len" in z.files and int(z["text_len"]) >= 0 else None
        tokens = SampleTokens(z["question"].tolist(), chunks, action, text_len)
    return sample, tokens


class CachedSample(dict):
    """A sample dict that can be weakly referenced (a plain dict cannot), so the tokens handed
    over with it are dropped when it is."""


Tokenize = Callable[[dict[str, Any]], SampleTokens]
HandOver = Callable[[dict[str, Any], SampleTokens], None]


class CachedDataset:
    """Wraps a test dataset: large samples come from (or go to) the disk cache; their tokens
    (from ``tokenize``) go to ``hand_over(sample, tokens)`` with every sample returned."""

    def __init__(
        self,
        base: Any,
        cache_dir: str | Path,
        dataset_id: dict[str, Any],
        tokenizer_id: dict[str, Any],
        split: str,
        seed: int,
        tokenize: Tokenize,
        hand_over: HandOver,
        min_chunks: int,
    ):
        self.base, self.dir = base, Path(cache_dir)
        self.dataset_id, self.tokenizer_id = dataset_id, tokenizer_id
        self.split, self.seed, self.min_chunks = split, int(seed), int(min_chunks)
        self.tokenize, self.hand_over = tokenize, hand_over
        self.hits = self.misses = self.writes = 0

    def __len__(self) -> int:
        return len(self.base)

    def path(self, index: int) -> Path:
        key = sample_key(self.dataset_id, self.tokenizer_id, self.split, self.seed, index)
        return self.dir / key[:2] / f"{key}.npz"

    def __getitem__(self, index: int) -> dict[str, Any]:
        path = self.path(index)
        if path.is_file():
            try:
                sample, tokens = load_entry(path)
                self.hits += 1
                return self._with_tokens(sample, tokens)
            except (OSError, ValueError, KeyError) as e:  # a damaged entry is rebuilt, not fatal
                log.warning("haystack cache entry %s unreadable (%s); rebuilding it", path, e)
        self.misses += 1
        sample = dict(self.base[index])
        if len(sample["chunks"]) >= self.min_chunks:
            tokens = self.tokenize(sample)
            save_entry(path, sample, tokens)
            self.writes += 1
            return self._with_tokens(sample, tokens)
        return sample

    def _with_tokens(self, sample: dict[str, Any], tokens: SampleTokens) -> CachedSample:
        out = CachedSample(sample)
        self.hand_over(out, tokens)
        return out


def maybe_cached(
    base: Any, cfg: Any, legacy: Legacy, split: str, seed: int, tokenize: Tokenize, hand_over: HandOver, cut: int
) -> Any:
    """``base`` wrapped in a :class:`CachedDataset` when ``eval.haystack_cache.enabled``.

    ``legacy.fixed_noise_seed`` makes a BabiLong sample depend on access order, so it is never cached.
    """
    from omegaconf import OmegaConf

    hc = cfg.eval.haystack_cache
    if not hc.enabled:
        return base
    if legacy.fixed_noise_seed:
        log.warning("legacy.fixed_noise_seed: samples depend on access order; haystack cache disabled")
        return base
    envs = OmegaConf.to_container(cfg.envs, resolve=True)
    model = OmegaConf.to_container(cfg.algo.model, resolve=True)
    return CachedDataset(
        base,
        str(hc.dir),
        dataset_identity(envs, legacy),
        tokenizer_identity(model, cut),
        split,
        seed,
        tokenize,
        hand_over,
        int(hc.min_chunks),
    )
