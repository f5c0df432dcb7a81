"""HotpotQA (DESIGN §7.6) and 2WikiMultihopQA (§7.8) loaders.

HotpotQA format: one JSON array of records with ``_id``, ``question``, ``answer``,
``supporting_facts`` ([title, sentence_id] pairs) and ``context`` ([title, [sentences]]
pairs). One chunk per paragraph in context order: ``title + " " + " ".join(sentences)``;
``sf_idx`` = ascending indices of the paragraphs whose title is a supporting title.

2WikiMultihopQA answers gain aliases as in its official v1.1 evaluation: when ``id_aliases.json``
(JSON Lines ``{"Q_id", "aliases", "demonyms"}``, shipped with the dataset's ``answer_id`` version)
lies in the data folder, a record's ``answer_id`` selects its aliases and demonyms, which become
``answer_aliases`` (the readers score against the answer and all of them). Its ``test`` split has
no answers: loading it says so. The shipped real 2Wiki subset (data/2wikimultihopqa) is read from
``subset_{train,validation,test}.jsonl`` as splits ``train``, ``validation`` and ``dev`` (its
held-out questions, all from the official dev set).

Gold that the context lacks (docs/DATA_OTHER.md, docs/SCORING.md): in the fullwiki setting the
context is what a retriever found, and it may miss supporting paragraphs. ``sf_idx`` holds the
gold paragraphs that are there, ``sf_partial`` = True flags a sample missing some and
``sf_missing_titles`` names those. ``envs.fullwiki_gold`` says how they score:
``official`` (default), as HotpotQA's evaluation does, the missing ones stay gold
(``sf_missing`` = their number: recall counts them, EM is 0) and a sample with none present
scores 0 and is counted; ``in_context`` (the project's earlier rule) scores against the present
ones only, and a sample with none present has unknown gold (``sf_known`` = False, null fact
metrics, left out of the means). A record naming no supporting fact has unknown gold either way.
Distractor files always hold every gold paragraph.
"""

from __future__ import annotations

import logging
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
    split_length,
)
from envs.data.ircot import SubsetSpec, load_subset, subset_files
from envs.data.registry import register
from envs.errors import DatasetFormatError
from envs.types import Sample

log = logging.getLogger(__name__)

HOTPOTQA_FILES = {
    "train": ["hotpot_train_v1.1.json"],
    "eval": ["hotpot_dev_distractor_v1.json"],
    "all": ["hotpot_dev_distractor_v1.json", "hotpot_train_v1.1.json"],  # eval first (ref)
    "fullwiki_eval": ["hotpot_dev_fullwiki_v1.json"],  # retrieved context: gold may be missing
}
TWOWIKI_SPLITS = ("train", "dev", "test")
# the shipped real subset: its held-out questions are official dev records, read as split dev
TWOWIKI_SUBSET_FILES = {
    "train": ["subset_train.jsonl"],
    "validation": ["subset_validation.jsonl"],
    "dev": ["subset_test.jsonl"],
}
FULLWIKI_GOLD = ("official", "in_context")  # envs.fullwiki_gold
HOTPOTQA_HOW = (
    "download from https://hotpotqa.github.io (distractor/fullwiki JSON), use the shipped real subset "
    "(paths=embedded: data/hotpotqa/subset_{train,validation,test}.jsonl.gz), or the generated stand-ins (paths=generated)"
)
TWOWIKI_HOW = (
    "download 2WikiMultihopQA (https://github.com/Alab-NII/2wikimultihop: train/dev/test.json), use the shipped "
    "real subset (paths=embedded: data/2wikimultihopqa, splits train/validation/dev), or the generated stand-ins "
    "(paths=generated)"
)


def hotpot_record_to_sample(rec: Any, path: Path, i: int | str, fullwiki_gold: str = "official") -> Sample:
    """One HotpotQA/2Wiki-format record -> Sample (record i of ``path``, 0-based, or a place such
    as ``"line 3"``); gold missing from the context is scored by ``fullwiki_gold`` (module docstring)."""
    rid = rec.get("_id", "?") if isinstance(rec, dict) else "?"
    where = f"record {i}, _id={rid}" if isinstance(i, int) else f"{i}, _id={rid}"
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
    if missing:
        sample["sf_partial"] = True
        sample["sf_missing_titles"] = missing
    if fullwiki_gold == "official" and missing:
        sample["sf_missing"] = len(missing)
    elif not sf_idx:
        sample["sf_known"] = False
    return checked(sample, path, where)


def load_hotpot_format(files: Sequence[Path], fullwiki_gold: str = "official") -> list[Sample]:
    if fullwiki_gold not in FULLWIKI_GOLD:
        raise ValueError(f"envs.fullwiki_gold must be one of {FULLWIKI_GOLD}, got {fullwiki_gold!r}")
    out: list[Sample] = []
    for path in files:
        records = enumerate(read_json_array(path))
        out.extend(hotpot_record_to_sample(rec, path, i, fullwiki_gold) for i, rec in records)
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


