"""RULER NIAH loader (docs/DATA_OTHER.md).

Files ``{data_path}/{split}.jsonl`` (``.jsonl.gz`` also read), one RULER record per line with
``index``, ``input`` (instruction + haystack with needles + question) and ``outputs`` (needle
values); other fields are ignored. The input is sentence-split (envs/data/splitter.py); the
question is RULER's question sentence ("What is / What are all the special magic ..."), the
last such sentence, else the last sentence; the sentences before it (instruction sentences
included) are the chunks, and what follows it (a chat template's closing tag) is dropped.
``sf_idx`` = sorted unique chunk indices whose text contains an output value; the question is
never a candidate. ``legacy.niah_raw_sf`` restores the ref list (duplicates, and the question's
out-of-range index when it contains a value): those samples are not schema-validated.

Both RULER formats are read:

* current RULER writes the answer prefix ("The special magic numbers for X mentioned in the
  provided text are") to its own field ``answer_prefix`` and puts the character offset of the
  first answer in ``index``, so ``index`` repeats across a file;
* RULER files from 2024 have no ``answer_prefix`` field: the prefix ends ``input``. It is cut
  off here (else it would be taken for the question and the real question left as a chunk).

``id`` is the record's position in the file (0-based), unique by construction; RULER's
``index`` is kept as ``ruler_index``. For 2024 files and the project's generator the two are
equal, so their ids are what they always were.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from envs.data.common import ListDataset, cfg_get, checked, iter_jsonl, need, order_and_cap, resolve_split
from envs.data.registry import SplitNamedSpec, register
from envs.data.splitter import split_sentences
from envs.errors import DatasetFormatError, DatasetNotFoundError
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
    # the ref silently returned the training file for `validation` (DESIGN §11 #15): never here
    raise DatasetNotFoundError(base / f"{split}.jsonl", NIAH_WHAT, NIAH_HOW)


# RULER's NIAH question, plural ("What are all the special magic numbers for ...?") or singular
QUESTION = re.compile(r"What (?:are all|is) the special magic ")
# RULER's answer prefix as a 2024 file ends its input with it (singular "is" for one answer)
ANSWER_PREFIX_2024 = re.compile(r"\s*The special magic [^\n]*? mentioned in the provided text (?:are|is)\s*$")


def raw_sf_idx(sentences: list[str], values: list[str]) -> list[int]:
    """The ref's list: every sentence (question included) tested against every value."""
    return [j for v in values for j, s in enumerate(sentences) if v in s]


def strip_answer_prefix(text: str, rec: dict[str, Any]) -> str:
    """``input`` without RULER's answer prefix: a record with an ``answer_prefix`` field (current
    RULER) has it outside ``input`` unless ``input`` still ends with it; a record without the
    field (RULER 2024) ends ``input`` with it."""
    prefix = rec.get("answer_prefix")
    if isinstance(prefix, str):
        body = text.rstrip()
        return body[: -len(prefix.strip())] if prefix.strip() and body.endswith(prefix.strip()) else text
    m = ANSWER_PREFIX_2024.search(text)
    return text[: m.start()] if m else text


def question_position(sentences: list[str]) -> int:
    """Index of the question: RULER's question sentence (the last one), else the last sentence."""
    for j in range(len(sentences) - 1, -1, -1):
        if QUESTION.match(sentences[j]):
            return j
    return len(sentences) - 1


def niah_record_to_sample(
    rec: dict[str, Any], path: Path, lineno: int, ordinal: int, legacy_raw_sf: bool = False
) -> Sample:
    """Record number ``ordinal`` (0-based, its id) on line ``lineno`` of ``path``."""
    where = f"line {lineno}, index={rec.get('index', '?')}"
    index = need(rec, "index", (int, str), path, where)
    text = strip_answer_prefix(need(rec, "input", str, path, where), rec)
    outputs = need(rec, "outputs", list, path, where)
    values = [str(v) for v in outputs]
    if not values or not all(values):
        raise DatasetFormatError(path, where, "field 'outputs' must be a non-empty list of needle values")
    sentences = split_sentences(text)
    q = question_position(sentences)
    if q < 1:
        raise DatasetFormatError(
            path, where, "field 'input' splits into fewer than 2 sentences (need chunks + question)"
        )
    question, chunks = sentences[q], sentences[:q]
    sample: dict[str, Any] = {
        "id": ordinal,
        "question": question,
        "answer": ",".join(values),
        "chunks": chunks,
        "ruler_index": index,
    }
    if legacy_raw_sf:
        sample["sf_idx"] = raw_sf_idx(sentences[: q + 1], values)
        return sample  # type: ignore[return-value]  # may hold len(chunks): deliberately unchecked
    sample["sf_idx"] = sorted({j for j, c in enumerate(chunks) if any(v in c for v in values)})
    return checked(sample, path, where)


def load_niah(data_path: str | Path, split: str, legacy_raw_sf: bool = False) -> list[Sample]:
    path = niah_file(data_path, split)
    return [
        niah_record_to_sample(rec, path, lineno, k, legacy_raw_sf) for k, (lineno, rec) in enumerate(iter_jsonl(path))
    ]


@register("niah", SplitNamedSpec(), legacy=("niah_raw_sf",))
def build_niah(envs_cfg: Any, split: str, seed: int, niah_raw_sf: bool = False) -> ListDataset:
    """Reads ``data_path``, ``test_split`` (configs/envs/niah.yaml: ``test4k``), ``length``; the
    legacy switch ``niah_raw_sf`` comes from the registry."""
    split = resolve_split(envs_cfg, split)
    samples = load_niah(cfg_get(envs_cfg, "data_path"), split, niah_raw_sf)
    return ListDataset(order_and_cap(samples, seed, cfg_get(envs_cfg, "length"), "niah", split), f"niah/{split}")
