"""Disk cache of tokenised haystacks: hits, misses, threshold, key sensitivity, and the hand-over
of the tokens to the agent."""

from __future__ import annotations

import os
from pathlib import Path

from envs.legacy import Legacy
from rl.model.tokens.tokenize import SampleTokens
from rl.run.haystack_cache import CachedDataset, CachedSample, dataset_identity, sample_key, tokenizer_identity


class Source:
    def __init__(self, n_chunks: int, tag: str = ""):
        self.n_chunks, self.tag, self.built = n_chunks, tag, 0

    def __len__(self) -> int:
        return 3

    def __getitem__(self, i: int) -> dict:
        self.built += 1
        return {
            "id": i,
            "question": f"q{i}?",
            "answer": "a",
            "sf_idx": [1],
            "split": "test",
            "chunks": [f"{self.tag}sentence {i}.{j} é" for j in range(self.n_chunks)],
        }


def fake_tokenize(sample: dict) -> SampleTokens:
    return SampleTokens([len(sample["question"])], [[j, len(c)] for j, c in enumerate(sample["chunks"])])


class Receiver:
    """Stands for the agent's ``adopt_tokens``: records what was handed over, by sample."""

    def __init__(self) -> None:
        self.got: list[tuple[dict, SampleTokens]] = []

    def __call__(self, sample: dict, tokens: SampleTokens) -> None:
        self.got.append((sample, tokens))


def make(tmp: Path, source: Source, files: Path, receiver: Receiver | None = None, **kw) -> CachedDataset:
    envs = {"name": "babilong", "num_sentences": source.n_chunks, "noise_test_path": str(files), "max_steps": 4}
    envs.update(kw.pop("envs", {}))
    model = {
        "name": kw.pop("model", "offline:minilm"),
        "revision": "main",
        "use_fast_tokenizer": True,
        "query_prefix": "",
        "passage_prefix": "",
    }
    tok = tokenizer_identity(model, cut=62)
    return CachedDataset(
        source,
        tmp / "cache",
        dataset_identity(envs, Legacy()),
        tok,
        "test",
        kw.pop("seed", 42),
        fake_tokenize,
        receiver or Receiver(),
        min_chunks=kw.pop("min_chunks", 5),
    )


def test_hit_miss_roundtrip(tmp_path: Path) -> None:
    files = tmp_path / "noise"
    files.mkdir()
    (files / "a.txt").write_text("x")
    src = Source(8)
    got_a, got_b, got_small = Receiver(), Receiver(), Receiver()
    first = make(tmp_path, src, files, got_a)
    a = first[1]
    assert (first.misses, first.writes, first.hits, src.built) == (1, 1, 0, 1)
    second = make(tmp_path, src, files, got_b)
    b = second[1]
    assert (second.hits, src.built) == (1, 1)  # served from disk, not rebuilt
    assert b["chunks"] == a["chunks"] and b["sf_idx"] == [1] and b["question"] == "q1?"
    assert isinstance(a, CachedSample) and isinstance(b, CachedSample) and set(b) == set(src[1])  # no extra keys
    [(sample_a, tok_a)], [(sample_b, tok_b)] = got_a.got, got_b.got  # handed over with the very sample returned
    assert sample_a is a and sample_b is b
    want = fake_tokenize(a)
    assert tok_b.chunks == tok_a.chunks == want.chunks and tok_b.question == tok_a.question == want.question
    # small samples are never written and carry no tokens: the agent tokenises them itself
    small = make(tmp_path, Source(3), files, got_small)
    small[0]
    assert small.writes == 0 and type(small[0]) is dict and got_small.got == []
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


def test_evaluation_through_the_cache_equals_without(tiny_run: Path, tmp_path: Path, monkeypatch) -> None:
    """eval_retriever with every sample cached (min_chunks=1): the first run tokenises each sample
    once (for the cache, then handed over), the second serves them from disk (nothing tokenised);
    the records of both equal those of a run without the cache."""
    import json

    from rl.model.tokens import sample_input
    from rl.model.tokens.sample_input import SampleInput
    from rl.run.evaluate import run

    calls = []
    tokenize, tokenize_chunks = SampleInput.tokenize, sample_input.tokenize_chunks
    monkeypatch.setattr(SampleInput, "tokenize", lambda self, sample: calls.append(1) or tokenize(self, sample))
    # evaluation tokenises a haystack alone (shared by the questions over it), then each question
    monkeypatch.setattr(sample_input, "tokenize_chunks", lambda *a: calls.append(1) or tokenize_chunks(*a))

    from .conftest import eval_cfg

    def go(out: Path, *extra: str) -> list[dict]:
        summary = run(eval_cfg(tiny_run, f"output_dir={out}", "envs.num_sentences=12", "num_samples=3", *extra))
        recs = [json.loads(x) for x in (out / "eval_seed42_ns12.jsonl").read_text().splitlines()]
        return [summary.get("haystack_cache")] + [{k: r[k] for k in ("pred_idx", "q_values", "text_len")} for r in recs]

    cache = [f"eval.haystack_cache.dir={tmp_path / 'cache'}", "eval.haystack_cache.min_chunks=1"]
    plain = go(tmp_path / "plain", "eval.haystack_cache.enabled=false")
    n_plain = len(calls)
    first = go(tmp_path / "first", *cache)
    n_first = len(calls) - n_plain
    second = go(tmp_path / "second", *cache)
    assert (n_plain, n_first, len(calls) - n_plain - n_first) == (3, 3, 0)
    assert plain[0] is None
    assert first[0] == {"hits": 0, "misses": 3, "writes": 3} and second[0] == {"hits": 3, "misses": 0, "writes": 0}
    assert plain[1:] == first[1:] == second[1:]