def twowiki_record_to_sample(rec: Any, path: Path, where: int | str, aliases: dict[str, list[str]] | None) -> Sample:
    """One 2Wiki record -> Sample, with ``answer_aliases`` from the id_aliases.json table."""
    if isinstance(rec, dict) and "answer" not in rec:
        raise DatasetFormatError(
            path,
            f"record {where}, _id={rec.get('_id', '?')}"
            if isinstance(where, int)
            else f"{where}, _id={rec.get('_id', '?')}",
            "no 'answer': the official 2WikiMultihopQA test split is unlabelled (its authors score "
            "test predictions on request); train and evaluate on train/dev",
        )
    sample = hotpot_record_to_sample(rec, path, where)
    names = (aliases or {}).get(str(rec.get("answer_id")), [])
    if names:
        sample["answer_aliases"] = sorted(set(names) - {sample["answer"]})
    return sample


def load_hotpotqa(data_path: str | Path, split: str, fullwiki_gold: str = "official") -> list[Sample]:
    """All samples of a HotpotQA split in file order: the official files, or the shipped real
    subset's ``subset_{train,validation,test}.jsonl`` (original and IRCoT layouts; envs/data/ircot.py)."""
    subset = subset_files(
        data_path, split, HOTPOTQA_FILES, "HotpotQA subset JSONL (original or IRCoT layout)", HOTPOTQA_HOW
    )
    if subset is not None:
        return load_subset(subset, hotpot_record_to_sample, " ")
    return load_hotpot_format(hotpotqa_files(data_path, split), fullwiki_gold)


def read_id_aliases(data_path: str | Path) -> dict[str, list[str]] | None:
    """``Q_id`` -> aliases + demonyms from ``<data_path>/id_aliases.json`` (or ``.gz``); None when
    the file is absent."""
    path = Path(data_path) / "id_aliases.json"
    if not path.is_file() and not path.with_name(path.name + ".gz").is_file():
        return None
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
    """All samples of a 2Wiki split in file order, with ``answer_aliases`` from id_aliases.json
    (without that file a warning says that answers are scored against the answer alone)."""
    aliases = read_id_aliases(data_path)
    if aliases is None:
        log.warning(
            "2WikiMultihopQA: no id_aliases.json in %s, so answers are scored without their aliases and "
            "demonyms (EM/F1 can be lower than the official v1.1 evaluation's). Get the answer_id version "
            "of the dataset (python scripts/get_data.py 2wikimultihopqa) and keep id_aliases.json there",
            data_path,
        )
    official = {s: [f"{s}.json"] for s in TWOWIKI_SPLITS}
    subset = subset_files(data_path, split, official, "2WikiMultihopQA subset JSONL", TWOWIKI_HOW, TWOWIKI_SUBSET_FILES)
    if subset is not None:
        return load_subset(subset, lambda rec, path, where: twowiki_record_to_sample(rec, path, where, aliases), " ")
    return [
        twowiki_record_to_sample(rec, path, i, aliases)
        for path in twowiki_files(data_path, split)
        for i, rec in enumerate(read_json_array(path))
    ]


class HotpotQASpec(SubsetSpec):
    """The fullwiki scoring rule is part of an evaluation file's settings: the project's earlier
    rule writes ``eval_seed<seed>_in_context.jsonl``, never mixed with official scores."""

    added_keys = {"fullwiki_gold": "official"}  # runs saved before the switch: fullwiki is eval-only

    def eval_suffix(self, envs: Any) -> str:
        return "_in_context" if envs.fullwiki_gold == "in_context" else ""

    def config_errors(self, envs: Any) -> list[str]:
        value = envs.get("fullwiki_gold")
        if value in FULLWIKI_GOLD:
            return []
        return [f"envs.fullwiki_gold={value}: expected one of {', '.join(FULLWIKI_GOLD)}"]


@register("hotpotqa", HotpotQASpec())
def build_hotpotqa(envs_cfg: Any, split: str, seed: int) -> ListDataset:
    """Reads ``data_path``, ``test_split`` (its configs/envs yaml: ``eval``), ``fullwiki_gold``, ``length``."""
    split = resolve_split(envs_cfg, split)
    samples = load_hotpotqa(cfg_get(envs_cfg, "data_path"), split, str(cfg_get(envs_cfg, "fullwiki_gold")))
    return ListDataset(
        order_and_cap(samples, seed, split_length(envs_cfg, split), "hotpotqa", split), f"hotpotqa/{split}"
    )


@register("2WikiMultihopQA", SubsetSpec())
def build_2wiki(envs_cfg: Any, split: str, seed: int) -> ListDataset:
    """Reads ``data_path``, ``test_split`` (``dev``: no envs yaml of its own, so the node must name it), ``length``."""
    split = resolve_split(envs_cfg, split)
    samples = load_2wiki(cfg_get(envs_cfg, "data_path"), split)
    return ListDataset(
        order_and_cap(samples, seed, split_length(envs_cfg, split), "2WikiMultihopQA", split),
        f"2WikiMultihopQA/{split}",
    )
