"""HotpotQA (DESIGN §7.6) and 2WikiMultihopQA (§7.8) loaders.

HotpotQA format: one JSON array of records with ``_id``, ``question``, ``answer``,
``supporting_facts`` ([title, sentence_id] pairs) and ``context`` ([title, [sentences]]
pairs). One chunk per paragraph in context order: ``title + " " + " ".join(sentences)``;
``sf_idx`` = ascending indices of the paragraphs whose title is a supporting title.

2WikiMultihopQA answers gain aliases as in its official v1.1 evaluation: when ``id_aliases.json``
(JSON Lines ``{"Q_id", "aliases", "demonyms"}``, shipped with the dataset's ``answer_id`` version)
lies in the data folder, a record's ``answer_id`` selects its aliases and demonyms, which become
``answer_aliases`` (the readers score against the answer and all of them). Its ``test`` split has
no answers: loading it says so.

Gold that the context lacks (docs/DATA_OTHER.md): in the fullwiki setting the context is what a
retriever found, and it may miss supporting paragraphs. When none of the supporting titles is
in the context (or a record names no supporting fact) the gold is unknown: ``sf_idx`` = [],
``sf_known`` = False, so fact metrics are null (an empty gold set would otherwise score EM 1.0).
When only some are there, ``sf_idx`` holds those, ``sf_partial`` = True flags the sample and
``sf_missing_titles`` names the others. Distractor files always hold every gold paragraph.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envs.data.common import (
    ListDataset,
    cfg_get,
    checked,
    iter_jsonl,
    need,
    order_and_cap,
    read_json_array,
    require_file,
    resolve_split,
)
from envs.data.registry import register
from envs.errors import DatasetFormatError
from envs.types import Sample

HOTPOTQA_FILES = {
    "train": ["hotpot_train_v1.1.json"],
    "eval": ["hotpot_dev_distractor_v1.json"],
    "all": ["hotpot_dev_distractor_v1.json", "hotpot_train_v1.1.json"],  # eval first (ref)
    "fullwiki_eval": ["hotpot_dev_fullwiki_v1.json"],  # retrieved context: gold may be missing
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


def hotpot_record_to_sample(rec: Any, path: Path, i: int) -> Sample:
    """One HotpotQA/2Wiki-format record -> Sample (record i of ``path``, 0-based)."""
    rid = rec.get("_id", "?") if isinstance(rec, dict) else "?"
    where = f"record {i}, _id={rid}"
    sid = need(rec, "_id", (str, int), path, where)
    question = need(rec, "question", str, path, where)
    answer = need(rec, "answer", (str, int, float, bool), path, where)
    facts = need(rec, "supporting_facts", list, path, where)
    context = need(rec, "context", list, path, where)
    titles: set[str] = set()  # supporting titles
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
    sample: dict[str, Any] = {
        "id": sid,
        "question": question,
        "answer": str(answer),
        "chunks": chunks,
        "sf_idx": sf_idx,
    }
    missing = sorted(titles - {para[0] for para in context})
    if not sf_idx:
        sample["sf_known"] = False
    elif missing:
        sample["sf_partial"] = True
        sample["sf_missing_titles"] = missing
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
        require_file(
            Path(data_path) / name,
            "HotpotQA JSON array (_id, question, answer, supporting_facts, context)",
            HOTPOTQA_HOW,
        )
        for name in HOTPOTQA_FILES[split]
    ]


def twowiki_files(data_path: str | Path, split: str) -> list[Path]:
    if split not in TWOWIKI_SPLITS:
        raise ValueError(f"2WikiMultihopQA split must be one of {TWOWIKI_SPLITS} (or 'test'), got {split!r}")
    return [
        require_file(Path(data_path) / f"{split}.json", "2WikiMultihopQA JSON array (HotpotQA format)", TWOWIKI_HOW)
    ]


def load_hotpotqa(data_path: str | Path, split: str) -> list[Sample]:
    """All samples of a HotpotQA split in file order."""
    return load_hotpot_format(hotpotqa_files(data_path, split))


def read_id_aliases(data_path: str | Path) -> dict[str, list[str]]:
    """``Q_id`` -> aliases + demonyms from ``<data_path>/id_aliases.json`` (or ``.gz``); empty when
    the file is absent."""
    path = Path(data_path) / "id_aliases.json"
    if not path.is_file() and not path.with_name(path.name + ".gz").is_file():
        return {}
    path = require_file(path, "", "")
    table: dict[str, list[str]] = {}
    for lineno, rec in iter_jsonl(path):
        qid = need(rec, "Q_id", str, path, lineno)
        names = need(rec, "aliases", list, path, lineno) + need(rec, "demonyms", list, path, lineno)
        if not all(isinstance(n, str) for n in names):
            raise DatasetFormatError(path, lineno, "'aliases' and 'demonyms' must be lists of strings")
        table[qid] = names
    return table


def load_2wiki(data_path: str | Path, split: str) -> list[Sample]:
    """All samples of a 2Wiki split in file order, with ``answer_aliases`` from id_aliases.json."""
    aliases = read_id_aliases(data_path)
    out: list[Sample] = []
    for path in twowiki_files(data_path, split):
        for i, rec in enumerate(read_json_array(path)):
            if isinstance(rec, dict) and "answer" not in rec:
                raise DatasetFormatError(
                    path,
                    f"record {i}, _id={rec.get('_id', '?')}",
                    "no 'answer': the official 2WikiMultihopQA test split is unlabelled (its authors score "
                    "test predictions on request); train and evaluate on train/dev",
                )
            sample = hotpot_record_to_sample(rec, path, i)
            names = aliases.get(str(rec.get("answer_id")), [])
            if names:
                sample["answer_aliases"] = sorted(set(names) - {sample["answer"]})
            out.append(sample)
    return out


@register("hotpotqa")
def build_hotpotqa(envs_cfg: Any, split: str, seed: int, legacy: Any = None) -> ListDataset:
    """Reads ``data_path``, ``test_split`` (its configs/envs yaml: ``eval``), ``length``."""
    split = resolve_split(envs_cfg, split)
    samples = load_hotpotqa(cfg_get(envs_cfg, "data_path"), split)
    return ListDataset(
        order_and_cap(samples, seed, cfg_get(envs_cfg, "length"), "hotpotqa", split), f"hotpotqa/{split}"
    )


@register("2WikiMultihopQA")
def build_2wiki(envs_cfg: Any, split: str, seed: int, legacy: Any = None) -> ListDataset:
    """Reads ``data_path``, ``test_split`` (``dev``: no envs yaml of its own, so the node must name it), ``length``."""
    split = resolve_split(envs_cfg, split)
    samples = load_2wiki(cfg_get(envs_cfg, "data_path"), split)
    return ListDataset(
        order_and_cap(samples, seed, cfg_get(envs_cfg, "length"), "2WikiMultihopQA", split), f"2WikiMultihopQA/{split}"
    )
