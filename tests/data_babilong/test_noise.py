"""Noise corpus loader (all accepted formats) and sampler semantics (DESIGN §7.2)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from envs.data.noise import NoiseSampler, load_noise_corpus, resolve_noise_path
from envs.errors import DatasetFormatError, DatasetNotFoundError

from .conftest import EMBEDDED

BOOKS = [[f"b{b}s{s}." for s in range(n)] for b, n in enumerate([5, 0, 250, 40])]


def _write_jsonl(path, books, gz=False):
    text = "".join(json.dumps({"title": f"t{i}", "sentences": b}) + "\n" for i, b in enumerate(books))
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text)


def test_all_formats_give_the_same_books(tmp_path):
    import datasets

    _write_jsonl(tmp_path / "a.jsonl", BOOKS)
    _write_jsonl(tmp_path / "b.jsonl.gz", BOOKS, gz=True)
    _write_jsonl(tmp_path / "train.jsonl.gz", BOOKS, gz=True)  # sibling of a missing "train"
    datasets.Dataset.from_dict({"title": ["t"] * 4, "sentences": BOOKS}).save_to_disk(str(tmp_path / "saved"))
    for p in ("a.jsonl", "b.jsonl.gz", "train", "saved"):
        assert load_noise_corpus(tmp_path / p) == BOOKS, p
    assert resolve_noise_path(tmp_path / "train").name == "train.jsonl.gz"


def test_format_errors(tmp_path):
    import datasets

    (tmp_path / "bad.jsonl").write_text('{"sentences": ["a"]}\nnot json\n')
    with pytest.raises(DatasetFormatError, match=r"bad.jsonl:2"):
        load_noise_corpus(tmp_path / "bad.jsonl")
    (tmp_path / "bad2.jsonl").write_text('{"sentences": "a string"}\n')
    with pytest.raises(DatasetFormatError, match=r"bad2.jsonl:1: expected 'sentences'"):
        load_noise_corpus(tmp_path / "bad2.jsonl")
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"sentences": [["a"]]})})
    dd.save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(DatasetFormatError, match="DatasetDict"):
        load_noise_corpus(tmp_path / "dd")
    datasets.Dataset.from_dict({"text": ["a"]}).save_to_disk(str(tmp_path / "nocol"))
    with pytest.raises(DatasetFormatError, match="'sentences' column"):
        load_noise_corpus(tmp_path / "nocol")


def test_missing_corpus_says_how_to_get_it(tmp_path):
    with pytest.raises(DatasetNotFoundError) as e:
        load_noise_corpus(tmp_path / "pg19-with-sentences" / "train")
    msg = str(e.value)
    assert "PG19-with-sentences" in msg and "build_noise_corpus.py" in msg and "paths=embedded" in msg


def _runs(out):
    """Split a draw into maximal runs of consecutive sentences of one book."""
    runs, cur = [], [out[0]]
    for prev, s in zip(out, out[1:]):
        (pb, ps), (b, si) = (tuple(int(x) for x in t[1:-1].split("s")) for t in (prev, s))
        if b == pb and si == ps + 1:
            cur.append(s)
        else:
            runs.append(cur)
            cur = [s]
    return runs + [cur]


def test_sampler_draws_consecutive_runs_and_truncates():
    sampler = NoiseSampler(BOOKS, subsample_size=30)
    rng = np.random.default_rng(0)
    for n in (1, 7, 30, 31, 1000):
        out = sampler.draw(n, rng)
        assert len(out) == n
        # each run is consecutive sentences of one book (adjacent draws may merge runs)
        assert sum(len(r) for r in _runs(out)) == n
    out = sampler.draw(5000, np.random.default_rng(1))
    assert "b1" not in {s.split("s")[0] for s in out}  # the empty book never contributes


class _Recorder:
    """Wraps a Generator and records every integers(high) call."""

    def __init__(self, seed):
        self.rng, self.calls = np.random.default_rng(seed), []

    def integers(self, high):
        v = int(self.rng.integers(high))
        self.calls.append((high, v))
        return v


def test_sampler_follows_the_reference_procedure():
    k, n = 30, 777
    rec = _Recorder(3)
    out = NoiseSampler(BOOKS, subsample_size=k).draw(n, rec)
    expected, calls = [], iter(rec.calls)
    while len(expected) < n:
        high, b = next(calls)
        assert high == len(BOOKS)  # a book uniformly over rows
        if not BOOKS[b]:
            continue  # empty book: draw again
        high, start = next(calls)
        assert high == len(BOOKS[b])  # a start uniformly inside it
        expected += BOOKS[b][start : start + min(k, n - len(expected))]
    assert out == expected and next(calls, None) is None
    # determinism: the same generator state gives the same draw
    sampler = NoiseSampler(BOOKS, subsample_size=k)
    assert sampler.draw(500, np.random.default_rng(5)) == sampler.draw(500, np.random.default_rng(5))
    assert sampler.draw(0, np.random.default_rng(5)) == []


def test_sampler_empty_books():
    # mostly empty books: retried until a non-empty one comes
    corpus = [[]] * 20 + [["only."]]
    assert NoiseSampler(corpus, 100).draw(3, np.random.default_rng(0)) == ["only."] * 3
    with pytest.raises(ValueError, match="has no sentences"):  # refused when built, not when drawn
        NoiseSampler([[], []], 100)
    with pytest.raises(ValueError, match="Generator"):
        NoiseSampler(BOOKS).draw(3)


def test_sampler_sequential_mode():
    sampler = NoiseSampler(BOOKS, shuffle=False)
    first = sampler.draw(7)
    assert first == BOOKS[0] + BOOKS[2][:2]
    assert sampler.draw(3) == BOOKS[2][2:5]


def test_embedded_corpus_split_by_book():
    root = EMBEDDED / "babilong/pg19-with-sentences"
    train, test = load_noise_corpus(root / "train"), load_noise_corpus(root / "test")
    assert len(train) > 100 and len(test) > 10
    assert sum(map(len, train)) > 80_000 and sum(map(len, test)) > 10_000
    titles = {
        split: {json.loads(line)["title"] for line in gzip.open(root / f"{split}.jsonl.gz", "rt")}
        for split in ("train", "test")
    }
    assert "Jane Austen: persuasion" in titles["test"]
    assert not titles["train"] & titles["test"]
