"""MuSiQue loader (docs/DATA_OTHER.md).

JSONL, one record per line: ``id``, ``question``, ``answer``, ``answer_aliases``,
``paragraphs`` (``idx``, ``title``, ``paragraph_text``, ``is_supporting``),
``question_decomposition`` (hops with ``paragraph_support_idx``) and ``answerable``. One chunk
per paragraph in list order: ``title + ". " + paragraph_text``.

Gold, as the official evaluator (StonyBrookNLP/musique ``evaluate_v1.0.py``) takes it: the
paragraphs with ``is_supporting`` true. ``sf_idx`` lists them in reasoning order (the order in
which the decomposition's ``paragraph_support_idx`` names them, mapped from ``idx`` to list
position), then any the decomposition does not name, ascending. The reference read the
decomposition alone; on MuSiQue-Ans both give the same set.

MuSiQue-Full (splits ``full_train`` / ``full_eval``) pairs every question with an unanswerable
contrast under the same ``id``; the official evaluator scores support only on answerable ones.
A record with ``answerable`` false therefore has unknown gold (``sf_idx`` [], ``sf_known``
False: null fact metrics, refused by ground-truth training) and the id ``<id>:unanswerable``,
so ids stay unique; ``answerable`` is kept on the sample.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envs.data.common import (
    ListDataset,
    cfg_get,
    checked,
    iter_jsonl,
    need,
    order_and_cap,
    require_file,
    resolve_split,
    split_length,
)
from envs.data.ircot import SubsetSpec, load_subset, subset_files
from envs.data.registry import register
from envs.errors import DatasetFormatError
from envs.types import Sample

MUSIQUE_FILES = {
    "train": ["musique_ans_v1.0_train.jsonl"],
    "eval": ["musique_ans_v1.0_dev.jsonl"],
    "all": ["musique_ans_v1.0_dev.jsonl", "musique_ans_v1.0_train.jsonl"],  # eval first, as HotpotQA
    "full_train": ["musique_full_v1.0_train.jsonl"],
    "full_eval": ["musique_full_v1.0_dev.jsonl"],
}
MUSIQUE_HOW = (
    "download MuSiQue v1.0 (https://github.com/StonyBrookNLP/musique, data/musique_{ans,full}_v1.0_*.jsonl), "
    "use the shipped real subset (paths=embedded: data/musique/subset_{train,validation,test}.jsonl.gz), or the generated "
    "stand-ins (paths=generated)"
)


def musique_record_to_sample(rec: dict[str, Any], path: Path, lineno: int | str) -> Sample:
    """One ans/full v1.0 record -> Sample (``lineno``: the 1-based line, or a place such as ``"line 3"``)."""
    where = (
        f"line {lineno}, id={rec.get('id', '?')}" if isinstance(lineno, int) else f"{lineno}, id={rec.get('id', '?')}"
    )
    sid = need(rec, "id", (str, int), path, where)
    question = need(rec, "question", str, path, where)
    answer = need(rec, "answer", (str, int, float), path, where)
    aliases = rec.get("answer_aliases") or []
    if not isinstance(aliases, list):
        raise DatasetFormatError(path, where, "field 'answer_aliases' must be a list")
    paragraphs = need(rec, "paragraphs", list, path, where)
    hops = need(rec, "question_decomposition", list, path, where)
    answerable = rec.get("answerable", True)
    if not isinstance(answerable, bool):
        raise DatasetFormatError(path, where, f"field 'answerable' must be true or false, got {answerable!r}")
    chunks: list[str] = []
    position: dict[int, int] = {}
    supporting: list[int] = []
    for j, para in enumerate(paragraphs):
        pwhere = f"{where}, paragraphs[{j}]"
        idx = need(para, "idx", int, path, pwhere)
        title = need(para, "title", str, path, pwhere)
        text = need(para, "paragraph_text", str, path, pwhere)
        if need(para, "is_supporting", bool, path, pwhere):
            supporting.append(j)
        chunks.append(title + ". " + text)
        position[idx] = j
    reasoning: list[int] = []
    for k, hop in enumerate(hops):
        hwhere = f"{where}, question_decomposition[{k}]"
        if not isinstance(hop, dict) or "paragraph_support_idx" not in hop:
            raise DatasetFormatError(path, hwhere, "missing field 'paragraph_support_idx'")
        idx = hop["paragraph_support_idx"]
        if idx is None:
            continue
        if idx not in position:
            raise DatasetFormatError(path, hwhere, f"paragraph_support_idx {idx!r} is not the idx of any paragraph")
        reasoning.append(position[idx])
    gold = set(supporting)
    sf_idx = list(dict.fromkeys(j for j in reasoning if j in gold)) + sorted(gold - set(reasoning))
    if answerable and not sf_idx:
        raise DatasetFormatError(path, where, "an answerable record with no paragraph marked is_supporting")
    sample: dict[str, Any] = {
        "id": sid if answerable else f"{sid}:unanswerable",
        "question": question,
        "answer": str(answer),
        "answer_aliases": [str(a) for a in aliases],
        "chunks": chunks,
        "sf_idx": sf_idx if answerable else [],
        "answerable": answerable,
    }
    if not answerable:
        sample["sf_known"] = False
    return checked(sample, path, where)


def load_musique(data_path: str | Path, split: str) -> list[Sample]:
    """All samples of a MuSiQue split in file order: the official files, or the shipped real
    subset's ``subset_{train,validation,test}.jsonl`` (ans v1.0 and IRCoT layouts; envs/data/ircot.py)."""
    subset = subset_files(
        data_path, split, MUSIQUE_FILES, "MuSiQue subset JSONL (ans v1.0 or IRCoT layout)", MUSIQUE_HOW
    )
    if subset is not None:
        return load_subset(subset, musique_record_to_sample, ". ")
    if split not in MUSIQUE_FILES:
        raise ValueError(f"MuSiQue split must be one of {sorted(MUSIQUE_FILES)} (or 'test'), got {split!r}")
    out: list[Sample] = []
    for name in MUSIQUE_FILES[split]:
        path = require_file(
            Path(data_path) / name,
            "MuSiQue JSONL (id, question, answer, paragraphs, question_decomposition)",
            MUSIQUE_HOW,
        )
        out.extend(musique_record_to_sample(rec, path, lineno) for lineno, rec in iter_jsonl(path))
    return out


@register("musique", SubsetSpec())
def build_musique(envs_cfg: Any, split: str, seed: int) -> ListDataset:
    """Reads ``data_path``, ``test_split`` (its configs/envs yaml: ``eval``), ``length``."""
    split = resolve_split(envs_cfg, split)
    samples = load_musique(cfg_get(envs_cfg, "data_path"), split)
    return ListDataset(
        order_and_cap(samples, seed, split_length(envs_cfg, split), "musique", split), f"musique/{split}"
    )
