"""A corpus as a stream of chunks, read one line at a time (docs/RETRIEVER_TOOL.md, *Corpus index*).

Two kinds of file, plain or gzip-compressed (``.gz``):

* ``.jsonl`` (or ``.ndjson``): one object per non-empty line, the chunk in its text field (``text`` by default);
  an ``id`` and a ``title`` are kept as metadata, and a title is joined to the text as the
  open-domain loaders join a paragraph's title and text (envs/data/hotpotqa.py: ``title + " " + text``,
  envs/data/musique.py: ``title + ". " + text``), so chunks look like the ones the run trained on;
* anything else: text split as retrieve.py's ``split=`` splits it (``sentences``: the project's
  sentence splitter, whose newlines are hard breaks, so splitting line by line gives the chunks
  of the whole text; ``lines``: one chunk per non-empty line), with character spans in the file.
  A ``.json`` file, or a text file that opens like JSON (``{`` or ``[{``), is refused: indexed as
  text its chunks would be JSON syntax.

Memory does not grow with the corpus: nothing is read ahead of the chunk being yielded.
"""

from __future__ import annotations

import codecs
import gzip
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from envs.data.splitter import split_sentences

SPLITS = ("sentences", "lines")
# the title rule of each open-domain loader (a run's envs.name), for JSONL records with a title
TITLE_SEPS = {"hotpotqa": " ", "2WikiMultihopQA": " ", "musique": ". "}


class CorpusError(ValueError):
    """A corpus file that cannot be read as chunks: names the file and line."""


@dataclass
class Chunk:
    """One chunk and where it came from: ``source`` indexes the corpus file list, ``line`` is
    1-based; ``start``/``end`` are character spans in a text file (None for JSONL)."""

    text: str
    source: int
    line: int
    start: int | None = None
    end: int | None = None
    id: Any = None
    title: str | None = None

    def meta(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "line": self.line,
            "start": self.start,
            "end": self.end,
            "id": self.id,
            "title": self.title,
        }


def is_jsonl(path: Path) -> bool:
    return path.name.lower().removesuffix(".gz").endswith((".jsonl", ".ndjson"))


def _not_json(path: Path, line: str) -> None:
    """A file read as text must not be JSON: its chunks would be JSON syntax and every query "work"."""
    head = line.strip()
    opens_like_json = head.startswith("{") or head == "[" or head[:2] in ("[{", '["')
    if path.name.lower().removesuffix(".gz").endswith(".json") or opens_like_json:
        raise CorpusError(
            f"{path}: JSON, which would be indexed as plain text: a corpus of records is one object per line "
            "in a .jsonl file: rename a file of such lines to .jsonl, or convert a JSON array, e.g. "
            "jq -c '.[]' in.json > in.jsonl"
        )


def _open(path: Path) -> IO[str]:
    # universal newlines and a dropped byte-order mark, as retrieve.py reads text= (spans agree)
    if path.name.lower().endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8-sig")
    return open(path, encoding="utf-8-sig")


def resolve_files(given: str | Sequence[str]) -> list[Path]:
    """The corpus files of ``corpus=``: one path or a list; an entry with ``*``/``?`` is a glob
    (sorted, so the chunk order is fixed). A file named twice, or matched by two globs, is read once."""
    entries = [given] if isinstance(given, (str, os.PathLike)) else list(given)
    if not entries:
        raise CorpusError("corpus=: no file given")
    files: dict[Path, Path] = {}  # resolved -> as given, in order
    for entry in entries:
        path = Path(str(entry)).expanduser()
        if any(c in str(entry) for c in "*?["):
            matches = sorted(p for p in path.parent.glob(path.name) if p.is_file())
            if not matches:
                raise CorpusError(f"corpus={entry}: no file matches")
        elif path.is_dir():
            raise CorpusError(f"corpus={path}: a folder; name its files, e.g. corpus='{path}/*.jsonl'")
        elif path.exists() and not path.is_file():
            raise CorpusError(f"corpus={path}: not a regular file (a pipe or a device); save it to a file first")
        elif not path.is_file():
            raise CorpusError(f"corpus={path}: no such file")
        else:
            matches = [path]
        for p in matches:
            files.setdefault(p.resolve(), p)
    return list(files.values())


