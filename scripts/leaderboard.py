#!/usr/bin/env python
"""Evaluation outputs written in benchmarks' official prediction layouts, one subcommand per layout:

    python scripts/leaderboard.py babilong <reader output>.jsonl ... --model <org>/<name> --out <folder>
        [--filter none] [--scorer <booydar/babilong checkout>] [--dataset-revision <commit>]
    python scripts/leaderboard.py hotpotqa|musique <retriever log .jsonl[.gz]> [--reader <reader .jsonl>]
        [--data <raw dataset file>] [--out <folder>] [--check]

``babilong``: an evaluation round's reader answers on the official BABILong test sets as BABILong's
leaderboard prediction files (docs/RETRIEVER_TOOL.md, "Leaderboard formats"). ``hotpotqa`` /
``musique``: a retriever log (and its reader's answers) in HotpotQA's / MuSiQue's official
prediction layout, scored by ports of their official scorers beside the project's own numbers
(docs/SCORING.md, "Official prediction files"). ``leaderboard.py <subcommand> --help`` says more.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import re
import statistics
import string
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from statistics import mean
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from envs.data.common import iter_jsonl, need, open_text, read_json_array  # noqa: E402
from envs.data.hotpotqa import HOTPOTQA_FILES, HOTPOTQA_HOW  # noqa: E402
from envs.data.ircot import is_ircot, subset_files  # noqa: E402
from envs.data.musique import MUSIQUE_FILES, MUSIQUE_HOW  # noqa: E402
from envs.errors import DatasetFormatError, DatasetNotFoundError  # noqa: E402
from prompts_and_metrics.metrics import babilong_acc, task_key  # noqa: E402
from prompts_and_metrics.prompts import SYSTEM_BABILONG, TASK_PROMPTS  # noqa: E402
from prompts_and_metrics.reader_io import LogFormatError, read_jsonl  # noqa: E402
from runstore import StorageError, atomic_write_text, jsonl_input  # noqa: E402

# Two readers of JSONL: read_jsonl (reader_io) takes eval_llm_openqa.py's lines by their fields, as the
# reader scripts do; jsonl_input.read_jsonl numbers the lines, so that a leaderboard error names one.

BABILONG_HELP = """An evaluation round's reader answers on the official BABILong test sets, in the layout of
BABILong's leaderboard predictions.

    python scripts/leaderboard.py babilong <reader output>.jsonl ... --model <org>/<name> --out <folder>
        [--filter none]

The inputs are eval_llm_synthetics.py's output files (``<llm>_eval_seed<S>_<split>.jsonl``,
docs/READERS.md) made from retriever logs of the official sets (envs/data/babilong_hf.py: every
record's id is ``<length>/<task>/<row>``, the row of the official file). BABILong's repository
(github.com/booydar/babilong, folder ``babilong_evals/<org>/<model>/``, read by its
``babilong/collect_results.py``) keeps one file per task and length:
``<task>_<length>_<prompt config>.csv`` with an unnamed row index and the columns ``target``,
``output``, ``question``, which its ``compare_answers`` scores row by row, and beside it a ``.json``
with the prompt and generation settings. Written here: ``<out>/<org>/<model>/`` with the row index
= the official row, ``target`` = the record's answer, ``output`` = the reader's answer with any
reasoning block removed (``prediction``, what the reader scored), ``question`` = the question; the
prompt config names what this project's reader sends (instruction, examples and answer-format
line, in a chat template); the ``.json`` holds its prompt pieces, the reader settings and the
chunk filter. Only lines of one chunk filter are written (``--filter``, default ``none``: the
retrieved chunks as retrieved). Only tasks qa1-qa10 and the leaderboard's lengths are accepted,
and a row written twice, rows of one file made with different reader settings, a line without the
reader's settings or answer, or a reader asked another task than the records' are refused (one
``error:`` line, exit status 2) before any file is written. A half-written last line (a reader
killed mid-line) is skipped with a warning (runstore/jsonl_input.py).
"""

OFFICIAL_HELP = """A retriever log (and optionally its reader output) written in the official prediction layouts of
HotpotQA and MuSiQue, scored by ports of their official scorers beside the project's own numbers
(docs/SCORING.md, "Official prediction files").

    python scripts/leaderboard.py hotpotqa|musique <retriever log .jsonl[.gz]> [--reader <reader .jsonl>]
        [--data <raw dataset file>] [--out <folder>] [--check]

