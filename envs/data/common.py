"""Helpers shared by the dataset loaders: list-backed datasets, config access, seeded order,
file lookup (plain or ``.gz``), JSON/JSONL reading and field checks that name file and record."""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from envs.errors import DatasetFormatError, DatasetNotFoundError
from envs.seeding import derive_rng
from envs.types import Sample, SampleError, validate_sample


class ListDataset:
    """A ready list of Samples (the object every builder here returns). Sample ids must be
    unique (within a ``source``, for combined sets): evaluation records and the reader scripts
    are keyed on them, so a repeated id would silently drop a distinct sample."""

    def __init__(self, samples: Sequence[Sample], name: str = ""):
        self.samples = list(samples)
        self.name = name
        first: dict[tuple[str, str], Sample] = {}
        for s in self.samples:
            other = first.setdefault((str(s.get("source", "")), str(s["id"])), s)
            if other is not s:
                raise SampleError(
                    f"{name or 'dataset'}: two samples share the id {s['id']!r} (questions "
                    f"{other['question'][:60]!r} and {s['question'][:60]!r}); ids must be unique"
                )

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> Sample:
        return self.samples[i]

    def __repr__(self) -> str:
        return f"ListDataset({self.name!r}, {len(self)} samples)"


def cfg_get(cfg: Any, key: str) -> Any:
    """``cfg[key]`` of an ``envs`` node (DictConfig or dict). configs/envs/*.yaml give every key
    its one default, so a key that is absent is an error naming it (no second default here)."""
    try:
        return cfg[key]
    except KeyError:
        raise ValueError(
            f"envs.{key} is not set (dataset {cfg.get('name')!r}): add it to the envs node, as configs/envs/*.yaml do"
        ) from None


def resolve_split(cfg: Any, split: str) -> str:
    """``test`` means the config's ``test_split``; any other name is taken as given."""
    return str(cfg_get(cfg, "test_split")) if split == "test" else split


def order_and_cap(samples: list[Sample], seed: int, length: int | None, *keys: object) -> list[Sample]:
    """Permute with a generator derived from (seed, *keys), then keep the first ``length``."""
    perm = derive_rng(int(seed), "dataset-order", *keys).permutation(len(samples))
    out = [samples[int(i)] for i in perm]
    return cap(out, length)


def split_length(cfg: Any, split: str) -> int | None:
    """``envs.length`` for ``split``, except the data's own validation split, which is never capped:
    model selection keeps all its questions when ``length`` caps the training set (a learning curve)."""
    return -1 if split == "validation" else cfg_get(cfg, "length")


def cap(samples: list[Sample], length: int | None) -> list[Sample]:
    if length is None or int(length) < 0:
        return samples
    return samples[: int(length)]


def require_file(path: Path, what: str, how: str) -> Path:
    """``path``, or ``path`` + ``.gz`` (the shipped sets are gzipped); else DatasetNotFoundError."""
    if path.is_file():
        return path
    gz = path.with_name(path.name + ".gz")
    if gz.is_file():
        return gz
    raise DatasetNotFoundError(path, what, how)


def content_sha256(path: str | Path | None) -> str | None:
    """sha256 of a data file's uncompressed content (``path`` or ``path.gz``; what the manifests of
    the shipped data record), or None for a folder or a path that does not exist."""
    if path is None:
        return None
    p = Path(str(path))
    p = p if p.is_file() else p.with_name(p.name + ".gz")
    if not p.is_file():
        return None
    h = hashlib.sha256()
    with gzip.open(p, "rb") if p.suffix == ".gz" else open(p, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@contextmanager
def open_text(path: Path) -> Iterator[TextIO]:
    """A text file, gunzipped for ``.gz``. Binary, non-UTF-8 or truncated content read inside the
    ``with`` block becomes a DatasetFormatError naming the file (not a raw decoder traceback)."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8") as f:
            yield f
    except UnicodeDecodeError as e:
        raise DatasetFormatError(
            path,
            None,
            f"not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start} "
            "of a decoded block); is it a binary file? Rebuild or re-download it",
        ) from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise DatasetFormatError(
            path,
            None,
            f"not a complete gzip file ({e or type(e).__name__}); it is corrupt or "
            "was cut short: rebuild or re-download it",
        ) from None


def read_json_array(path: Path) -> list[Any]:
    try:
        with open_text(path) as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise DatasetFormatError(path, e.lineno, f"invalid JSON: {e.msg}") from None
    if not isinstance(data, list):
        raise DatasetFormatError(path, None, f"expected one JSON array of records, got {type(data).__name__}")
    return data


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based line number, record) for every non-blank line."""
    with open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise DatasetFormatError(path, lineno, f"invalid JSON: {e.msg}") from None
            if not isinstance(rec, dict):
                raise DatasetFormatError(path, lineno, "expected a JSON object per line")
            yield lineno, rec


def need(rec: Any, field: str, kind: type | tuple[type, ...], path: Path, where: str | int) -> Any:
    """``rec[field]``, checked to exist and be of ``kind``; else a DatasetFormatError."""
    if not isinstance(rec, dict):
        raise DatasetFormatError(path, where, "record is not a JSON object")
    if field not in rec:
        raise DatasetFormatError(path, where, f"missing field {field!r}")
    value = rec[field]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise DatasetFormatError(path, where, f"field {field!r} must be {names}, got {type(value).__name__}")
    return value


def checked(sample: dict[str, Any], path: Path, where: str | int) -> Sample:
    try:
        return validate_sample(sample, f"{path} ({where})" if not isinstance(where, int) else f"{path}:{where}")
    except SampleError as e:
        raise DatasetFormatError(path, where, str(e)) from None


# ---------------------------------------------------------------- HotpotQA format
