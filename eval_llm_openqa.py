"""Open-QA reader evaluation for HotpotQA / MuSiQue / RULER-QA retriever logs (DESIGN §9.5).

    python eval_llm_openqa.py --retriever_logfile runs/x/eval_seed0.jsonl --llm_name Qwen/QwQ-32B

Kept chunks stay in retrieval order; the model answers and ends with ``Final answer: ...``; any
``<think>`` block is dropped and the text after the last such cue is scored, maximum over the
answer and its aliases, with the benchmark's official metric (docs/SCORING.md): HotpotQA / 2Wiki
F1 with the yes/no/noanswer rule (plain token F1 beside it), MuSiQue SQuAD F1, RULER QA
string_match_part (EM/F1 beside it). Writes the per-sample JSONL (resumable) and
``<output stem>.summary.json`` with the means. See docs/READERS.md for every flag.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from prompts_and_metrics.filters import FILTERS, FilterSpec, apply_filter
from prompts_and_metrics.metrics import QA_BENCHMARKS, SCORING_VERSION, qa_scores
from prompts_and_metrics.prompts import extract_final_answer, openqa_messages, strip_think
from prompts_and_metrics.reader_io import (
    LogFormatError,
    line_key,
    mean,
    output_lock,
    parse_reader_args,
    pending_records,
    read_keyed_output,
    read_retriever_log,
    record_key,
    rescore_outputs,
    run_reader_cli,
    sample_lines,
    write_json_atomic,
)
from prompts_and_metrics.reader_loop import Job, add_backend_args, generate_lines

# Optional per-sample metrics, present for some benchmarks only (summary: mean over the lines that have them).
_EXTRA_METRICS = ("F1_plain", "string_match_part")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--retriever_logfile", required=True, help="JSONL written by eval_retriever.py")
    p.add_argument(
        "--llm_name",
        default="Qwen/QwQ-32B",
        help="hub name, local folder, .gguf file, 'smollm2' (offline asset), or served name (server)",
    )
    p.add_argument("--output_file_path", default=None, help="default: <log stem>_eval_llm.jsonl next to the log")
    p.add_argument("--max_tokens", type=int, default=8000, help="max new tokens (paper 8000; reader=ref 4000)")
    p.add_argument(
        "--think",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Qwen3 thinking switch (only sent for model names containing 'qwen3'); default on",
    )
    p.add_argument("--chunk_filter", default="none", choices=FILTERS)
    p.add_argument("--stopping_threshold", type=float, default=-0.5, help="qvalue filter threshold")
    p.add_argument("--qvalue_comparison", default="le", choices=("le", "lt"))
    p.add_argument("--max_retrieval_budget", type=int, default=None, help="retrieval_step filter: keep first N")
    p.add_argument("--empty_if_none", action="store_true", help="early_stop: keep nothing when no gold was retrieved")
    add_backend_args(p)
    p.set_defaults(gpu_util=0.95, timeout_s=600.0)
    p.add_argument("--ignore_answer_aliases", action="store_true", help="legacy.ignore_answer_aliases")
    p.add_argument("--qa_f1_empty_conventions", action="store_true", help="legacy.qa_f1_empty_conventions")
    p.add_argument(
        "--benchmark",
        default="auto",
        choices=("auto", *QA_BENCHMARKS),
        help="official metric to apply; auto = each record's 'source', else the dataset named in the log's .meta.json",
    )
    return p


def log_dataset(log_path: Path) -> str | None:
    """``dataset`` of the retriever log's meta file (written by eval_retriever.py), if any."""
    meta = log_path.with_name(log_path.name + ".meta.json")
    if not meta.is_file():
        return None
    return json.loads(meta.read_text(encoding="utf-8")).get("dataset")


def record_benchmark(rec: dict[str, Any], choice: str, dataset: str | None, where: str) -> str:
    """The benchmark whose official metric scores ``rec``: ``--benchmark`` when given, else the
    record's ``source`` (combined sets), else the log's dataset."""
    if choice != "auto":
        return choice
    name = rec.get("source") or dataset
    if str(name).startswith("longbench"):
        raise ValueError(f"{where}: a LongBench log; score it with eval_llm_longbench.py (LongBench's own metrics)")
    if name not in QA_BENCHMARKS:
        raise ValueError(
            f"{where}: cannot tell which benchmark record {rec.get('id')!r} belongs to "
            f"(source {rec.get('source')!r}, log dataset {dataset!r}); pass --benchmark "
            f"({', '.join(QA_BENCHMARKS)})"
        )
    return name


def score_line(line: dict[str, Any], benchmark: str, ignore_aliases: bool, legacy_empty: bool) -> dict[str, Any]:
    """An output line with ``prediction`` (text after the last ``Final answer:`` once the reasoning
    block is dropped), ``benchmark`` and its metrics, recomputed from ``full_model_output``."""
    pred = extract_final_answer(strip_think(str(line["full_model_output"])))
    sc = qa_scores(
        pred, str(line["ground_truth"]), line.get("answer_aliases") or [], ignore_aliases, legacy_empty, benchmark
    )
    out = {k: v for k, v in line.items() if k not in ("EM", "F1", *_EXTRA_METRICS)}
    out.update(prediction=pred, benchmark=benchmark, scoring=SCORING_VERSION, **sc)
    return out