HotpotQA (hotpot_evaluate_v1.py): ``hotpot_pred.json`` = {"answer": {_id: text}, "sp": {_id: [[title,
sent_id], ...]}} with every sentence of each retrieved paragraph as a supporting fact, and
``hotpot_gold.json``, the logged questions' original records as a JSON array, so that
``python hotpot_evaluate_v1.py hotpot_pred.json hotpot_gold.json`` runs. MuSiQue (evaluate_v1.0.py):
``musique_pred.jsonl``, one line per question {id, predicted_answer, predicted_support_idxs (the
retrieved paragraphs' ``idx``), predicted_answerable (always true: the retriever does not judge
answerability)}, and ``musique_gold.jsonl`` in the same order, as the official script requires.
Without ``--reader`` every answer is "" (the answer metrics are then not reported).

``official_scores.json`` holds the ports' metrics, the project's (the log's paragraph-level fact
metrics, the reader's EM/F1) and how many records agree; ``--check`` exits 1 when one disagrees.
The raw records come from the log's ``.meta.json`` (data_path and split) unless ``--data`` names the
file; each retrieved paragraph's text is checked against the log's, so another file is refused.
"""


# == BABILong: the leaderboard's prediction files ==================================================
# the leaderboard's tasks and context lengths (babilong/collect_results.py: TASKS, LENGTHS)
TASKS = [f"qa{i}" for i in range(1, 11)]
LENGTHS = ["0k", "1k", "2k", "4k", "8k", "16k", "32k", "64k", "128k", "256k", "512k", "1M", "2M", "10M"]
# the yes/no settings the leaderboard's file names carry (its parse_run_cfg), as this project's
# reader prompts (prompts_and_metrics/prompts.py: babilong_messages)
PROMPT_CONFIG = "instruction_yes_examples_yes_post_prompt_yes_chat_template_yes"
# babilong_user_message's layout, with the leaderboard's placeholder names
TEMPLATE = "{instruction}\n{examples}\n{post_prompt}\nContext: {context}\n\nQuestion: {question}"
OFFICIAL_ID = re.compile(r"(\d+[kKmM])/(qa\d+)/(\d+)")
MODEL = re.compile(r"(?!\.\.?/)[\w.-]+/(?!\.\.?$)[\w.-]+", re.ASCII)
SCORER_REPO, SCORER_FILE = "booydar/babilong", "babilong/metrics.py"  # the leaderboard's compare_answers
PORT_FILE = "prompts_and_metrics/metrics.py"  # this project's port of it, which scored the reader's answers
DATASET_REPO = "RMT-team/babilong"  # the Hugging Face dataset of the official test sets
# what an eval_llm_synthetics.py output line carries that the files written here need
LINE_KEYS = ("answer", "prediction", "question")
SETTING_KEYS = ("babi_task", "max_tokens")


class LeaderboardError(ValueError):
    """Input the leaderboard layout cannot hold: one line saying which and why."""


def length_label(raw: str) -> str:
    """``4k`` -> ``4k``, ``1m`` / ``1M`` -> ``1M``: the leaderboard's spelling."""
    label = raw[:-1] + ("k" if raw[-1] in "kK" else "M")
    if label not in LENGTHS:
        raise LeaderboardError(f"length {raw!r} is not one of the leaderboard's: {', '.join(LENGTHS)}")
    return label


def read_lines(paths: list[Path], chunk_filter: str) -> dict[tuple[str, str], dict[int, dict[str, Any]]]:
    """{(task, length): {row: output line}} of the lines with ``chunk_filter``."""
    cells: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for path in paths:
        for n, line in jsonl_input.read_jsonl(path):
            if line.get("filter") != chunk_filter:
                continue
            m = OFFICIAL_ID.fullmatch(str(line.get("id")))
            if m is None:
                raise LeaderboardError(
                    f"{path}:{n}: id {line.get('id')!r} is not <length>/<task>/<row>: the leaderboard compares "
                    "the official BABILong test sets (envs/data/babilong_hf.py), not generated haystacks"
                )
            length, task, row = length_label(m.group(1)), m.group(2), int(m.group(3))
            if task not in TASKS:
                raise LeaderboardError(f"{path}:{n}: task {task} is not on the leaderboard ({TASKS[0]}-{TASKS[-1]})")
            missing = [k for k in LINE_KEYS if k not in line]
            settings = line.get("reader_settings")
            if not isinstance(settings, dict) or not all(k in settings for k in SETTING_KEYS):
                missing.append(f"reader_settings with {', '.join(SETTING_KEYS)}")
            if missing:
                raise LeaderboardError(
                    f"{path}:{n}: the line lacks {'; '.join(missing)} (not an eval_llm_synthetics.py output line)"
                )
            rows = cells.setdefault((task, length), {})
            if row in rows:
                raise LeaderboardError(f"{path}:{n}: {task} {length} row {row} is written twice")
            rows[row] = line
    return cells


def settings_json(task: str, settings: dict[str, Any], chunk_filter: str) -> dict[str, Any]:
    p = TASK_PROMPTS[task]
    return {
        "prompt": {
            "instruction": p.instruction,
            "examples": p.examples_block(),
            "post_prompt": p.post_prompt,
            "template": TEMPLATE,
            "chat_template": True,
            "system_prompt": SYSTEM_BABILONG,
        },
        "generate_kwargs": {"max_new_tokens": settings["max_tokens"], "do_sample": False},
        "reader_settings": settings,
        "context": f"the chunks a Q-RAG retriever picked (chunk filter {chunk_filter!r}, docs/READERS.md)",
    }


def check_cells(cells: dict[tuple[str, str], dict[int, dict[str, Any]]]) -> None:
    """Refuse a cell the leaderboard cannot hold before any file is written."""
    for (task, length), rows in sorted(cells.items()):
        settings = {json.dumps(r["reader_settings"], sort_keys=True) for r in rows.values()}
        if len(settings) != 1:
            raise LeaderboardError(f"{task} {length}: lines made with different reader settings: {sorted(settings)}")
        asked = next(iter(rows.values()))["reader_settings"]["babi_task"]
        if task_key(str(asked)) != task:
            raise LeaderboardError(f"{task} {length}: the reader was asked {asked}")


def write_cells(cells: dict[tuple[str, str], dict[int, dict[str, Any]]], folder: Path, chunk_filter: str) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for (task, length), rows in sorted(cells.items()):
        stem = folder / f"{task}_{length}_{PROMPT_CONFIG}"
        table = io.StringIO()
        w = csv.writer(table, lineterminator="\n")  # as pandas' to_csv, which wrote the official files
        w.writerow(["", "target", "output", "question"])
        for row, line in sorted(rows.items()):
            w.writerow([row, line["answer"], line["prediction"], line["question"]])
        atomic_write_text(Path(f"{stem}.csv"), table.getvalue())
        settings = next(iter(rows.values()))["reader_settings"]
        text = json.dumps(settings_json(task, settings, chunk_filter), indent=4)
        atomic_write_text(Path(f"{stem}.json"), text + "\n")
        written.append(Path(f"{stem}.csv"))
    return written


def git_state(folder: Path, path: str) -> dict[str, Any]:
    """The sha256 of ``folder/path``, the commit checked out in ``folder`` and whether the file is
    that commit's own (tracked, unchanged); commit and unmodified are None outside a git checkout."""

    def git(*a: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(folder), *a], capture_output=True, text=True, timeout=30)

    try:
        data = (folder / path).read_bytes()
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return {"commit": None, "file": path, "sha256": hashlib.sha256(data).hexdigest(), "unmodified": None}
        tracked = git("ls-files", "--error-unmatch", path).returncode == 0
        unchanged = git("diff", "--quiet", "HEAD", "--", path).returncode == 0
    except (OSError, subprocess.SubprocessError) as e:
        raise LeaderboardError(f"cannot read {folder / path} and its commit ({e})") from None
    return {
        "commit": head.stdout.strip(),
        "file": path,
        "sha256": hashlib.sha256(data).hexdigest(),
        "unmodified": tracked and unchanged,
    }