def fingerprint(files: Sequence[Path]) -> list[dict[str, Any]]:
    """What identifies the corpus in the index manifest: each file's absolute path, size and
    modification time (a changed file is a changed corpus)."""
    out = []
    for p in files:
        st = p.stat()
        out.append({"path": str(p.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    return out


def iter_chunks(files: Sequence[Path], split: str, title_sep: str | None, text_key: str = "text") -> Iterator[Chunk]:
    """Every chunk of the corpus, in file order. ``title_sep`` None: a record with a title is an
    error (the caller could not tell how the run joined titles)."""
    if split not in SPLITS:
        raise CorpusError(f"split={split!r}: expected one of {', '.join(SPLITS)}")
    for k, path in enumerate(files):
        if is_jsonl(path):
            yield from _jsonl_chunks(path, k, title_sep, text_key)
        else:
            yield from _text_chunks(path, k, split)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        with _open(path) as f:
            yield from enumerate(f, 1)
    except UnicodeDecodeError:
        raise CorpusError(f"{path}:{_first_bad_line(path)}: not UTF-8 text; convert the file to UTF-8") from None
    except (OSError, EOFError) as e:  # a truncated or corrupt .gz
        raise CorpusError(f"{path}: cannot be read ({e})") from None


def _first_bad_line(path: Path) -> int:
    """The line of the first byte that is not UTF-8 (the text reader decodes blocks, not lines)."""
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "rb") as f:
        decoder, no = codecs.getincrementaldecoder("utf-8")(), 0
        for no, line in enumerate(f, 1):
            try:
                decoder.decode(line)
            except UnicodeDecodeError:
                return no
    return no


def _text_chunks(path: Path, source: int, split: str) -> Iterator[Chunk]:
    offset = 0  # characters before this line in the decoded text (retrieve.py's spans)
    opened = False
    for no, line in _lines(path):
        if not opened and line.strip():
            _not_json(path, line)
            opened = True
        body = line.rstrip("\n")
        # split_text's own rules on this line (both split at str.splitlines' breaks)
        pieces = split_sentences(body) if split == "sentences" else [x.strip() for x in body.splitlines() if x.strip()]
        cursor = 0
        for piece in pieces:
            start = body.find(piece, cursor)  # each piece is a verbatim, stripped substring, in order
            cursor = start + len(piece)
            yield Chunk(piece, source, no, offset + start, offset + cursor)
        offset += len(line)


def _jsonl_chunks(path: Path, source: int, title_sep: str | None, text_key: str) -> Iterator[Chunk]:
    for no, line in _lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise CorpusError(f"{path}:{no}: not valid JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise CorpusError(f"{path}:{no}: expected an object with a string {text_key!r}")
        text = obj.get(text_key)
        if not isinstance(text, str) or not text.strip():
            what = "missing" if text is None else ("empty" if isinstance(text, str) else type(text).__name__)
            raise CorpusError(f"{path}:{no}: {text_key!r} is {what}; expected non-empty text")
        title = obj.get("title")
        if title is not None and not isinstance(title, str):
            raise CorpusError(f"{path}:{no}: 'title' is {type(title).__name__}; expected a string")
        if title:
            if title_sep is None:
                raise CorpusError(
                    f"{path}:{no}: the record has a title and the run's loader has no title rule: "
                    "set corpus_index.title_sep (e.g. ' ' as HotpotQA, '. ' as MuSiQue)"
                )
            text = title + title_sep + text
        yield Chunk(text, source, no, id=obj.get("id"), title=title)