def run(args: argparse.Namespace, backend: Any | None = None) -> dict[str, Any]:
    log = read_retriever_log(args.retriever_logfile, args.limit)
    records = log.records
    spec = FilterSpec.from_args(args)
    out_path = (
        Path(args.output_file_path) if args.output_file_path else log.path.with_name(f"{log.path.stem}_eval_llm.jsonl")
    )
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with output_lock(out_path, "--output_file_path"):
        enable_thinking = bool(args.think) if "qwen3" in args.llm_name.lower() else None
        settings = {
            "llm_name": args.llm_name,
            "filter": spec.key(),
            "max_tokens": args.max_tokens,
            "think": enable_thinking,
            "ignore_answer_aliases": bool(args.ignore_answer_aliases),
            "qa_f1_empty_conventions": bool(args.qa_f1_empty_conventions),
            "benchmark": args.benchmark,
        }
        dataset = log_dataset(log.path)
        for k, r in enumerate(records):
            if r.get("answer") is None:
                raise LogFormatError(
                    f"{log.path}: record {k + 1} ({r.get('id')!r}) has no answer. The 2WikiMultihopQA test split is "
                    "unlabelled (its authors score test predictions on request): evaluate on dev."
                )
        benchmarks = {record_key(r): record_benchmark(r, args.benchmark, dataset, str(log.path)) for r in records}

        def upgrade(line: dict[str, Any]) -> dict[str, Any]:
            # a line of an older scorer: its settings lack the keys added since; the rest must match
            old = line.get("reader_settings") or {}
            if old != {k: v for k, v in settings.items() if k in old}:
                raise ValueError(f"made with {old}, not {settings}")
            bench = benchmarks.get(line_key(line)) or record_benchmark(line, args.benchmark, dataset, str(out_path))
            return {
                **score_line(line, bench, args.ignore_answer_aliases, args.qa_f1_empty_conventions),
                "reader_settings": settings,
            }

        keyed = read_keyed_output(out_path, log, "--output_file_path")
        existing = rescore_outputs(out_path, keyed, SCORING_VERSION, upgrade)
        jobs = []
        for r in pending_records(out_path, existing, records, settings, "--output_file_path"):
            idx, texts = apply_filter(r, spec, sort_by_index=False)
            jobs.append(Job(r, openqa_messages(texts, str(r["question"])), args.max_tokens, (idx, texts)))

        def make_line(job: Job, out: str) -> dict[str, Any]:
            r, (idx, texts) = job.record, job.info
            line = {
                "id": r["id"],
                "question": r["question"],
                "retrieved_chunks_idx": r["pred_idx"],
                "ground_truth_chunks_idx": r["sf_idx"],
                "filter_idx": idx,
                "filter_texts": texts,
                "ground_truth": r["answer"],
                "answer_aliases": list(r.get("answer_aliases") or []),
                "full_model_output": out,
                "reader_settings": settings,
            }
            bench = benchmarks[record_key(r)]
            return score_line(line, bench, args.ignore_answer_aliases, args.qa_f1_empty_conventions)

        # --max_model_len is taken as given here (never grown to fit a prompt): a longer prompt is the backend's error
        new = generate_lines(
            args, backend, jobs, make_line, out_path, enable_thinking, "open-QA reader", grow_context=False
        )
        rows = sample_lines(records, existing + new)
        # MuSiQue-Full: the official evaluator scores answers on answerable records only; the
        # unanswerable contrasts keep their lines but leave the means (their count is reported).
        unanswerable = {record_key(r) for r in records if r.get("answerable") is False}
        dropped = sum(line_key(r) in unanswerable for r in rows)
        rows = [r for r in rows if line_key(r) not in unanswerable]
        summary = {**summarize(rows), "retriever_logfile": str(log.path), **settings}
        if unanswerable:
            summary["n_unanswerable"] = dropped
        by_bench = sorted({r["benchmark"] for r in rows})
        if len(by_bench) > 1:
            summary["by_benchmark"] = {b: summarize([r for r in rows if r["benchmark"] == b]) for b in by_bench}
        summary_path = out_path.with_name(f"{out_path.stem}.summary.json")
        write_json_atomic(summary_path, summary)
        print(
            "open-QA reader: "
            + ", ".join(f"{k}={summary[k]}" for k in ("EM", "F1", *_EXTRA_METRICS, "n") if k in summary)
            + f" -> {summary_path}"
        )
        return {**summary, "output": str(out_path), "summary": str(summary_path)}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Means of EM and F1, and of each optional metric over the lines that carry it."""
    out: dict[str, Any] = {"EM": mean([r["EM"] for r in rows]), "F1": mean([r["F1"] for r in rows])}
    for k in _EXTRA_METRICS:
        vals = [r[k] for r in rows if k in r]
        if vals:
            out[k] = mean(vals)
    out["n"] = len(rows)
    return out


# ``--reader ref`` restores the reference script values (DESIGN §9.6); explicit flags still win.
READER_PRESETS: dict[str, dict[str, Any]] = {"paper": {}, "ref": {"max_tokens": 4000, "think": True}}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return parse_reader_args(build_parser(), argv, READER_PRESETS)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return run_reader_cli(run, parse_args(argv))


if __name__ == "__main__":
    main(sys.argv[1:])
