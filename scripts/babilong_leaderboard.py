"""An evaluation round's reader answers on the official BABILong test sets, in the layout of
BABILong's leaderboard predictions.

    python scripts/babilong_leaderboard.py <reader output>.jsonl ... --model <org>/<name> --out <folder>
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

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from prompts_and_metrics.metrics import babilong_acc, task_key  # noqa: E402
from prompts_and_metrics.prompts import SYSTEM_BABILONG, TASK_PROMPTS  # noqa: E402
from runstore import StorageError, atomic_write_text  # noqa: E402
from runstore.jsonl_input import InputError, read_jsonl  # noqa: E402

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
        for n, line in read_jsonl(path):
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


def check(cells: dict[tuple[str, str], dict[int, dict[str, Any]]]) -> None:
    """Refuse a cell the leaderboard cannot hold before any file is written."""
    for (task, length), rows in sorted(cells.items()):
        settings = {json.dumps(r["reader_settings"], sort_keys=True) for r in rows.values()}
        if len(settings) != 1:
            raise LeaderboardError(f"{task} {length}: lines made with different reader settings: {sorted(settings)}")
        asked = next(iter(rows.values()))["reader_settings"]["babi_task"]
        if task_key(str(asked)) != task:
            raise LeaderboardError(f"{task} {length}: the reader was asked {asked}")


def write(cells: dict[tuple[str, str], dict[int, dict[str, Any]]], folder: Path, chunk_filter: str) -> list[Path]:
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
        "port": {"repo": "q-rag", **git_state(REPO, PORT_FILE)},
        "dataset": {"repo": DATASET_REPO, "revision": revision},
        "files": files,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outputs", type=Path, nargs="+", help="eval_llm_synthetics.py output files")
    ap.add_argument("--model", required=True, help="<org>/<name>: the leaderboard's folder for this system")
    ap.add_argument("--out", type=Path, required=True, help="the babilong_evals folder to write into")
    ap.add_argument("--filter", default="none", help="the chunk filter whose lines are written (docs/READERS.md)")
    ap.add_argument("--scorer", type=Path, help=f"a git checkout of {SCORER_REPO}: its commit goes in the manifest")
    ap.add_argument("--dataset-revision", help=f"the {DATASET_REPO} commit (40 hex digits) the test sets came from")
    args = ap.parse_args(argv)
    if MODEL.fullmatch(args.model) is None:  # two plain names: nothing written outside --out
        ap.error(f"--model {args.model!r}: give <org>/<name> (letters, digits, '.', '_', '-')")
    if args.dataset_revision is not None and re.fullmatch(r"[0-9a-f]{40}", args.dataset_revision) is None:
        ap.error(f"--dataset-revision {args.dataset_revision!r}: give the dataset's commit, 40 hex digits")
    try:
        cells = read_lines(args.outputs, args.filter)
        if not cells:
            raise LeaderboardError(f"no lines with chunk filter {args.filter!r} in {', '.join(map(str, args.outputs))}")
        check(cells)
        scorer = scorer_state(args.scorer) if args.scorer is not None else None  # before anything is written
        written = write(cells, args.out / args.model, args.filter)
        record = manifest(cells, written, scorer, args.dataset_revision)
        atomic_write_text(args.out / args.model / "manifest.json", json.dumps(record, indent=1) + "\n")
    except (InputError, LeaderboardError, StorageError) as e:
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


if __name__ == "__main__":
    sys.exit(main())
