"""Noise-sentence corpus (PG19-with-sentences or the embedded stand-in) and its sampler (DESIGN §7.2).

A corpus is a list of books, each a list of pre-split sentences. Accepted on disk:

* a Hugging Face ``Dataset`` folder written with ``save_to_disk`` (column ``sentences``);
* a ``.jsonl`` or ``.jsonl.gz`` file with one ``{"sentences": [...]}`` object per book;
* a path ``P`` that does not exist but whose sibling ``P.jsonl.gz`` / ``P.jsonl`` does, so the
  configured ``.../pg19-with-sentences/train`` finds the embedded ``train.jsonl.gz``.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

import numpy as np

from envs.data.common import iter_jsonl
from envs.errors import DatasetFormatError, DatasetNotFoundError

Corpus = list[list[str]]
Run = tuple[int, int, int]  # (book, start, stop): sentences corpus[book][start:stop]

HOW_TO_GET_NOISE = (
    "use PG19-with-sentences from the BabiLong authors (a `datasets` save_to_disk folder per "
    "split: {data_root}/babilong/pg19-with-sentences/{train,test}); or build the public-domain "
    "stand-in with `python scripts/build_noise_corpus.py` (writes {train,test}.jsonl.gz); or use "
    "the embedded default with the override paths=embedded (data_root = <repo>/data)"
)


def resolve_noise_path(path: str | Path) -> Path:
    """The file or folder that :func:`load_noise_corpus` will read for ``path``."""
    p = Path(path)
    if p.exists():
        return p
    for suffix in (".jsonl.gz", ".jsonl"):
        sib = p.with_name(p.name + suffix)
        if sib.is_file():
            return sib
    raise DatasetNotFoundError(
        p,
        "a noise corpus: a `datasets` save_to_disk folder with a `sentences` column (one row per "
        f'book), or {p.name}.jsonl(.gz) beside it with one {{"sentences": [...]}} per line',
        HOW_TO_GET_NOISE,
    )


def _check_book(book: object, path: Path, where: str | int) -> list[str]:
    if not isinstance(book, list) or not all(isinstance(s, str) for s in book):
        raise DatasetFormatError(path, where, "expected 'sentences' to be a list of strings")
    return book


def _read_jsonl(path: Path) -> Corpus:
    books: Corpus = []
    for ln, rec in iter_jsonl(path):
        if "sentences" not in rec:
            raise DatasetFormatError(path, ln, "expected an object with a 'sentences' list")
        books.append(_check_book(rec["sentences"], path, ln))
    return books


def _read_saved_dataset(path: Path) -> Corpus:
    import datasets  # heavy import, only when needed

    try:
        ds = datasets.load_from_disk(str(path))
    except FileNotFoundError as e:
        raise DatasetFormatError(path, None, f"expected a `datasets` save_to_disk folder ({e})") from None
    if isinstance(ds, datasets.DatasetDict):
        raise DatasetFormatError(
            path,
            None,
            f"expected a Dataset, found a DatasetDict with splits {list(ds)}; point the path at one split's folder",
        )
    if "sentences" not in ds.column_names:
        raise DatasetFormatError(path, None, f"expected a 'sentences' column, found {ds.column_names}")
    books = list(ds["sentences"])  # honours any indices mapping
    return [_check_book(b, path, f"row {i}") for i, b in enumerate(books)]


@lru_cache(maxsize=8)
def _load_cached(resolved: str) -> Corpus:
    p = Path(resolved)
    if p.is_dir():
        books = _read_saved_dataset(p)
    elif p.name.endswith((".jsonl", ".jsonl.gz")):
        books = _read_jsonl(p)
    else:
        raise DatasetFormatError(p, None, "expected a save_to_disk folder or a .jsonl / .jsonl.gz file")
    if not any(books):
        raise DatasetFormatError(
            p,
            None,
            f"expected at least one book with sentences ({len(books)} books, all empty)"
            if books
            else "expected at least one book",
        )
    if not any(s.strip() for book in books for s in book):  # haystacks of empty chunks teach nothing
        raise DatasetFormatError(
            p,
            None,
            f"expected sentences with text ({len(books)} books, {sum(map(len, books))} sentences, all empty or "
            f"blank); rebuild the corpus (scripts/build_noise_corpus.py)",
        )
    return books


def load_noise_corpus(path: str | Path) -> Corpus:
    """Books (lists of sentences) from ``path``; cached per resolved path. Treat as read-only."""
    return _load_cached(str(resolve_noise_path(path).resolve()))


class NoiseSampler:
    """Draws runs of consecutive sentences from random books (ref ``RetrSentenceSampler``).

    ``draw(n, rng)``: until n sentences are collected, pick a book uniformly (an empty book is
    drawn again: the corpus holds a non-empty one, :func:`load_noise_corpus` checks), a start
    uniformly inside it, and
    take up to ``subsample_size`` consecutive sentences (fewer if the book ends); truncate to n.
    With ``shuffle=False`` books are read sequentially in full, continuing where the last draw
    stopped (``rng`` unused).
    """

    def __init__(self, corpus: Corpus, subsample_size: int = 100, shuffle: bool = True):
        if subsample_size < 1:
            raise ValueError(f"subsample_size must be >= 1, got {subsample_size}")
        if not any(corpus):
            raise ValueError("the noise corpus has no sentences")
        self.corpus, self.subsample_size, self.shuffle = corpus, int(subsample_size), shuffle
        self._cursor = (0, 0)  # (book, sentence) for shuffle=False

    def draw(self, n: int, rng: np.random.Generator | None = None) -> list[str]:
        if n <= 0:
            return []
        if not self.shuffle:
            return self._draw_sequential(n)
        return self.texts(self.draw_runs(n, rng))

    def draw_runs(self, n: int, rng: np.random.Generator | None) -> list[Run]:
        """What :meth:`draw` takes, as (book, start, stop) runs of consecutive sentences."""
        if rng is None:
            raise ValueError("NoiseSampler.draw needs an explicit np.random.Generator")
        runs: list[Run] = []
        got, k = 0, self.subsample_size
        while got < n:
            b = self._random_book(rng)
            size = len(self.corpus[b])
            start = int(rng.integers(size))
            stop = min(start + min(k, n - got), size)
            runs.append((b, start, stop))
            got += stop - start
        return runs

    def runs_to_book_end(self, rng: np.random.Generator) -> Iterator[Run]:
        """Endless runs: a random book from a random sentence to its end, then another book.
        (BabiLong's token-budget generator reads a book on from a random place until the budget
        is filled; ``subsample_size`` does not apply.)"""
        while True:
            b = self._random_book(rng)
            size = len(self.corpus[b])
            yield b, int(rng.integers(size)), size

    def texts(self, runs: list[Run]) -> list[str]:
        out: list[str] = []
        for b, start, stop in runs:
            out.extend(self.corpus[b][start:stop])
        return out

    def _random_book(self, rng: np.random.Generator) -> int:
        # redrawn until non-empty, as the reference did (the same draws for corpora that worked there)
        n_books = len(self.corpus)
        while True:
            b = int(rng.integers(n_books))
            if self.corpus[b]:
                return b

    def _draw_sequential(self, n: int) -> list[str]:
        if not any(self.corpus):
            raise RuntimeError("the noise corpus has only empty books")
        out: list[str] = []
        b, s = self._cursor
        while len(out) < n:
            book = self.corpus[b]
            take = book[s : s + n - len(out)]
            out.extend(take)
            s += len(take)
            if s >= len(book):
                b, s = (b + 1) % len(self.corpus), 0
        self._cursor = (b, s)
        return out
