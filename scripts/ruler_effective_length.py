"""RULER's effective length of retrieval (+ reader) runs.

    python scripts/ruler_effective_length.py <folder> ... [--reader <llm>] [--filter none] [--metric M] [--out x.json]

RULER scores a system per task and context length, averages over its tasks at each length, and
calls the longest length up to which every tested length's average is above 85.6 (Llama-2-7B's
average at 4K) its effective length (``effective_length`` here; Table 1's report,
experiments/niah/niah_report.py, applies the same rule and scores). Each ``<folder>`` is one seed of
the system (a run folder, or any folder under which its records lie); the scores are averaged over
the folders.

Records are found under each folder by name, ``eval_seed<S>_test[_]<length>.jsonl[.gz]``
(eval_retriever.py / experiments/niah/niah_eval_grid.py on a test split named by its length: ``4k``, ``1m``),
and their task is the ``task`` of the ``.meta.json`` eval_retriever.py writes beside them.

* Retrieval alone (no ``--reader``): per sample, ``score`` of the greedy record at the fixed
  budget; ``--metric all`` (default: every gold chunk retrieved), ``first_k`` (every gold chunk among
  the first k picks, k = the sample's number of gold chunks), ``f1`` (fact F1) or
  ``smatch`` (RULER's string_match_all on the retrieved chunks' text, a reader-free upper bound).
* With a reader (``--reader <basename of the llm>``): its output files
  ``<llm>_eval_seed<S>_test<length>.jsonl`` beside the records (eval_llm_synthetics.py's default
  ``--logdir``), the lines of one chunk filter (``--filter``, default ``none``), and the reader's
  ``answer_<metric>``: ``--metric`` default ``string_match_all`` (RULER's NIAH metric) where the
  lines carry it, else ``acc`` (BabiLong's compare_answers).

Prints the score table (percent, mean over the folders) and the effective length on the average
over tasks and per task; ``--out`` writes the same as JSON. A half-written last line is skipped with
a warning (runstore/jsonl_input.py); other bad input is one ``error:`` line, status 2. ``--out`` is
checked before the table is printed and replaces only an earlier report of this script.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from prompts_and_metrics.metrics import fact_metrics, ruler_postprocess, string_match_all  # noqa: E402
from runstore import StorageError, atomic_write_text, probe_writable  # noqa: E402
from runstore.jsonl_input import InputError, read_bytes, read_jsonl  # noqa: E402

# RULER's eight NIAH subtasks with Table 1's column labels, and its lengths (shortest first)
COLUMNS = {
    "niah_single_1": "S1",
    "niah_single_2": "S2",
    "niah_single_3": "S3",
    "niah_multikey_1": "MK1",
    "niah_multikey_2": "MK2",
    "niah_multikey_3": "MK3",
    "niah_multivalue": "MV",
    "niah_multiquery": "MQ",
}
ROWS = {"4k": "4K", "16k": "16K", "32k": "32K", "128k": "128K", "1m": "1M"}
RULER_THRESHOLD = 85.6  # RULER's effective-length threshold (Llama-2-7B's average at 4K)
METRICS = ("all", "first_k", "f1", "smatch")


def stop_at(q_values: list[float], theta: float | None) -> int:
    """Chunks kept under Q-value stopping: the first step t > 0 whose max Q is <= theta ends the
    episode before that step is taken (None: the fixed budget, every step)."""
    if theta is not None:
        for t in range(1, len(q_values)):
            if q_values[t] <= theta:
                return t
    return len(q_values)


def score(rec: dict[str, Any], theta: float | None = None) -> dict[str, float]:
    """One greedy record's scores (``all``, ``first_k``, ``f1``, ``smatch``: the module's docstring), its ``steps``
    kept, the record cut by Q-value stopping at ``theta`` when given (Table 1's Q-stop rows)."""
    k = stop_at(rec["q_values"], theta)
    facts = fact_metrics(rec["pred_idx"][:k], rec["sf_idx"])  # "all" = fact EM: every needle, extras allowed
    needles = len(set(rec["sf_idx"]))
    return {
        "all": facts["em"],
        "first_k": fact_metrics(rec["pred_idx"][: min(k, needles)], rec["sf_idx"])["em"],
        "f1": facts["f1"],
        "smatch": string_match_all(" ".join(rec["pred_texts"][:k]), str(rec["answer"]).split(",")),
        "steps": float(k),
    }


def effective_length(
    cells: dict[tuple, dict[str, Any]],
    names: list[str],
    task: str | None,
    key: str,
    rows: dict[str, str] = ROWS,
    columns: dict[str, str] = COLUMNS,
) -> str:
    """RULER's effective length: the longest length up to which every tested length's mean score
    (over seeds; over the subtasks ``columns`` when ``task`` is None) is above the threshold. A length
    that only some seeds were evaluated at ends the search, named with the seeds it rests on.
    ``rows`` maps the lengths, shortest first, to their labels (report() passes the lengths and tasks
    its records hold; experiments/niah/niah_report.py, Table 1's grid)."""
    best = f"< {next(iter(rows.values()))}"
    for length, label in rows.items():
        tasks = list(columns) if task is None else [task]
        have = [n for n in names if all((n, t, length) in cells for t in tasks)]
        # "not above", so that a NaN score fails (NaN <= threshold is False)
        if not have or not statistics.fmean(cells[(n, t, length)][key] for n in have for t in tasks) > RULER_THRESHOLD:
            break
        if len(have) < len(names):  # a length evaluated for some seeds only (e.g. 1M for one seed): said so
            return f"{label} ({', '.join(have)} only)"
        best = label
    return best


RECORDS = re.compile(r"eval_seed\d+_test_?(\d+)([km])\.jsonl(?:\.gz)?")
UNITS = {"k": 1_000, "m": 1_000_000}
RECORD_KEYS = ("pred_idx", "pred_texts", "q_values", "sf_idx", "answer")  # what score() reads
REPORT_KEYS = {"threshold", "folders", "scores", "effective_length"}  # an earlier --out, safe to replace


class ScoreError(ValueError):
    """Records that cannot be scored: one line saying which and why."""


def find(folder: Path, reader: str | None) -> list[tuple[Path, Path, str]]:
    """(file to score, retriever record file, length) of every record file under ``folder``."""
    out = []
    for path in sorted(folder.rglob("eval_seed*")):
        m = RECORDS.fullmatch(path.name)
        if m is None:
            continue
        length = f"{m.group(1)}{m.group(2)}"
        if reader is None:
            out.append((path, path, length))
        else:
            answers = path.with_name(f"{reader}_{path.name.removesuffix('.gz')}")
            if answers.is_file():
                out.append((answers, path, length))
    return out


def task_of(records: Path) -> str:
    meta = Path(f"{str(records).removesuffix('.gz')}.meta.json")
    if not meta.is_file():
        raise ScoreError(f"{meta} is missing: the task of {records} is unknown (eval_retriever.py writes it)")
    try:
        task = json.loads(read_bytes(meta).decode("utf-8")).get("task")
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        task = None
    if not isinstance(task, str) or not task:
        raise ScoreError(
            f"{meta}: not an eval_retriever.py meta file (no task named): the task of {records} is unknown"
        )
    return task


def file_score(path: Path, reader: str | None, chunk_filter: str, metric: str | None) -> float:
    """Percent: the mean per-sample score of one file."""
    rows = read_jsonl(path)
    if reader is None:
        values = []
        for n, r in rows:
            missing = [k for k in RECORD_KEYS if k not in r]
            if missing:
                raise ScoreError(
                    f"{path}:{n}: the record lacks {', '.join(missing)} (not a greedy eval_retriever.py record)"
                )
            values.append(score(r)[metric or "all"])
    else:
        rows = [(n, r) for n, r in rows if r.get("filter") == chunk_filter]
        if not rows:
            raise ScoreError(f"{path}: no lines with chunk filter {chunk_filter!r}")
        key = f"answer_{metric or ('string_match_all' if 'answer_string_match_all' in rows[0][1] else 'acc')}"
        values = []
        for n, r in rows:
            v = r.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:  # NaN fails too
                raise ScoreError(f"{path}:{n}: {key} is {json.dumps(v)}, not a score between 0 and 1")
            values.append(float(v))
    if not values:  # an evaluation killed before its first record
        raise ScoreError(f"{path}: no records: rerun the evaluation that writes it")
    return 100 * statistics.fmean(values)


def grid(folders: list[Path], reader: str | None, chunk_filter: str, metric: str | None) -> dict[tuple, dict]:
    cells: dict[tuple, dict[str, float]] = {}
    seen: dict[Path, Path] = {}
    for folder in folders:
        if not folder.is_dir():
            raise ScoreError(f"{folder}: no such folder (give one folder per seed)")
        earlier = seen.setdefault(folder.resolve(), folder)
        if earlier is not folder:
            raise ScoreError(f"{folder} is given twice (as {earlier}): give each seed's folder once")
        for path, records, length in find(folder, reader):
            key = (str(folder), task_of(records), length)
            if key in cells:
                raise ScoreError(f"{folder}: two record files for {key[1]} at {length} (one seed per folder)")
            cells[key] = {"score": file_score(path, reader, chunk_filter, metric)}
    return cells


def check_out(out: Path, folders: list[Path], reader: str | None) -> None:
    """Refuse an ``--out`` that would replace an input or any other file that is not an earlier
    report (a meta file, say), or that cannot be written, before anything is printed."""
    if not out.parent.is_dir():
        raise ScoreError(f"--out {out}: no folder {out.parent}")
    cause = probe_writable(out.parent)
    if cause is not None:
        raise ScoreError(f"--out {out}: cannot write in {out.parent} ({cause.strerror})")
    if out.is_dir():
        raise ScoreError(f"--out {out} is a folder: name a .json file")
    read = {p.resolve() for f in folders for answers, records, _ in find(f, reader) for p in (answers, records)}
    if out.resolve() in read:
        raise ScoreError(f"--out {out} is one of the files read: name another file")
    if out.exists():
        try:
            earlier = json.loads(out.read_bytes())
        except (OSError, ValueError):
            earlier = None
        if not (isinstance(earlier, dict) and REPORT_KEYS <= earlier.keys()):
            raise ScoreError(f"--out {out} exists and is not an earlier report of this script: name another file")


def report(cells: dict[tuple, dict], names: list[str]) -> dict[str, Any]:
    """Table and effective lengths, the rows ordered by length, as effective_length reads them."""
    lengths = sorted({k[2] for k in cells}, key=lambda s: int(s[:-1]) * UNITS[s[-1]])
    rows = {length: length.upper() for length in lengths}
    tasks = sorted({k[1] for k in cells})
    columns = {t: t for t in tasks}
    table = {
        length: {
            t: statistics.fmean(cells[(n, t, length)]["score"] for n in names if (n, t, length) in cells)
            for t in tasks
            if any((n, t, length) in cells for n in names)
        }
        for length in lengths
    }
    return {
        "threshold": RULER_THRESHOLD,
        "folders": names,
        "scores": table,
        "effective_length": effective_length(cells, names, None, "score", rows, columns),
        "effective_length_per_task": {t: effective_length(cells, names, t, "score", rows, columns) for t in tasks},
    }


def markdown(rep: dict[str, Any]) -> str:
    tasks = sorted({t for row in rep["scores"].values() for t in row})
    lines = ["| length | " + " | ".join(tasks) + " | avg |", "|" + "---|" * (len(tasks) + 2)]
    for length, row in rep["scores"].items():
        avg = f"{statistics.fmean(row.values()):.1f}" if len(row) == len(tasks) else "–"
        lines.append(
            f"| {length.upper()} | " + " | ".join(f"{row[t]:.1f}" if t in row else "–" for t in tasks) + f" | {avg} |"
        )
    per_task = ", ".join(f"{t} {v}" for t, v in rep["effective_length_per_task"].items())
    lines += [
        "",
        f"Effective length (RULER, threshold {rep['threshold']}): {rep['effective_length']}; per task: {per_task}.",
    ]
    return "\n".join(lines)


def seq_length(length: str) -> int:
    """``4k`` -> 4096, ``1m`` -> 1048576: RULER's folder names (max_seq_length), as the test sets
    (scripts/niah_testsets.py) count them."""
    return int(length[:-1]) * {"k": 1024, "m": 1024 * 1024}[length[-1]]


def csv_text(rows: list[list[Any]]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)  # as pandas' to_csv, which wrote RULER's files
    return out.getvalue()


def write_ruler(folder: Path, reader: str, chunk_filter: str, metric: str | None, out: Path) -> list[Path]:
    """RULER's own result files of one run, per length ``<out>/<max_seq_length>/pred/``:
    ``summary.csv`` (scripts/eval/evaluate.py's write_evaluation: a pandas frame of the rows Tasks,
    Score (percent, 2 decimals), Nulls (empty predictions / samples), written with its column
    numbers as the header; ``summary-<task>.csv`` for a single task) and ``submission.csv`` (write_submission: Task, ID, Prediction, the
    prediction post-processed as RULER does)."""
    lengths: dict[str, dict[str, tuple[float, list[tuple[str, str]]]]] = {}
    for answers, records, length in find(folder, reader):
        lines = [(n, r) for n, r in read_jsonl(answers) if r.get("filter") == chunk_filter]
        if bad := next((n for n, r in lines if not isinstance(r.get("prediction"), str)), None):
            raise ScoreError(f"{answers}:{bad}: the line has no prediction text (an eval_llm_synthetics.py line has)")
        preds = [(str(r.get("id")), ruler_postprocess(r["prediction"])) for _, r in lines]
        score = round(file_score(answers, reader, chunk_filter, metric), 2)
        lengths.setdefault(length, {})[task_of(records)] = (score, preds)
    written = []
    for length, tasks in lengths.items():
        order = sorted(tasks, key=lambda t: (list(COLUMNS).index(t) if t in COLUMNS else 99, t))
        summary = [
            ["Tasks", *order],
            ["Score", *(tasks[t][0] for t in order)],
            ["Nulls", *(f"{sum(not p for _, p in tasks[t][1])}/{len(tasks[t][1])}" for t in order)],
        ]
        pred = out / str(seq_length(length)) / "pred"
        pred.mkdir(parents=True, exist_ok=True)
        name = "summary.csv" if len(order) > 1 else f"summary-{order[0]}.csv"  # RULER's names
        atomic_write_text(pred / name, csv_text([list(range(len(order) + 1)), *summary]))
        rows = [[t, i, p] for t in order for i, p in tasks[t][1]]
        atomic_write_text(pred / "submission.csv", csv_text([["Task", "ID", "Prediction"], *rows]))
        written += [pred / name, pred / "submission.csv"]
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", type=Path, nargs="+", help="one folder per seed of the system")
    ap.add_argument("--reader", help="basename of the reader LLM whose answers are scored (default: retrieval alone)")
    ap.add_argument("--filter", default="none", help="the reader lines' chunk filter (docs/READERS.md)")
    ap.add_argument("--metric", help="retrieval: all | f1 | smatch; reader: an answer_<metric> of its lines")
    ap.add_argument("--out", type=Path, help="also write the result as JSON here")
    ap.add_argument("--ruler-out", type=Path, help="also write RULER's summary.csv / submission.csv under this folder")
    args = ap.parse_args(argv)
    if args.reader is None and args.metric not in (None, *METRICS):
        ap.error(f"--metric {args.metric}: retrieval metrics are {', '.join(METRICS)}")
    if args.ruler_out is not None and (args.reader is None or len(args.folders) != 1):
        ap.error("--ruler-out: RULER's files hold one run's reader answers: give --reader and one folder")
    names = [str(f) for f in args.folders]
    try:
        cells = grid(args.folders, args.reader, args.filter, args.metric)
        if not cells:
            what = (
                f"{args.reader}_eval_seed*_test<length>.jsonl" if args.reader else "eval_seed*_test<length>.jsonl[.gz]"
            )
            raise ScoreError(f"no {what} under {', '.join(names)}")
        if args.out is not None:
            check_out(args.out, args.folders, args.reader)
        rep = report(cells, names)
        print(markdown(rep))
        if args.out is not None:
            atomic_write_text(args.out, json.dumps(rep, indent=2) + "\n")
        if args.ruler_out is not None:
            for path in write_ruler(args.folders[0], args.reader, args.filter, args.metric, args.ruler_out):
                print(f"wrote {path}")
    except (InputError, ScoreError, StorageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # --out written after the checks: e.g. the folder removed meanwhile
        print(f"error: cannot write --out {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