def scorer_state(checkout: Path) -> dict[str, Any]:
    """The official scorer a submission names: a git checkout of booydar/babilong, refused otherwise."""
    state = git_state(checkout, SCORER_FILE)
    if state["commit"] is None:
        raise LeaderboardError(f"--scorer {checkout} is not a git checkout of {SCORER_REPO}: its commit is unknown")
    return {"repo": SCORER_REPO, **state}


def manifest(
    cells: dict[tuple[str, str], dict[int, dict[str, Any]]],
    written: list[Path],
    scorer: dict[str, Any] | None,
    revision: str | None,
) -> dict[str, Any]:
    """What a submission states beside its files: the official scorer (its commit, the sha256 of
    its metrics.py and whether that is the commit's own), the dataset revision, each file's sha256
    and rows, and the accuracy this project's port of the scorer gives them."""
    files = []
    for path in written:
        task = path.stem.split("_")[0]
        rows = cells[(task, path.stem.split("_")[1])].values()
        acc = statistics.fmean(babilong_acc(r["prediction"], r["answer"], r["question"], task) for r in rows)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        files.append({"file": path.name, "sha256": digest, "rows": len(rows), "accuracy": acc})
    return {
        "scorer": scorer,
        "port": {"repo": "q-rag", **git_state(ROOT, PORT_FILE)},
        "dataset": {"repo": DATASET_REPO, "revision": revision},
        "files": files,
    }


