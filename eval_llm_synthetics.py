"""Reader evaluation for BabiLong / RULER-NIAH retriever logs (DESIGN §9.4).

    python eval_llm_synthetics.py runs/x/eval_seed0_ns50.jsonl --llm_name Qwen/Qwen3-4B --babi_task qa1

Per retriever record: filter the retrieved chunks, re-sort the kept ones by chunk index, build the
task prompt, generate greedily, drop any ``<think>`` block, score. bAbI: acc (the official BabiLong
scorer), acc_fixed (whole-word labels), em (ref rule), f1 (label F1); NIAH: string_match_all
(RULER), em, f1. Writes ``<logdir>/<basename(llm)>_<basename(logfile)>`` (one line per record and
filter; resumable) and updates ``<logdir>/results_<basename(llm)>.json`` = {context key: {filter
key: {metric: mean, n}}}. See docs/READERS.md for every flag and docs/SCORING.md for the metrics.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from prompts_and_metrics.filters import FILTERS, FilterSpec, apply_filter
from prompts_and_metrics.metrics import NIAH_TASKS, SCORING_VERSION, synthetic_scores, task_key
from prompts_and_metrics.prompts import babilong_messages, strip_think
from prompts_and_metrics.reader_io import (
    LogFormatError,
    RetrieverLog,
    context_key,
    mean,
    model_basename,
    output_lock,
    parse_reader_args,
    pending_records,
    read_keyed_output,
    read_retriever_log,
    rescore_outputs,
    run_reader_cli,
    sample_lines,
    write_json_atomic,
)
from prompts_and_metrics.reader_loop import Job, add_backend_args, generate_lines


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("retriever_logfile", help="JSONL written by eval_retriever.py")
    p.add_argument(
        "--llm_name",
        default="Qwen/Qwen3-4B",
        help="hub name, local folder, .gguf file, 'smollm2' (offline asset), or served name (server)",
    )
    p.add_argument("--babi_task", required=True, help="qa1..qa20 (or full bAbI file name), niah, niahmv")
    p.add_argument("--max_tokens", type=int, default=512, help="max new tokens (paper 512; reader=ref 32)")
    p.add_argument(
        "--think",
        action="store_true",
        help="enable_thinking=true in the chat template (default off); the <think> block is never scored",
    )
    p.add_argument("--chunk_filter", default="none", choices=FILTERS)
    p.add_argument("--stopping_threshold", type=float, default=-0.5, help="qvalue filter threshold")
    p.add_argument(
        "--qvalue_comparison",
        default="le",
        choices=("le", "lt"),
        help="qvalue filter: le = stop at first Q <= thr (ref); lt = stop at first Q < thr (paper App. B)",
    )
    p.add_argument("--max_retrieval_budget", type=int, default=None, help="retrieval_step filter: keep first N")
    p.add_argument("--empty_if_none", action="store_true", help="early_stop: keep nothing when no gold was retrieved")
    add_backend_args(p)
    p.set_defaults(max_model_len=2048)
    p.add_argument("--logdir", default=None, help="output folder (default: the log's folder)")
    p.add_argument(
        "--extra_question_mark",
        action="store_true",
        help="legacy.prompt_extra_question_mark: append the ref's extra '?'",
    )
    return p


def metric_names(task: str) -> tuple[str, ...]:
    """Summary keys, headline first: RULER's string_match_all for NIAH, the official BabiLong
    accuracy for bAbI."""
    return ("string_match_all", "em", "f1") if task in NIAH_TASKS else ("acc", "acc_fixed", "em", "f1")


# every per-sample metric field any scoring version wrote (v1 also had answer_recall for NIAH)
_METRIC_FIELDS = {f"answer_{k}" for k in ("acc", "acc_fixed", "em", "f1", "recall", "string_match_all")}


def score_record(rec: dict[str, Any], task: str) -> dict[str, Any]:
    """``rec`` with ``prediction`` (the model output without its reasoning block) and one
    ``answer_<metric>`` per metric, scored from ``full_model_output`` (lines written before that
    field existed kept the raw output in ``prediction``)."""
    raw = rec["full_model_output"] if "full_model_output" in rec else rec["prediction"]
    text = strip_think(str(raw))
    sc = synthetic_scores(text, str(rec["answer"]), str(rec["question"]), task)
    out = {k: v for k, v in rec.items() if k not in _METRIC_FIELDS}
    out.update(full_model_output=raw, prediction=text, scoring=SCORING_VERSION)
    out.update({f"answer_{k}": sc[k] for k in metric_names(task)})
    return out


def _read_rescored(out_path: Path, log: RetrieverLog, task: str) -> list[dict[str, Any]]:
    """Existing output lines with their sample keys, rescored when an older scorer wrote them
    (each line's task is in its reader settings, so a file mixing tasks is rescored line by line)."""

    def rescore(r: dict[str, Any]) -> dict[str, Any]:
        return score_record(r, task_key(str(r.get("reader_settings", {}).get("babi_task", task))))

    return rescore_outputs(out_path, read_keyed_output(out_path, log, "--logdir"), SCORING_VERSION, rescore)


def run(args: argparse.Namespace, backend: Any | None = None) -> dict[str, Any]:
    """Evaluate; returns {context, filter, em, acc, f1, n, output, results}. ``backend`` lets a caller
    reuse an already loaded model."""
    task = task_key(args.babi_task)
    log = read_retriever_log(args.retriever_logfile, args.limit)
    records = log.records
    if args.chunk_filter == "qvalue":
        for k, r in enumerate(records):
            if "q_values" not in r:
                raise LogFormatError(f"{log.path}: record {k + 1} has no q_values (needed by --chunk_filter qvalue)")
    spec = FilterSpec.from_args(args)
    fkey = spec.key()
    logdir = Path(args.logdir) if args.logdir else log.path.parent
    logdir.mkdir(parents=True, exist_ok=True)
    llm_base = model_basename(args.llm_name)
    out_path = logdir / f"{llm_base}_{log.path.name}"
    with output_lock(out_path, "--logdir"):
        settings = {
            "babi_task": task,
            "max_tokens": args.max_tokens,
            "think": bool(args.think),
            "llm_name": args.llm_name,
            "extra_question_mark": bool(args.extra_question_mark),
        }

        # one output file holds every filter's lines: only this filter's count here
        existing = [r for r in _read_rescored(out_path, log, task) if r.get("filter") == fkey]
        jobs = []
        for r in pending_records(out_path, existing, records, settings, "--logdir"):
            idx, texts = apply_filter(r, spec, sort_by_index=True)
            msgs = babilong_messages(task, " ".join(texts), str(r["question"]), args.extra_question_mark)
            jobs.append(Job(r, msgs, args.max_tokens, (idx, texts)))

        def make_line(job: Job, out: str) -> dict[str, Any]:
            idx, texts = job.info
            rec = {**job.record, "full_model_output": out, "filter_idx": idx, "filter_texts": texts}
            return score_record({**rec, "filter": fkey, "reader_settings": settings}, task)

        new = generate_lines(args, backend, jobs, make_line, out_path, bool(args.think), f"{llm_base} {task} {fkey}")
        rows = sample_lines(records, existing + new)
        summary: dict[str, Any] = {k: mean([r[f"answer_{k}"] for r in rows]) for k in metric_names(task)}
        summary["n"] = len(rows)
        ctx = context_key(log.path, records)
        results_path = logdir / f"results_{llm_base}.json"
        results = json.loads(results_path.read_text(encoding="utf-8")) if results_path.is_file() else {}
        results.setdefault(ctx, {})[fkey] = summary
        write_json_atomic(results_path, results)
        print(
            f"[{llm_base}] task={task} context={ctx} filter={fkey}: "
            + ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items())
        )
        return {"context": ctx, "filter": fkey, **summary, "output": str(out_path), "results": str(results_path)}


# ``--reader ref`` restores the reference script values (DESIGN §9.6); explicit flags still win.
READER_PRESETS: dict[str, dict[str, Any]] = {"paper": {}, "ref": {"max_tokens": 32, "max_model_len": 2048}}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return parse_reader_args(build_parser(), argv, READER_PRESETS)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return run_reader_cli(run, parse_args(argv))


if __name__ == "__main__":
    main(sys.argv[1:])
