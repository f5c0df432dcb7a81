"""RULER NIAH loader (SPEC §7.5).

Files ``{data_path}/{split}.jsonl`` (``.jsonl.gz`` also read), one RULER record per line with
``index``, ``input`` (instruction + haystack with needles + question) and ``outputs`` (needle
values); other fields are ignored. The input is sentence-split (envs/data/splitter.py); the
last sentence is the question, the others (instruction sentences included) are the chunks.
``sf_idx`` = sorted unique chunk indices whose text contains an output value; the question is
never a candidate. ``legacy.niah_raw_sf`` restores the ref list (duplicates, and the question's
out-of-range index when it contains a value): those samples are not schema-validated.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from envs.data.common import ListDataset, cfg_get, checked, iter_jsonl, need, order_and_cap, resolve_split
from envs.data.registry import register
from envs.data.splitter import split_sentences
from envs.errors import DatasetFormatError, DatasetNotFoundError
from envs.legacy import flag
from envs.types import Sample

NIAH_HOW = (
    "generate RULER data with RULER's prepare script (lengths in LLM tokens), or offline with "
    "python scripts/generate_niah.py --out <data_path> (RULER format)"
)
NIAH_WHAT = "RULER NIAH JSONL (one {index, input, outputs, ...} object per line)"


def niah_file(data_path: str | Path, split: str) -> Path:
    base = Path(data_path)
    for name in (f"{split}.jsonl", f"{split}.jsonl.gz"):
        if (base / name).is_file():
            return base / name
    # the ref silently returned the training file for `validation` (SPEC §11 #15): never here
    raise DatasetNotFoundError(base / f"{split}.jsonl", NIAH_WHAT, NIAH_HOW)


def raw_sf_idx(sentences: list[str], values: list[str]) -> list[int]:
    """The ref's list: every sentence (question included) tested against every value."""
    return [j for v in values for j, s in enumerate(sentences) if v in s]


def niah_record_to_sample(rec: dict[str, Any], path: Path, lineno: int, legacy_raw_sf: bool = False) -> Sample:
    where = f"line {lineno}, index={rec.get('index', '?')}"
    index = need(rec, "index", (int, str), path, where)
    text = need(rec, "input", str, path, where)
    outputs = need(rec, "outputs", list, path, where)
    values = [str(v) for v in outputs]
    if not values or not all(values):
        raise DatasetFormatError(path, where, "field 'outputs' must be a non-empty list of needle values")
    sentences = split_sentences(text)
    if len(sentences) < 2:
        raise DatasetFormatError(path, where, "field 'input' splits into fewer than 2 sentences (need chunks + question)")
    question, chunks = sentences[-1], sentences[:-1]
    sample: dict[str, Any] = {"id": index, "question": question, "answer": ",".join(values), "chunks": chunks}
    if legacy_raw_sf:
        sample["sf_idx"] = raw_sf_idx(sentences, values)
        return sample  # type: ignore[return-value]  # may hold len(chunks): deliberately unchecked
    sample["sf_idx"] = sorted({j for j, c in enumerate(chunks) if any(v in c for v in values)})
    return checked(sample, path, where)


def load_niah(data_path: str | Path, split: str, legacy_raw_sf: bool = False) -> list[Sample]:
    path = niah_file(data_path, split)
    return [niah_record_to_sample(rec, path, lineno, legacy_raw_sf) for lineno, rec in iter_jsonl(path)]


@register("niah")
def build_niah(envs_cfg: Any, split: str, seed: int, legacy: Any = None) -> ListDataset:
    """Reads ``data_path``, ``test_split`` (default ``test4k``), ``length``; legacy ``niah_raw_sf``."""
    split = resolve_split(envs_cfg, split, "test4k")
    samples = load_niah(cfg_get(envs_cfg, "data_path"), split, flag(legacy, "niah_raw_sf"))
    return ListDataset(order_and_cap(samples, seed, cfg_get(envs_cfg, "length", -1), "niah", split), f"niah/{split}")
