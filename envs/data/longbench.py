"""LongBench (THUDM/LongBench v1) loader: one subset's official JSONL as answer-only samples.

Each line of ``<data_path>/<task>.jsonl`` (LongBench-E: ``<task>_e.jsonl``) holds ``input`` (the
question; empty for summaries, counting and code completion), ``context`` (the long document),
``answers`` (list), ``all_classes`` (class names or null), ``length`` (words; characters for
Chinese), ``dataset`` and ``_id``. A sample is:

* ``question`` = ``input``, or the subset's fixed retrieval query when ``input`` is empty
  (prompts_and_metrics/longbench.py, ``Subset.query``);
* ``answer`` = ``answers[0]``, ``answer_aliases`` = the other answers (LongBench scores the maximum
  over all of them);
* ``chunks``: the context cut into pieces of at most ``chunk_words`` words (a CJK character counts
  as one word), ending at line or sentence ends where possible, never spanning two numbered
  documents (``Passage n:`` / ``Paragraph n:`` / ``段落n``); the text inside a chunk is kept as it
  is (newlines included, so code stays code);
* ``sf_idx`` = [] and ``sf_known`` = False: LongBench does not say where the answer lies;
* ``source`` = ``longbench/<dataset>``, and ``longbench`` = {dataset, all_classes, length, input},
  which the retriever log carries to ``eval_llm_longbench.py``.

There is no training split: LongBench is an evaluation set (``eval_env=longbench``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from envs.data.common import ListDataset, cfg_get, checked, iter_jsonl, need, order_and_cap, require_file, resolve_split
from envs.data.registry import DatasetSpec, register
from envs.errors import DatasetFormatError
from envs.types import Sample
from prompts_and_metrics.longbench import SUBSETS

LONGBENCH_HOW = (
    "download LongBench's data.zip (https://huggingface.co/datasets/THUDM/LongBench/resolve/main/data.zip) and "
    "unpack its data/*.jsonl into envs.data_path; or save each subset of the hub dataset THUDM/LongBench as JSONL"
)

# a numbered document starts a new chunk
_DOC_START = re.compile(r"(?m)^(?=(?:Passage|Paragraph) \d+:|段落\d+[:：])")
# a unit ends after a run of newlines, after sentence punctuation + spaces, or after CJK sentence punctuation
_UNIT_END = re.compile(r"\n+|(?<=[.!?;])[ \t]+|(?<=[。？！；])")
# a "word": one CJK character, or a run of other non-space characters
_WORD = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]|[^\s\u3400-\u9fff\uf900-\ufaff]+")


def _spans(text: str, start: int, end: int, pattern: re.Pattern[str]) -> list[tuple[int, int]]:
    """[start, end) cut after each match of ``pattern`` (the separator stays with the piece before)."""
    out, pos = [], start
    for m in pattern.finditer(text, start, end):
        if m.end() > pos:
            out.append((pos, m.end()))
            pos = m.end()
    if pos < end:
        out.append((pos, end))
    return out


def chunk_text(text: str, max_words: int) -> list[str]:
    """Cut ``text`` into stripped, non-empty chunks of at most ``max_words`` words (see the module
    docstring); a single sentence longer than that is cut between words."""
    if max_words < 1:
        raise ValueError(f"chunk_words must be >= 1, got {max_words}")
    chunks: list[str] = []

    def flush(a: int, b: int) -> None:
        piece = text[a:b].strip()
        if piece:
            chunks.append(piece)

    starts = [m.start() for m in _DOC_START.finditer(text)]
    bounds = sorted({0, *starts, len(text)})
    for d0, d1 in zip(bounds, bounds[1:]):
        cur_start, cur_end, cur_words = d0, d0, 0
        for u0, u1 in _spans(text, d0, d1, _UNIT_END):
            words = [m.span() for m in _WORD.finditer(text, u0, u1)]
            if len(words) > max_words:  # an overlong sentence: alone, cut every max_words words
                flush(cur_start, cur_end)
                for k in range(0, len(words), max_words):
                    piece_end = words[min(k + max_words, len(words)) - 1][1]
                    flush(words[k][0], piece_end if k + max_words < len(words) else u1)
                cur_start, cur_end, cur_words = u1, u1, 0
            elif cur_words + len(words) > max_words:
                flush(cur_start, cur_end)
                cur_start, cur_end, cur_words = u0, u1, len(words)
            else:
                cur_end, cur_words = u1, cur_words + len(words)
        flush(cur_start, cur_end)
    return chunks


def longbench_record_to_sample(rec: Any, path: Path, lineno: int, task: str, chunk_words: int) -> Sample:
    where = f"line {lineno}, _id={rec.get('_id', '?')}" if isinstance(rec, dict) else f"line {lineno}"
    sid = need(rec, "_id", (str, int), path, where)
    text_in = need(rec, "input", str, path, where)
    context = need(rec, "context", str, path, where)
    answers = need(rec, "answers", list, path, where)
    length = need(rec, "length", int, path, where)
    dataset = need(rec, "dataset", str, path, where)
    classes = rec.get("all_classes")
    if not answers or not all(isinstance(a, str) for a in answers):
        raise DatasetFormatError(path, where, "field 'answers' must be a non-empty list of strings")
    if classes is not None and not (isinstance(classes, list) and all(isinstance(c, str) for c in classes)):
        raise DatasetFormatError(path, where, "field 'all_classes' must be null or a list of strings")
    if dataset.removesuffix("_e") != task:
        raise DatasetFormatError(path, where, f"record of subset {dataset!r} in the file of subset {task!r}")
    sub = SUBSETS[task]
    if sub.metric == "classification" and not classes:
        raise DatasetFormatError(path, where, f"subset {task} is scored by class names but 'all_classes' is empty")
    chunks = chunk_text(context, chunk_words)
    if not chunks:
        raise DatasetFormatError(path, where, "field 'context' is empty")
    question = text_in.strip() or sub.query
    if not question:
        raise DatasetFormatError(path, where, f"field 'input' is empty and subset {task} has no fixed query")
    sample: dict[str, Any] = {
        "id": sid,
        "question": question,
        "answer": answers[0],
        "answer_aliases": list(answers[1:]),
        "chunks": chunks,
        "sf_idx": [],
        "sf_known": False,
        "source": f"longbench/{task}",
        "longbench": {"dataset": task, "all_classes": classes, "length": length, "input": text_in},
    }
    return checked(sample, path, where)


def longbench_file(data_path: str | Path, task: str, longbench_e: bool) -> Path:
    if task not in SUBSETS:
        raise ValueError(f"unknown LongBench subset {task!r} (envs.task); known: {', '.join(SUBSETS)}")
    name = f"{task}_e.jsonl" if longbench_e else f"{task}.jsonl"
    what = "LongBench JSONL (input, context, answers, all_classes, length, dataset, _id per line)"
    return require_file(Path(data_path) / name, what, LONGBENCH_HOW)


def load_longbench(data_path: str | Path, task: str, longbench_e: bool, chunk_words: int) -> list[Sample]:
    """All samples of one subset file, in file order."""
    path = longbench_file(data_path, task, longbench_e)
    return [longbench_record_to_sample(rec, path, lineno, task, chunk_words) for lineno, rec in iter_jsonl(path)]


class LongBenchSpec(DatasetSpec):
    """One file per subset (``task``), in LongBench or LongBench-E."""

    def eval_suffix(self, envs: Any) -> str:
        return f"_lb-{envs.task}" + ("_e" if envs.longbench_e else "")


@register("longbench", LongBenchSpec())
def build_longbench(envs_cfg: Any, split: str, seed: int) -> ListDataset:
    """Reads ``task`` (the subset), ``data_path``, ``longbench_e``, ``chunk_words``, ``length``."""
    split = resolve_split(envs_cfg, split)
    if split != "test":
        raise ValueError(
            f"LongBench has only a test split (asked for {split!r}): train on another set and "
            "evaluate with eval_env=longbench"
        )
    task = str(cfg_get(envs_cfg, "task"))
    chunk_words = cfg_get(envs_cfg, "chunk_words")
    if chunk_words is None:
        raise ValueError("envs.chunk_words is not set (configs/envs/longbench.yaml sets it)")
    samples = load_longbench(
        cfg_get(envs_cfg, "data_path"), task, bool(cfg_get(envs_cfg, "longbench_e")), int(chunk_words)
    )
    capped = order_and_cap(samples, seed, cfg_get(envs_cfg, "length"), "longbench", task)
    return ListDataset(capped, f"longbench/{task}")
