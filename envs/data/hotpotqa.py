"""HotpotQA (SPEC §7.6) and 2WikiMultihopQA (§7.8) loaders, plus the small helpers that the
other non-BabiLong loaders share (reading JSON/JSONL, seeded order, ``length`` cap).

HotpotQA format: one JSON array of records with ``_id``, ``question``, ``answer``,
``supporting_facts`` ([title, sentence_id] pairs) and ``context`` ([title, [sentences]]
pairs). One chunk per paragraph in context order: ``title + " " + " ".join(sentences)``;
``sf_idx`` = ascending indices of the paragraphs whose title is a supporting title.
"""
from __future__ import annotations

import gzip
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from envs.data.registry import register
from envs.errors import DatasetFormatError, DatasetNotFoundError
from envs.seeding import derive_rng
from envs.types import Sample, SampleError, validate_sample

HOTPOTQA_FILES = {
    "train": ["hotpot_train_v1.1.json"],
    "eval": ["hotpot_dev_distractor_v1.json"],
    "all": ["hotpot_dev_distractor_v1.json", "hotpot_train_v1.1.json"],  # eval first (ref)
    "fullwiki_eval": ["hotpot_dev_fullwiki_v1.json"],
}
TWOWIKI_SPLITS = ("train", "dev", "test")
HOTPOTQA_HOW = (
    "download from https://hotpotqa.github.io (distractor/fullwiki JSON), or generate the "
    "offline synthetic set: python scripts/generate_multihop.py"
)
TWOWIKI_HOW = (
    "download 2WikiMultihopQA (https://github.com/Alab-NII/2wikimultihop: train/dev/test.json), "
    "or generate the offline synthetic set: python scripts/generate_multihop.py"
)


# ---------------------------------------------------------------- shared helpers


class ListDataset:
    """A ready list of Samples (the object every builder here returns)."""

    def __init__(self, samples: Sequence[Sample], name: str = ""):
        self.samples = list(samples)
        self.name = name

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> Sample:
        return self.samples[i]

    def __repr__(self) -> str:
        return f"ListDataset({self.name!r}, {len(self)} samples)"


def cfg_get(cfg: Any, key: str, default: Any = None) -> Any:
    """``cfg.key`` for a DictConfig / dict / object, ``default`` when absent or None."""
    if cfg is None:
        return default
    try:
        value = cfg.get(key, default)
    except AttributeError:
        value = getattr(cfg, key, default)
    return default if value is None else value


def resolve_split(cfg: Any, split: str, default_test: str = "test") -> str:
    """``test`` means the config's ``test_split``; any other name is taken as given."""
    if split == "test":
        return str(cfg_get(cfg, "test_split", default_test))
    return split


def order_and_cap(samples: list[Sample], seed: int, length: int | None, *keys: object) -> list[Sample]:
    """Permute with a generator derived from (seed, *keys), then keep the first ``length``."""
    perm = derive_rng(int(seed), "dataset-order", *keys).permutation(len(samples))
    out = [samples[int(i)] for i in perm]
    return cap(out, length)


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


def open_text(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


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


def hotpot_record_to_sample(rec: Any, path: Path, i: int) -> Sample:
    """One HotpotQA/2Wiki-format record -> Sample (record i of ``path``, 0-based)."""
    rid = rec.get("_id", "?") if isinstance(rec, dict) else "?"
    where = f"record {i}, _id={rid}"
    sid = need(rec, "_id", (str, int), path, where)
    question = need(rec, "question", str, path, where)
    answer = need(rec, "answer", (str, int, float, bool), path, where)
    facts = need(rec, "supporting_facts", list, path, where)
    context = need(rec, "context", list, path, where)
    titles: set[str] = set()
    for k, fact in enumerate(facts):
        if not isinstance(fact, (list, tuple)) or len(fact) < 1 or not isinstance(fact[0], str):
            raise DatasetFormatError(path, where, f"supporting_facts[{k}] must be [title, sentence_id]")
        titles.add(fact[0])
    chunks: list[str] = []
    sf_idx: list[int] = []
    for j, para in enumerate(context):
        if (
            not isinstance(para, (list, tuple))
            or len(para) != 2
            or not isinstance(para[0], str)
            or not isinstance(para[1], list)
            or not all(isinstance(s, str) for s in para[1])
        ):
            raise DatasetFormatError(path, where, f"context[{j}] must be [title, [sentences]]")
        title, sentences = para
        chunks.append(title + " " + " ".join(sentences))
        if title in titles:
            sf_idx.append(j)
    sample = {"id": sid, "question": question, "answer": str(answer), "chunks": chunks, "sf_idx": sf_idx}
    return checked(sample, path, where)


def load_hotpot_format(files: Sequence[Path]) -> list[Sample]:
    out: list[Sample] = []
    for path in files:
        out.extend(hotpot_record_to_sample(rec, path, i) for i, rec in enumerate(read_json_array(path)))
    return out


def hotpotqa_files(data_path: str | Path, split: str) -> list[Path]:
    if split not in HOTPOTQA_FILES:
        raise ValueError(f"HotpotQA split must be one of {sorted(HOTPOTQA_FILES)} (or 'test'), got {split!r}")
    return [
        require_file(Path(data_path) / name, "HotpotQA JSON array (_id, question, answer, supporting_facts, context)", HOTPOTQA_HOW)
        for name in HOTPOTQA_FILES[split]
    ]


def twowiki_files(data_path: str | Path, split: str) -> list[Path]:
    if split not in TWOWIKI_SPLITS:
        raise ValueError(f"2WikiMultihopQA split must be one of {TWOWIKI_SPLITS} (or 'test'), got {split!r}")
    return [require_file(Path(data_path) / f"{split}.json", "2WikiMultihopQA JSON array (HotpotQA format)", TWOWIKI_HOW)]


def load_hotpotqa(data_path: str | Path, split: str) -> list[Sample]:
    """All samples of a HotpotQA split in file order."""
    return load_hotpot_format(hotpotqa_files(data_path, split))


def load_2wiki(data_path: str | Path, split: str) -> list[Sample]:
    return load_hotpot_format(twowiki_files(data_path, split))


@register("hotpotqa")
def build_hotpotqa(envs_cfg: Any, split: str, seed: int, legacy: Any = None) -> ListDataset:
    """Reads ``data_path``, ``test_split`` (default ``eval``), ``length``."""
    split = resolve_split(envs_cfg, split, "eval")
    samples = load_hotpotqa(cfg_get(envs_cfg, "data_path"), split)
    return ListDataset(order_and_cap(samples, seed, cfg_get(envs_cfg, "length", -1), "hotpotqa", split), f"hotpotqa/{split}")


@register("2WikiMultihopQA")
def build_2wiki(envs_cfg: Any, split: str, seed: int, legacy: Any = None) -> ListDataset:
    """Reads ``data_path``, ``test_split`` (default ``dev``), ``length``."""
    split = resolve_split(envs_cfg, split, "dev")
    samples = load_2wiki(cfg_get(envs_cfg, "data_path"), split)
    return ListDataset(order_and_cap(samples, seed, cfg_get(envs_cfg, "length", -1), "2WikiMultihopQA", split), f"2WikiMultihopQA/{split}")
