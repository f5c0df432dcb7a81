"""Disk cache of tokenised haystacks: hits, misses, threshold and key sensitivity."""
from __future__ import annotations

import os
from pathlib import Path

from rl.encoders import SampleTokens
from rl.haystack_cache import CachedDataset, dataset_identity, sample_key, tokenizer_identity


class Source:
    def __init__(self, n_chunks: int, tag: str = ""):
        self.n_chunks, self.tag, self.built = n_chunks, tag, 0

    def __len__(self) -> int:
        return 3

    def __getitem__(self, i: int) -> dict:
        self.built += 1
        return {"id": i, "question": f"q{i}?", "answer": "a", "sf_idx": [1], "split": "test",
                "chunks": [f"{self.tag}sentence {i}.{j} é" for j in range(self.n_chunks)]}


def fake_tokenize(sample: dict) -> SampleTokens:
    return SampleTokens([len(sample["question"])], [[j, len(c)] for j, c in enumerate(sample["chunks"])])


def make(tmp: Path, source: Source, files: Path, **kw) -> CachedDataset:
    envs = {"name": "babilong", "num_sentences": source.n_chunks, "noise_test_path": str(files), "max_steps": 4}
    envs.update(kw.pop("envs", {}))
    model = {"name": kw.pop("model", "offline:minilm"), "revision": "main", "use_fast_tokenizer": True,
             "query_prefix": "", "passage_prefix": ""}
    tok = tokenizer_identity(model, cut=62)
    return CachedDataset(source, tmp / "cache", dataset_identity(envs, {}), tok, "test", kw.pop("seed", 42),
                         fake_tokenize, min_chunks=kw.pop("min_chunks", 5))


def test_hit_miss_roundtrip(tmp_path: Path) -> None:
    files = tmp_path / "noise"
    files.mkdir()
    (files / "a.txt").write_text("x")
    src = Source(8)
    first = make(tmp_path, src, files)
    a = first[1]
    assert (first.misses, first.writes, first.hits, src.built) == (1, 1, 0, 1)
    second = make(tmp_path, src, files)
    b = second[1]
    assert (second.hits, src.built) == (1, 1)  # served from disk, not rebuilt
    assert b["chunks"] == a["chunks"] and b["sf_idx"] == [1] and b["question"] == "q1?"
    assert b["_tokens"].chunks == a["_tokens"].chunks and b["_tokens"].question == a["_tokens"].question
    # small samples are never written
    small = make(tmp_path, Source(3), files)
    small[0]
    assert small.writes == 0 and small[0].get("_tokens") is None
    # a damaged entry is rebuilt
    second.path(1).write_bytes(b"garbage")
    third = make(tmp_path, src, files)
    assert third[1]["chunks"] == a["chunks"] and third.misses == 1


def test_key_sensitivity(tmp_path: Path) -> None:
    files = tmp_path / "noise"
    files.mkdir()
    (files / "a.txt").write_text("x")
    src = Source(8)
    base = make(tmp_path, src, files).path(0)
    assert make(tmp_path, src, files, envs={"max_steps": 9}).path(0) == base  # acting settings don't matter
    variants = [
        make(tmp_path, src, files).path(1),
        make(tmp_path, src, files, seed=1).path(0),
        make(tmp_path, Source(9), files).path(0),
        make(tmp_path, src, files, model="facebook/contriever").path(0),
        make(tmp_path, src, files, envs={"task": "qa3"}).path(0),
    ]
    assert len({base, *variants}) == 6
    st = (files / "a.txt").stat()
    os.utime(files / "a.txt", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # the data file changed
    assert make(tmp_path, src, files).path(0) != base
    assert sample_key({"x": 1}, {"t": 1}, "test", 1, 0) != sample_key({"x": 1}, {"t": 1}, "train", 1, 0)


def test_compressed_sibling_counts_as_the_data_file(tmp_path: Path) -> None:
    (tmp_path / "facts.txt.gz").write_bytes(b"v1")
    src = Source(8)
    ref = str(tmp_path / "facts.txt")  # configs name the .txt; the loader reads the .gz
    before = make(tmp_path, src, tmp_path / "none", envs={"facts_test_path": ref}).path(0)
    (tmp_path / "facts.txt.gz").write_bytes(b"v2, longer")
    assert make(tmp_path, src, tmp_path / "none", envs={"facts_test_path": ref}).path(0) != before
