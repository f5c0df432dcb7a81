"""RULER QA loader (DESIGN §7.9), answer-only unless the record names its gold documents.

``data_path`` is one JSONL file, read for every split (RULER's own files), or a folder of
``<split>.jsonl[.gz]`` files as the NIAH loader reads them (``test_split``: e.g. ``test4k``; the
project's RULER QA test sets, scripts/niah_testsets.py). Records: ``index``, ``input``,
``outputs``. ``input`` is cut at the last occurrence of
``question_marker`` (default ``"QUESTION:"``, ref; falls back to a case-insensitive match, so
RULER's ``Question:`` works): the stripped right part is the question; the left part is split
on ``Document <n>:`` and the non-empty stripped pieces are the chunks (a leading instruction
preamble becomes chunk 0, as in the ref). RULER's template repeats the preamble's first paragraph
(the instruction) after the last document: that repeat is cut from the last document, whose text
it is not. ``answer`` = outputs[0], ``answer_aliases`` =
outputs[1:]. RULER files from 2024 end ``input`` with the answer prefix (`` Answer:``); current
ones keep it in the field ``answer_prefix``. Either way it is cut from the question.

``id`` is the record's position in the file (0-based); RULER's ``index`` is kept as
``ruler_index`` (a field that current RULER NIAH files fill with a character offset, so the
project never keys anything on it).

Gold: RULER's own files do not say which document holds the answer, so ``sf_idx`` = [] and
``sf_known`` = False (fact metrics null; the ref's ``[0]`` placeholder is gone, DESIGN §11 #31).
Records written by scripts/generate_data.py multihop carry ``gold_docs`` (the ``n`` of each gold
``Document n:``); those are mapped to chunk indices and ``sf_known`` is True.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from envs.data.common import ListDataset, cfg_get, checked, iter_jsonl, need, order_and_cap, require_file, resolve_split
from envs.data.registry import SplitNamedSpec, register
from envs.errors import DatasetFormatError, DatasetNotFoundError
from envs.types import Sample

_DOC = re.compile(r"Document (\d+):")
RULER_QA_HOW = (
    "generate with RULER's prepare script (qa_1 = SQuAD, qa_2 = HotpotQA), or offline with "
    "python scripts/generate_data.py multihop (writes a RULER-QA-format file derived from the synthetic set); the "
    "project's test sets from real records: python scripts/niah_testsets.py --tasks qa"
)
RULER_QA_WHAT = "RULER QA JSONL ({index, input, outputs} per line)"


def split_question(text: str, marker: str) -> tuple[str, str] | None:
    pos = text.rfind(marker)
    if pos < 0:
        pos = text.lower().rfind(marker.lower())
    if pos < 0:
        return None
    return text[:pos], text[pos + len(marker) :].strip()


def split_documents(context: str) -> tuple[list[str], dict[int, int]]:
    """Chunks and a map document number -> chunk index (documents with empty text are dropped)."""
    chunks: list[str] = []
    doc_to_chunk: dict[int, int] = {}
    matches = list(_DOC.finditer(context))
    head = context[: matches[0].start()] if matches else context
    if head.strip():
        chunks.append(head.strip())
    instruction = head.strip().split("\n\n")[0]
    for k, m in enumerate(matches):
        end = matches[k + 1].start() if k + 1 < len(matches) else len(context)
        body = context[m.end() : end].strip()
        if k + 1 == len(matches) and instruction and body.endswith(instruction):
            body = body[: -len(instruction)].strip()  # the template's repeat, not the document's text
        if body:
            doc_to_chunk.setdefault(int(m.group(1)), len(chunks))
            chunks.append(body)
    return chunks, doc_to_chunk


ANSWER_PREFIX = "Answer:"  # RULER's QA answer prefix, " Answer:"


def strip_answer_prefix(question: str, rec: dict[str, Any]) -> str:
    prefix = rec.get("answer_prefix")
    prefix = prefix.strip() if isinstance(prefix, str) and prefix.strip() else ANSWER_PREFIX
    return question[: -len(prefix)].rstrip() if question.endswith(prefix) else question


def ruler_qa_record_to_sample(
    rec: dict[str, Any], path: Path, lineno: int, ordinal: int, marker: str = "QUESTION:"
) -> Sample:
    """Record number ``ordinal`` (0-based, its id) on line ``lineno`` of ``path``."""
    where = f"line {lineno}, index={rec.get('index', '?')}"
    index = need(rec, "index", (int, str), path, where)
    text = need(rec, "input", str, path, where)
    outputs = need(rec, "outputs", list, path, where)
    if not outputs:
        raise DatasetFormatError(path, where, "field 'outputs' is empty (need the answer)")
    parts = split_question(text, marker)
    if parts is None:
        raise DatasetFormatError(path, where, f"field 'input' has no question marker {marker!r}")
    context, question = parts[0], strip_answer_prefix(parts[1], rec)
    chunks, doc_to_chunk = split_documents(context)
    if not chunks:
        raise DatasetFormatError(path, where, "field 'input' has no documents before the question")
    sample: dict[str, Any] = {
        "id": ordinal,
        "ruler_index": index,
        "question": question,
        "answer": str(outputs[0]),
        "answer_aliases": [str(o) for o in outputs[1:]],
        "chunks": chunks,
        "sf_idx": [],
        "sf_known": False,
    }
    gold = rec.get("gold_docs")
    if gold is not None:
        if not isinstance(gold, list) or not all(isinstance(g, int) and g in doc_to_chunk for g in gold):
            raise DatasetFormatError(
                path, where, f"field 'gold_docs' must list document numbers present in 'input', got {gold!r}"
            )
        sample["sf_idx"] = sorted({doc_to_chunk[g] for g in gold})
        sample["sf_known"] = bool(gold)
    return checked(sample, path, where)


def ruler_qa_file(data_path: str | Path, split: str) -> Path:
    """The file a split reads: ``data_path`` itself, or ``<data_path>/<split>.jsonl[.gz]`` for a folder."""
    base = Path(data_path)
    if not base.is_dir():
        return require_file(base, RULER_QA_WHAT, RULER_QA_HOW)
    for name in (f"{split}.jsonl", f"{split}.jsonl.gz"):
        if (base / name).is_file():
            return base / name
    raise DatasetNotFoundError(base / f"{split}.jsonl", RULER_QA_WHAT, RULER_QA_HOW)


def load_ruler_qa(path: str | Path, marker: str = "QUESTION:", split: str = "test") -> list[Sample]:
    p = ruler_qa_file(path, split)
    return [ruler_qa_record_to_sample(rec, p, lineno, k, marker) for k, (lineno, rec) in enumerate(iter_jsonl(p))]


class RulerQASpec(SplitNamedSpec):
    """When the config names a folder, the evaluation's ``data_path`` (and so its ``data_sha256``)
    is the file read; a file is recorded as given (as earlier evaluations recorded it)."""

    def eval_meta(self, envs: Any) -> dict[str, Any]:
        meta = super().eval_meta(envs)
        if Path(str(envs.data_path)).is_dir():
            meta["data_path"] = str(ruler_qa_file(envs.data_path, str(envs.test_split)))
        return meta


@register("ruler_qa", RulerQASpec())
def build_ruler_qa(envs_cfg: Any, split: str, seed: int) -> ListDataset:
    """Reads ``data_path`` (one JSONL file, used for every split: this is an evaluation set; or a
    folder of split files), ``question_marker`` and ``length``."""
    data_path = Path(str(cfg_get(envs_cfg, "data_path")))
    if data_path.is_dir():  # a folder of split files; one file serves every split (and orders its samples as before)
        split = resolve_split(envs_cfg, split)
    samples = load_ruler_qa(data_path, str(cfg_get(envs_cfg, "question_marker")), split)
    return ListDataset(
        order_and_cap(samples, seed, cfg_get(envs_cfg, "length"), "ruler_qa", split), f"ruler_qa/{split}"
    )