def babilong_main(args: argparse.Namespace, ap: argparse.ArgumentParser) -> int:
    if MODEL.fullmatch(args.model) is None:  # two plain names: nothing written outside --out
        ap.error(f"--model {args.model!r}: give <org>/<name> (letters, digits, '.', '_', '-')")
    if args.dataset_revision is not None and re.fullmatch(r"[0-9a-f]{40}", args.dataset_revision) is None:
        ap.error(f"--dataset-revision {args.dataset_revision!r}: give the dataset's commit, 40 hex digits")
    try:
        cells = read_lines(args.outputs, args.filter)
        if not cells:
            raise LeaderboardError(f"no lines with chunk filter {args.filter!r} in {', '.join(map(str, args.outputs))}")
        check_cells(cells)
        scorer = scorer_state(args.scorer) if args.scorer is not None else None  # before anything is written
        written = write_cells(cells, args.out / args.model, args.filter)
        record = manifest(cells, written, scorer, args.dataset_revision)
        atomic_write_text(args.out / args.model / "manifest.json", json.dumps(record, indent=1) + "\n")
    except (jsonl_input.InputError, LeaderboardError, StorageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # --out under a file, a folder that cannot be made
        print(f"error: cannot write under --out {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path} ({len(cells[tuple(path.stem.split('_')[:2])])} rows)")
    print(f"wrote {args.out / args.model / 'manifest.json'}")
    for missing, flag in ((args.scorer, "--scorer"), (args.dataset_revision, "--dataset-revision")):
        if missing is None:
            print(f"warning: the manifest names no {flag[2:].replace('-', ' ')} (give {flag})", file=sys.stderr)
    return 0


# == HotpotQA and MuSiQue: the official scorers' prediction files ==================================
DATASETS = ("hotpotqa", "musique")
TOL = 1e-9


# -- ports of the official scorers (hotpotqa/hotpot hotpot_evaluate_v1.py; StonyBrookNLP/musique
# evaluate_v1.0.py with metrics/answer.py and metrics/support.py), written from their logic -------
def normalize_answer(s: str) -> str:
    """Lower case, punctuation dropped, articles a/an/the dropped, whitespace collapsed (both)."""
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())


def hotpot_answer(pred: str, gold: str) -> tuple[float, float, float, float]:
    """(em, f1, precision, recall): token F1, 0 when either side normalises to yes / no / noanswer
    and the two differ, 0 without overlap (two empty sides included)."""
    p, g = normalize_answer(pred), normalize_answer(gold)
    em = float(p == g)
    if (p in ("yes", "no", "noanswer") or g in ("yes", "no", "noanswer")) and p != g:
        return em, 0.0, 0.0, 0.0
    p_toks, g_toks = p.split(), g.split()
    same = sum((Counter(p_toks) & Counter(g_toks)).values())
    if same == 0:
        return em, 0.0, 0.0, 0.0
    prec, rec = same / len(p_toks), same / len(g_toks)
    return em, 2 * prec * rec / (prec + rec), prec, rec


def set_scores(pred: Iterable[Any], gold: Iterable[Any]) -> tuple[float, float, float, float]:
    """HotpotQA's update_sp (MuSiQue's SupportMetric repeats it): (em, f1, precision, recall) of
    the sets; em only for the exact set. Empty sets give precision and recall 0."""
    p, g = set(pred), set(gold)
    tp, fp, fn = len(p & g), len(p - g), len(g - p)
    prec = tp / (tp + fp) if tp + fp else 0.0
    rec = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    return float(fp + fn == 0), f1, prec, rec


