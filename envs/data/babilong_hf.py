"""Official BabiLong evaluation sets (DESIGN §7.4), answer-only.

Published as Hugging Face datasets: one configuration per context length (``1k`` … ``10M``),
one split per task (``qa1`` …), fields ``input`` (whole haystack), ``question``, ``target``.
Accepted layouts under ``data_path`` (first match wins):

1. ``{data_path}/{context_length}/{task}.jsonl`` or ``.parquet``;
2. ``{data_path}/{context_length}`` written with ``save_to_disk`` (a DatasetDict with a split
   per task, or a single Dataset);
3. ``{data_path}`` itself a ``save_to_disk`` DatasetDict with a split per task.

chunks = sentences of ``input`` (envs/data/splitter.py); answer = target; sf_idx = [],
sf_known = False; id = ``{context_length}/{task}/{row}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envs.data.common import ListDataset, cfg_get, checked, iter_jsonl, order_and_cap
from envs.data.registry import DatasetSpec, register
from envs.data.splitter import split_sentences
from envs.errors import DatasetFormatError, DatasetNotFoundError
from envs.types import Sample

BABILONG_HF_HOW = (
    "download the BabiLong evaluation sets (Hugging Face 'RMT-team/babilong' or 'RMT-team/babilong-1k-samples'), "
    "then save_to_disk per length or export {length}/{task}.jsonl"
)


def short_task(task: str) -> str:
    """``qa2_two-supporting-facts`` -> ``qa2``."""
    return str(task).split("_", 1)[0]


def _rows(data_path: Path, context_length: str, task: str) -> tuple[Path, list[dict[str, Any]]]:
    base = data_path / context_length
    jsonl = base / f"{task}.jsonl"
    if jsonl.is_file():
        return jsonl, [rec for _, rec in iter_jsonl(jsonl)]
    parquet = base / f"{task}.parquet"
    if parquet.is_file():
        import pandas as pd

        return parquet, pd.read_parquet(parquet).to_dict("records")
    for folder in (base, data_path):
        if (folder / "dataset_dict.json").is_file() or (folder / "dataset_info.json").is_file():
            import datasets

            ds = datasets.load_from_disk(str(folder))
            if isinstance(ds, datasets.DatasetDict):
                if task not in ds:
                    if folder == data_path:
                        continue
                    raise DatasetFormatError(folder, None, f"no split {task!r} (has {sorted(ds)})")
                ds = ds[task]
            elif folder == data_path:
                continue
            return folder, [dict(r) for r in ds]
    raise DatasetNotFoundError(
        jsonl,
        "BabiLong HF set: {length}/{task}.jsonl|.parquet or a save_to_disk folder (input, question, target)",
        BABILONG_HF_HOW,
    )


def load_babilong_hf(data_path: str | Path, context_length: str, task: str) -> list[Sample]:
    task = short_task(task)
    path, rows = _rows(Path(data_path), str(context_length), task)
    out: list[Sample] = []
    for row_i, rec in enumerate(rows):
        where = f"row {row_i}"
        for field in ("input", "question", "target"):
            if not isinstance(rec.get(field), str):
                raise DatasetFormatError(path, where, f"missing or non-string field {field!r}")
        sample = {
            "id": f"{context_length}/{task}/{row_i}",
            "question": rec["question"],
            "answer": rec["target"],
            "chunks": split_sentences(rec["input"]),
            "sf_idx": [],
            "sf_known": False,
        }
        out.append(checked(sample, path, where))
    return out


class BabiLongHFSpec(DatasetSpec):
    """Official sets: one file per context length; a model trained on a bAbI task keeps it."""

    family = "babilong"

    def eval_suffix(self, envs: Any) -> str:
        return f"_hf{envs.context_length}"

    def eval_meta(self, envs: Any) -> dict[str, Any]:
        return {**super().eval_meta(envs), "context_length": envs.context_length}


@register("babilong_hf", BabiLongHFSpec())
def build_babilong_hf(envs_cfg: Any, split: str, seed: int) -> ListDataset:
    """Reads ``data_path``, ``context_length`` (``4k`` …), ``task`` (short key or full bAbI name)
    and ``length``. Answer-only: there is no training split."""
    if split == "train":
        raise ValueError(
            "babilong_hf is an answer-only evaluation set: it has no 'train' split (train on envs=babilong)"
        )
    task = short_task(cfg_get(envs_cfg, "task"))
    ctx = str(cfg_get(envs_cfg, "context_length"))
    samples = load_babilong_hf(cfg_get(envs_cfg, "data_path"), ctx, task)
    return ListDataset(
        order_and_cap(samples, seed, cfg_get(envs_cfg, "length"), "babilong_hf", ctx, task), f"babilong_hf/{ctx}/{task}"
    )
