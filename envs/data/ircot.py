"""The IRCoT layout of multi-hop records (docs/DATA_OTHER.md), read by the HotpotQA and MuSiQue
loaders beside their original layouts, and the shipped real subsets' file names.

IRCoT (Trivedi et al., 2023) processed HotpotQA, MuSiQue and 2Wiki into one layout: ``question_id``,
``question_text``, ``answers_objects`` (DROP-style ``{number, date: {day, month, year}, spans}``)
and ``contexts`` (``{title, paragraph_text, is_supporting}``). Its gold is paragraph-level:
``sf_idx`` = the ascending positions of the contexts with ``is_supporting`` true; the sentence ids
of HotpotQA's ``supporting_facts`` and MuSiQue's decomposition order are lost. The project's fact
metrics are paragraph-level for every layout (one chunk per paragraph), so they mean the same
here; only the order of MuSiQue's gold (reasoning order in the original layout) differs.

Answer: the first text of the first answer object (a span, else the number, else the date
written ``day month year`` from its non-empty parts); every other text becomes an alias.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from envs.data.common import checked, iter_jsonl, need, require_file
from envs.data.registry import DatasetSpec
from envs.errors import DatasetFormatError
from envs.types import Sample

# The shipped real subsets (data/hotpotqa, data/musique, data/2wikimultihopqa:
# scripts/build_real_multihop.py): one JSON record per line, in the dataset's layout or IRCoT's,
# split into training, validation and test questions.
SUBSET_FILES = {
    "train": ["subset_train.jsonl"],
    "validation": ["subset_validation.jsonl"],
    "eval": ["subset_test.jsonl"],
    "all": ["subset_test.jsonl", "subset_validation.jsonl", "subset_train.jsonl"],  # eval first, as the official files
}


def is_ircot(rec: Any) -> bool:
    return isinstance(rec, dict) and "question_text" in rec and "contexts" in rec


def _answer_texts(objects: list[Any], path: Path, where: str) -> list[str]:
    texts: list[str] = []
    for k, obj in enumerate(objects):
        owhere = f"{where}, answers_objects[{k}]"
        spans = need(obj, "spans", list, path, owhere)
        if not all(isinstance(s, str) for s in spans):
            raise DatasetFormatError(path, owhere, "field 'spans' must be a list of strings")
        texts.extend(s for s in spans if s)
        number = obj.get("number", "")
        if number not in ("", None):
            texts.append(str(number))
        date = obj.get("date") or {}
        if not isinstance(date, dict):
            raise DatasetFormatError(path, owhere, "field 'date' must be an object {day, month, year}")
        parts = [str(date.get(p, "")) for p in ("day", "month", "year") if date.get(p, "") not in ("", None)]
        if parts:
            texts.append(" ".join(parts))
    return list(dict.fromkeys(texts))


def ircot_record_to_sample(rec: dict[str, Any], path: Path, where: str, joiner: str) -> Sample:
    """One IRCoT-layout record -> Sample; chunk = ``title + joiner + paragraph_text`` (the
    original layout's chunk text: HotpotQA ``" "``, MuSiQue ``". "``)."""
    where = f"{where}, question_id={rec.get('question_id', '?')}"
    sid = need(rec, "question_id", (str, int), path, where)
    question = need(rec, "question_text", str, path, where)
    answers = _answer_texts(need(rec, "answers_objects", list, path, where), path, where)
    if not answers:
        raise DatasetFormatError(path, where, "no answer: 'answers_objects' holds no span, number or date")
    contexts = need(rec, "contexts", list, path, where)
    chunks: list[str] = []
    sf_idx: list[int] = []
    for j, para in enumerate(contexts):
        pwhere = f"{where}, contexts[{j}]"
        title = need(para, "title", str, path, pwhere)
        text = need(para, "paragraph_text", str, path, pwhere)
        if need(para, "is_supporting", bool, path, pwhere):
            sf_idx.append(j)
        chunks.append(title + joiner + text)
    sample: dict[str, Any] = {
        "id": sid,
        "question": question,
        "answer": answers[0],
        "answer_aliases": answers[1:],
        "chunks": chunks,
        "sf_idx": sf_idx,
    }
    if not sf_idx:  # as the original layouts: a record naming no gold has unknown gold
        sample["sf_known"] = False
    return checked(sample, path, where)


def load_subset(
    files: Sequence[Path], original: Callable[[dict[str, Any], Path, str], Sample], joiner: str
) -> list[Sample]:
    """Samples of JSONL files whose lines are IRCoT-layout records or ``original``-layout ones."""
    out: list[Sample] = []
    for path in files:
        for lineno, rec in iter_jsonl(path):
            where = f"line {lineno}"
            out.append(
                ircot_record_to_sample(rec, path, where, joiner) if is_ircot(rec) else original(rec, path, where)
            )
    return out


def present(folder: Path, name: str) -> bool:
    return (folder / name).is_file() or (folder / f"{name}.gz").is_file()


def subset_files(
    data_path: str | Path,
    split: str,
    official: dict[str, list[str]],
    what: str,
    how: str,
    subset: dict[str, list[str]] = SUBSET_FILES,
) -> list[Path] | None:
    """The shipped subset's files for ``split`` (``subset``: split -> file names) when ``data_path``
    holds them and not the official files (None: use the official ones); a folder holding both is
    refused, as it is ambiguous."""
    folder = Path(data_path)
    names = subset.get(split)
    if not names or not any(present(folder, n) for n in names):
        return None
    clash = [n for n in official.get(split, []) if present(folder, n)]
    if clash:
        raise DatasetFormatError(
            folder / names[0],
            None,
            f"{folder} holds both the official {clash[0]} and the subset's {names[0]}: keep one layout per folder",
        )
    return [require_file(folder / n, what, how) for n in names]


class SubsetSpec(DatasetSpec):
    """A dataset whose shipped subset has a validation file of its own: model selection reads it
    (nothing is carved from the training questions, envs/data/registry.py); a folder of the official
    files has none, and the registry carves validation from train as for every other dataset."""

    path_keys: tuple[str, ...] = ("data_path",)

    def fixed_validation(self, envs: Any) -> bool:
        paths = [envs.get(k) for k in self.path_keys if envs.get(k)]
        return bool(paths) and all(present(Path(str(p)), SUBSET_FILES["validation"][0]) for p in paths)