def hotpot_evaluate(prediction: dict[str, Any], gold: Sequence[dict[str, Any]]) -> dict[str, float]:
    """hotpot_evaluate_v1.eval's metrics: sums over the gold records divided by their number; a
    record missing from ``answer`` or ``sp`` adds nothing there and no joint metrics."""
    keys = ("em", "f1", "prec", "recall")
    m = {f"{pre}{k}": 0.0 for pre in ("", "sp_", "joint_") for k in keys}
    for dp in gold:
        rid, ans, sp = dp["_id"], None, None
        if rid in prediction["answer"]:
            ans = hotpot_answer(prediction["answer"][rid], dp["answer"])
            for k, v in zip(keys, ans):
                m[k] += v
        if rid in prediction["sp"]:
            sp = set_scores(map(tuple, prediction["sp"][rid]), map(tuple, dp["supporting_facts"]))
            for k, v in zip(keys, sp):
                m[f"sp_{k}"] += v
        if ans is not None and sp is not None:
            prec, rec = ans[2] * sp[2], ans[3] * sp[3]
            m["joint_em"] += ans[0] * sp[0]
            m["joint_f1"] += 2 * prec * rec / (prec + rec) if prec + rec > 0 else 0.0
            m["joint_prec"] += prec
            m["joint_recall"] += rec
    return {k: v / len(gold) for k, v in m.items()}


def squad_f1(gold: str, pred: str) -> float:
    """MuSiQue's compute_f1 (SQuAD's): one side without tokens scores 1 iff both have none."""
    g, p = normalize_answer(gold).split(), normalize_answer(pred).split()
    if not g or not p:
        return float(g == p)
    same = sum((Counter(g) & Counter(p)).values())
    if same == 0:
        return 0.0
    prec, rec = same / len(p), same / len(g)
    return 2 * prec * rec / (prec + rec)


def musique_answer(pred: str, golds: Sequence[str]) -> tuple[float, float]:
    """AnswerMetric of one record: (em, f1), each the maximum over the answer and its aliases."""
    em = max(float(normalize_answer(g) == normalize_answer(pred)) for g in golds)
    return em, max(squad_f1(pred, g) for g in golds)


def musique_support(pred: Iterable[int], gold: Iterable[int]) -> tuple[float, float]:
    """SupportMetric of one record: (em, f1) of the index sets, both 1 when both are empty."""
    p, g = set(map(int, pred)), set(map(int, gold))
    if not p and not g:
        return 1.0, 1.0
    em, f1, _, _ = set_scores(p, g)
    return em, f1


def musique_evaluate(pred_lines: Sequence[dict[str, Any]], gold_lines: Sequence[dict[str, Any]]) -> dict[str, float]:
    """evaluate_v1.0's answer_f1, answer_em and support_f1 over the answerable records (unrounded:
    the official script rounds to 3 decimals); the lines must pair up by position and id."""
    if len(pred_lines) != len(gold_lines):
        raise ValueError("the prediction and gold files differ in their number of lines")
    ems, f1s, sups = [], [], []
    for g, p in zip(gold_lines, pred_lines):
        if g["id"] != p["id"]:
            raise ValueError("the prediction and gold lines must be in the same order (ids differ)")
        if not g["answerable"]:
            continue
        em, f1 = musique_answer(p["predicted_answer"], [g["answer"], *g["answer_aliases"]])
        ems.append(em)
        f1s.append(f1)
        gold_idx = [para["idx"] for para in g["paragraphs"] if para["is_supporting"]]
        sups.append(musique_support(p["predicted_support_idxs"], gold_idx)[1])
    n = len(ems)
    return {
        "answer_f1": sum(f1s) / n if n else 0.0,
        "answer_em": sum(ems) / n if n else 0.0,
        "support_f1": sum(sups) / n if n else 0.0,
    }


# -- the project's files ---------------------------------------------------------------------------
def read_log(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The retriever records (``.jsonl`` or ``.jsonl.gz``) and the settings of its ``.meta.json``."""
    if not path.is_file():
        raise FileNotFoundError(f"retriever log not found: {path} (an eval_retriever.py .jsonl or .jsonl.gz)")
    records = [rec for _, rec in iter_jsonl(path)]
    for k, rec in enumerate(records, 1):
        missing = [f for f in ("id", "pred_idx", "pred_texts", "sf_idx") if f not in rec]
        if missing:
            raise LogFormatError(f"{path}:{k}: record lacks field(s) {', '.join(missing)}")
    meta_path = path.with_name(path.name.removesuffix(".gz") + ".meta.json")
    meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
    return records, meta


def raw_files(dataset: str, meta: dict[str, Any], data: Path | None) -> list[Path]:
    """The raw dataset files the log was made from: ``--data``, else the meta's data_path and split."""
    if data is not None:
        return [data]
    if "data_path" not in meta or "split" not in meta:
        raise LogFormatError("the log has no .meta.json naming its data: pass the raw dataset file with --data")
    folder = Path(meta["data_path"])
    folder = folder if folder.is_absolute() or folder.exists() else ROOT / folder
    official, how = (HOTPOTQA_FILES, HOTPOTQA_HOW) if dataset == "hotpotqa" else (MUSIQUE_FILES, MUSIQUE_HOW)
    files = subset_files(folder, meta["split"], official, f"{dataset} records", how)
    if files is None:
        files = [folder / name for name in official.get(meta["split"], [])]
    return files


def read_raw(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """Records of JSON arrays (HotpotQA's official files) or JSONL files (the subsets, MuSiQue)."""
    out: list[dict[str, Any]] = []
    for p in paths:
        if not p.is_file() and p.with_name(p.name + ".gz").is_file():
            p = p.with_name(p.name + ".gz")
        if not p.is_file():
            raise DatasetNotFoundError(p, "the raw dataset file the retriever log was made from", "pass it with --data")
        with open_text(p) as f:
            array = f.read(1).lstrip() == "["
        out.extend(read_json_array(p) if array else [rec for _, rec in iter_jsonl(p)])
    return out


def chunk_text(dataset: str, para: Any) -> str:
    """The chunk the loaders make of a paragraph (envs/data/hotpotqa.py, musique.py)."""
    if dataset == "hotpotqa":
        return para[0] + " " + " ".join(para[1])
    return para["title"] + ". " + para["paragraph_text"]


def match_raw(dataset: str, records: Sequence[dict[str, Any]], raw: Sequence[dict[str, Any]], where: str):
    """The raw record of each log record, by id (MuSiQue-Full: an ``:unanswerable`` id names the
    unanswerable twin); its paragraphs must hold the texts the log retrieved."""
    if any(is_ircot(r) for r in raw):
        raise DatasetFormatError(
            where,
            None,
            "IRCoT-layout records hold no sentence ids or paragraph idx: official predictions need the original layout",
        )
    key = "_id" if dataset == "hotpotqa" else "id"
    by_id = {
        (str(need(r, key, (str, int), where, f"record {i}")), r.get("answerable", True)): r for i, r in enumerate(raw)
    }
    out = []
    for rec in records:
        rid = str(rec["id"])
        found = by_id.get((rid.removesuffix(":unanswerable"), not rid.endswith(":unanswerable")))
        if found is None:
            raise DatasetFormatError(where, None, f"no record with id {rid!r}: is this the data the log was made from?")
        paras = found["context"] if dataset == "hotpotqa" else found["paragraphs"]
        for j, text in zip(rec["pred_idx"], rec["pred_texts"]):
            if not 0 <= j < len(paras) or chunk_text(dataset, paras[j]) != text:
                raise DatasetFormatError(
                    where,
                    None,
                    f"id {rid!r}: paragraph {j} is not the text the log "
                    "retrieved: is this the data the log was made from?",
                )
        out.append(found)
    return out


def reader_answers(path: Path | None) -> dict[str, dict[str, Any]]:
    """The reader's output lines (eval_llm_openqa.py) by record id; {} without a reader."""
    if path is None:
        return {}
    return {str(line["id"]): line for line in read_jsonl(path, ("id", "prediction", "EM", "F1"))}


# -- writing and comparing -------------------------------------------------------------------------
def hotpot_files(records, raws, answers) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(prediction, gold) in hotpot_evaluate_v1.py's layouts."""
    pred: dict[str, Any] = {"answer": {}, "sp": {}}
    for rec, raw in zip(records, raws):
        rid = raw["_id"]
        pred["answer"][rid] = answers[str(rec["id"])]["prediction"] if answers else ""
        pred["sp"][rid] = [[raw["context"][j][0], i] for j in rec["pred_idx"] for i in range(len(raw["context"][j][1]))]
    return pred, list(raws)


def musique_files(records, raws, answers) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(prediction lines, gold lines) in evaluate_v1.0.py's layouts, in the log's order."""
    pred = [
        {
            "id": raw["id"],
            "predicted_answer": answers[str(rec["id"])]["prediction"] if answers else "",
            "predicted_support_idxs": [raw["paragraphs"][j]["idx"] for j in rec["pred_idx"]],
            "predicted_answerable": True,
        }
        for rec, raw in zip(records, raws)
    ]
    return pred, list(raws)


def close(a: float, b: float) -> bool:
    return abs(a - b) <= TOL


def fact_agreement(dataset: str, rec: dict[str, Any], raw: dict[str, Any]) -> tuple[bool, bool | None]:
    """Whether a record's fact precision / recall / F1 equal the port's (the project's are
    paragraph-level: HotpotQA's update_sp over the paragraphs' titles, MuSiQue's support F1 over
    paragraph idx), and its fact EM (None where the picks are not as many as the gold: the
    project's EM allows extra picks, the official needs the exact set)."""
    if dataset == "hotpotqa":
        titles = [raw["context"][j][0] for j in rec["pred_idx"]]
        em, f1, prec, recall = set_scores(titles, (f[0] for f in raw["supporting_facts"]))
        gold_n = len({f[0] for f in raw["supporting_facts"]})
        ok = close(f1, rec["f1"]) and close(prec, rec["precision"]) and close(recall, rec["recall"])
    else:
        gold_idx = [p["idx"] for p in raw["paragraphs"] if p["is_supporting"]]
        em, f1 = musique_support([raw["paragraphs"][j]["idx"] for j in rec["pred_idx"]], gold_idx)
        gold_n = len(set(gold_idx))
        ok = close(f1, rec["f1"])
    return ok, close(em, rec["em"]) if len(set(rec["pred_idx"])) == gold_n else None


def agreement(dataset: str, records, raws, answers) -> dict[str, Any]:
    """Per record, the project's numbers against the ports': fact metrics (:func:`fact_agreement`)
    and the reader's EM / F1."""
    n_fact = n_fact_ok = n_em = n_em_ok = n_ans = n_ans_ok = 0
    for rec, raw in zip(records, raws):
        if not raw.get("answerable", True):
            continue  # MuSiQue-Full's unanswerable twin: the official scores neither its answer nor support
        if rec.get("f1") is not None:  # None: gold unknown to the project (none in the context)
            ok, em_ok = fact_agreement(dataset, rec, raw)
            n_fact += 1
            n_fact_ok += ok
            if em_ok is not None:
                n_em += 1
                n_em_ok += em_ok
        line = answers.get(str(rec["id"]))
        if line is not None:
            if dataset == "hotpotqa":
                a_em, a_f1 = hotpot_answer(line["prediction"], raw["answer"])[:2]
            else:
                a_em, a_f1 = musique_answer(line["prediction"], [raw["answer"], *raw["answer_aliases"]])
            n_ans += 1
            n_ans_ok += close(a_em, line["EM"]) and close(a_f1, line["F1"])
    return {
        "fact_f1_agree": f"{n_fact_ok}/{n_fact}",
        "fact_em_agree": f"{n_em_ok}/{n_em} (records with as many picks as gold paragraphs)",
        "answer_agree": f"{n_ans_ok}/{n_ans}",
        "all_agree": n_fact_ok == n_fact and n_em_ok == n_em and n_ans_ok == n_ans,
    }


def write_official(
    log: Path, out: Path, reader: Path | None = None, data: Path | None = None, layout: str | None = None
) -> dict[str, Any]:
    """Write the official files of ``log`` under ``out``; return official_scores.json's content.
    ``layout`` (the subcommand: hotpotqa or musique), when given, must be the log's dataset."""
    records, meta = read_log(log)
    dataset = str(meta.get("dataset", ""))
    if dataset not in DATASETS:
        raise LogFormatError(
            f"{log}: official layouts exist for {', '.join(DATASETS)}; the log's dataset is "
            f"{dataset or 'not named (no .meta.json)'}"
        )
    if layout is not None and layout != dataset:
        raise LogFormatError(f"{log}: a {dataset} log, not {layout}: write it with `leaderboard.py {dataset}`")
    files = raw_files(dataset, meta, data)
    raws = match_raw(dataset, records, read_raw(files), str(files[0]))
    answers = reader_answers(reader)
    missing = [str(r["id"]) for r in records if answers and str(r["id"]) not in answers]
    if missing:
        raise LogFormatError(f"{reader}: no reader line for {len(missing)} record(s) of the log, e.g. {missing[0]!r}")
    out.mkdir(parents=True, exist_ok=True)
    scored = [r for r in records if not str(r["id"]).endswith(":unanswerable")]
    known = [r for r in scored if r.get("f1") is not None]  # as the evaluation's summary
    project = {"fact_em": mean(r["em"] for r in known), "fact_f1": mean(r["f1"] for r in known)}
    if answers:
        project.update(
            answer_em=mean(answers[str(r["id"])]["EM"] for r in scored),
            answer_f1=mean(answers[str(r["id"])]["F1"] for r in scored),
        )
    if dataset == "hotpotqa":
        pred, gold = hotpot_files(records, raws, answers)
        atomic_write_text(out / "hotpot_pred.json", json.dumps(pred, ensure_ascii=False))
        atomic_write_text(out / "hotpot_gold.json", json.dumps(gold, ensure_ascii=False))
        official = hotpot_evaluate(pred, gold)
    else:
        pred, gold = musique_files(records, raws, answers)
        atomic_write_text(out / "musique_pred.jsonl", "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pred))
        atomic_write_text(out / "musique_gold.jsonl", "".join(json.dumps(g, ensure_ascii=False) + "\n" for g in gold))
        official = musique_evaluate(pred, gold)
    if not answers:  # "" answers score 0: not a measurement
        official = {k: v for k, v in official.items() if k.startswith(("sp_", "support_"))}
    result = {
        "log": str(log),
        "dataset": dataset,
        "n": len(records),
        "official": official,
        "project": project,
        **agreement(dataset, records, raws, answers),
    }
    atomic_write_text(out / "official_scores.json", json.dumps(result, indent=2) + "\n")
    return result


def official_main(args: argparse.Namespace, ap: argparse.ArgumentParser) -> int:
    out = args.out or args.log.with_name(args.log.name.split(".jsonl")[0] + "_official")
    try:
        result = write_official(args.log, out, args.reader, args.data, args.layout)
    except (OSError, ValueError, StorageError) as e:  # missing files, bad records, a full disk
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    if args.check and not result["all_agree"]:
        print("error: the project's numbers and the official scorers' disagree (official_scores.json)", file=sys.stderr)
        return 1
    return 0


# == the command line ================================================================================
def main(argv: list[str] | None = None) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    sub = ap.add_subparsers(dest="layout", required=True, metavar="babilong|hotpotqa|musique")
    b = sub.add_parser("babilong", help="BABILong leaderboard files", description=BABILONG_HELP, formatter_class=raw)
    b.add_argument("outputs", type=Path, nargs="+", help="eval_llm_synthetics.py output files")
    b.add_argument("--model", required=True, help="<org>/<name>: the leaderboard's folder for this system")
    b.add_argument("--out", type=Path, required=True, help="the babilong_evals folder to write into")
    b.add_argument("--filter", default="none", help="the chunk filter whose lines are written (docs/READERS.md)")
    b.add_argument("--scorer", type=Path, help=f"a git checkout of {SCORER_REPO}: its commit goes in the manifest")
    b.add_argument("--dataset-revision", help=f"the {DATASET_REPO} commit (40 hex digits) the test sets came from")
    b.set_defaults(run=babilong_main, parser=b)
    for dataset in DATASETS:
        o = sub.add_parser(
            dataset, help=f"{dataset}'s official prediction files", description=OFFICIAL_HELP, formatter_class=raw
        )
        o.add_argument("log", type=Path, help=f"eval_retriever.py records (.jsonl or .jsonl.gz) of {dataset}")
        o.add_argument("--reader", type=Path, help="eval_llm_openqa.py output for this log (answers)")
        o.add_argument("--data", type=Path, help="the raw dataset file (default: the log's .meta.json data_path/split)")
        o.add_argument("--out", type=Path, help="output folder (default: <log stem>_official next to the log)")
        o.add_argument("--check", action="store_true", help="exit 1 unless the project's numbers agree with the ports")
        o.set_defaults(run=official_main, parser=o)
    args = ap.parse_args(argv)
    return args.run(args, args.parser)


if __name__ == "__main__":
    sys.exit(main())
