"""Reader evaluation for LongBench retriever logs, scored with LongBench's own metric per subset.

    python eval_llm_longbench.py --retriever_logfile runs/x/eval_seed42_lb-hotpotqa.jsonl --llm_name Qwen/Qwen3-4B
    python eval_llm_longbench.py --score_predictions pred/<model>/ [--e]     # LongBench-format predictions

Per retriever record (written by ``eval_retriever.py eval_env=longbench envs.task=<subset>``): keep the
retrieved chunks (``--chunk_filter``), put them back in document order, fill the subset's prompt
(``{context}`` = the chunks, ``{input}`` = the record's LongBench input), generate greedily with the
subset's LongBench answer length, drop any ``<think>`` block and score with the subset's metric
(QA F1, ROUGE-L, classification, count, retrieval, code similarity; docs/SCORING.md), maximum over
all gold answers. Writes the per-sample JSONL (resumable) and ``<output stem>.summary.json``:
{subset: {score, n, by_length}}, scores as fractions (LongBench prints them × 100).

``--score_predictions DIR`` scores LongBench's own prediction files (``<subset>.jsonl`` with ``pred``,
``answers``, ``all_classes``, ``length``) and writes ``DIR/result.json`` exactly as LongBench's
eval.py does (× 100, two decimals; ``--e``: per length bucket). See docs/READERS.md for every flag.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from prompts_and_metrics.filters import FILTERS, FilterSpec, apply_filter
from prompts_and_metrics.longbench import LENGTH_BUCKETS, length_bucket, longbench_score, subset
from prompts_and_metrics.metrics import SCORING_VERSION
from prompts_and_metrics.prompts import strip_think
from prompts_and_metrics.reader_io import (
    LogFormatError,
    mean,
    model_basename,
    output_lock,
    parse_reader_args,
    pending_records,
    read_jsonl,
    read_keyed_output,
    read_retriever_log,
    record_key,
    run_reader_cli,
    sample_lines,
    write_json_atomic,
)
from prompts_and_metrics.reader_loop import Job, add_backend_args, generate_lines

# filters that read the gold chunks: LongBench has none
_GOLD_FILTERS = ("gt", "no_noise", "early_stop")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--retriever_logfile", help="JSONL written by eval_retriever.py with eval_env=longbench")
    src.add_argument(
        "--score_predictions",
        metavar="DIR",
        help="score LongBench-format prediction files <subset>.jsonl in DIR (no model) -> DIR/result.json",
    )
    p.add_argument("--e", action="store_true", help="--score_predictions: LongBench-E buckets 0-4k / 4-8k / 8k+")
    p.add_argument(
        "--llm_name",
        default="Qwen/Qwen3-4B",
        help="hub name, local folder, .gguf file, 'smollm2' (offline asset), or served name (server)",
    )
    p.add_argument("--output_file_path", default=None, help="default: <log stem>_<basename(llm)>.jsonl next to the log")
    p.add_argument(
        "--prompt_file",
        default=None,
        help="JSON {subset: template with {context} and {input}}, e.g. LongBench's config/dataset2prompt.json "
        "(default: this project's templates)",
    )
    p.add_argument(
        "--max_tokens",
        type=int,
        default=None,
        help="max new tokens (default: LongBench's length for the subset, 32..512)",
    )
    p.add_argument(
        "--think",
        action="store_true",
        help="enable_thinking=true in the chat template; the <think> block is never scored",
    )
    p.add_argument("--chunk_filter", default="none", choices=[f for f in FILTERS if f not in _GOLD_FILTERS])
    p.add_argument("--stopping_threshold", type=float, default=-0.5, help="qvalue filter threshold")
    p.add_argument("--qvalue_comparison", default="le", choices=("le", "lt"))
    p.add_argument("--max_retrieval_budget", type=int, default=None, help="retrieval_step filter: keep first N")
    add_backend_args(p)
    return p


def load_prompts(path: str | None) -> dict[str, str]:
    """Templates per subset from ``--prompt_file`` ({} = the project's own)."""
    if path is None:
        return {}
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"prompt file not found: {p} (a JSON object {{subset: template}}, e.g. "
            "LongBench's config/dataset2prompt.json)"
        )
    prompts = json.loads(p.read_text(encoding="utf-8"))
    if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
        raise LogFormatError(f"{p}: expected a JSON object mapping subset names to template strings")
    return prompts


def fill_prompt(dataset: str, context: str, text_in: str, prompts: dict[str, str], prompt_file: str | None) -> str:
    if prompts and dataset not in prompts:
        raise LogFormatError(f"{prompt_file}: no template for subset {dataset!r}")
    template = prompts[dataset] if prompts else subset(dataset).prompt
    try:
        return template.format(context=context, input=text_in)
    except (KeyError, IndexError, ValueError) as exc:
        raise LogFormatError(
            f"{prompt_file or 'built-in prompt'} for {dataset!r}: the template may only use "
            f"{{context}} and {{input}} ({exc!r})"
        ) from None


def _longbench_fields(rec: dict[str, Any], where: str) -> dict[str, Any]:
    lb = rec.get("longbench")
    if not isinstance(lb, dict) or not {"dataset", "all_classes", "length", "input"} <= set(lb):
        raise LogFormatError(
            f"{where}: record {rec.get('id')!r} has no 'longbench' field (dataset, all_classes, "
            "length, input): not a LongBench log; run eval_retriever.py with eval_env=longbench"
        )
    subset(str(lb["dataset"]))
    return lb


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """{subset: {score, n, by_length: {bucket: mean or null}}} over the output lines."""
    out: dict[str, Any] = {}
    for ds in sorted({r["dataset"] for r in rows}):
        mine = [r for r in rows if r["dataset"] == ds]
        out[ds] = {
            "score": mean([r["score"] for r in mine]),
            "n": len(mine),
            "by_length": {
                b: mean([r["score"] for r in mine if length_bucket(r["length"]) == b]) for b in LENGTH_BUCKETS
            },
        }
    return out


def run(args: argparse.Namespace, backend: Any | None = None) -> dict[str, Any]:
    if args.score_predictions:
        return score_prediction_dir(Path(args.score_predictions), args.e)
    log = read_retriever_log(args.retriever_logfile, args.limit)
    records = log.records
    lbs = {record_key(r): _longbench_fields(r, f"{log.path}:{k + 1}") for k, r in enumerate(records)}
    prompts = load_prompts(args.prompt_file)
    spec = FilterSpec.from_args(args)
    out_path = (
        Path(args.output_file_path)
        if args.output_file_path
        else log.path.with_name(f"{log.path.stem}_{model_basename(args.llm_name)}.jsonl")
    )
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with output_lock(out_path, "--output_file_path"):
        settings = {
            "llm_name": args.llm_name,
            "filter": spec.key(),
            "max_tokens": args.max_tokens,
            "think": bool(args.think),
            "prompt_file": args.prompt_file,
        }
        existing = read_keyed_output(out_path, log, "--output_file_path")
        jobs = []
        for r in pending_records(out_path, existing, records, settings, "--output_file_path"):
            lb = lbs[record_key(r)]
            idx, texts = apply_filter(r, spec, sort_by_index=True)
            prompt = fill_prompt(lb["dataset"], "\n".join(texts), str(lb["input"]), prompts, args.prompt_file)
            # one generation length per subset (LongBench's), unless --max_tokens fixes it
            n_new = args.max_tokens if args.max_tokens is not None else subset(lb["dataset"]).max_new_tokens
            jobs.append(Job(r, [{"role": "user", "content": prompt}], n_new, (idx, lb)))

        def make_line(job: Job, out: str) -> dict[str, Any]:
            r, (idx, lb) = job.record, job.info
            answers = [str(r["answer"]), *[str(a) for a in r.get("answer_aliases") or []]]
            pred = strip_think(out)
            return {
                "id": r["id"],
                "dataset": lb["dataset"],
                "pred": pred,
                "answers": answers,
                "all_classes": lb["all_classes"],
                "length": lb["length"],
                "full_model_output": out,
                "retrieved_chunks_idx": r["pred_idx"],
                "filter_idx": idx,
                "max_tokens": job.max_tokens,
                "score": longbench_score(lb["dataset"], pred, answers, lb["all_classes"]),
                "reader_settings": settings,
                "scoring": SCORING_VERSION,
            }

        new = generate_lines(args, backend, jobs, make_line, out_path, bool(args.think), "LongBench reader")
        rows = sample_lines(records, existing + new)
        summary = {"subsets": summarize(rows), "n": len(rows), "retriever_logfile": str(log.path), **settings}
        summary_path = out_path.with_name(f"{out_path.stem}.summary.json")
        write_json_atomic(summary_path, summary)
        for ds, s in summary["subsets"].items():
            print(f"LongBench reader: {ds} score={s['score']:.4f} (x100 = {100 * s['score']:.2f}) n={s['n']}")
        return {**summary, "output": str(out_path), "summary": str(summary_path)}


def score_prediction_dir(folder: Path, by_length: bool) -> dict[str, Any]:
    """LongBench's eval.py on a folder of its prediction files: {subset: score × 100 (2 decimals)}, or
    {subset: {bucket: score}} with ``by_length``; written to ``folder/result.json``."""
    if not folder.is_dir():
        raise FileNotFoundError(
            f"prediction folder not found: {folder} (LongBench's pred/<model>/ with <subset>.jsonl)"
        )
    result: dict[str, Any] = {}
    for path in sorted(folder.glob("*.jsonl")):
        dataset = path.name.split(".")[0]
        rows = read_jsonl(path, ("pred", "answers", "all_classes") + (("length",) if by_length else ()))
        key = dataset.removesuffix("_e")
        scores = [longbench_score(key, str(r["pred"]), r["answers"], r["all_classes"]) for r in rows]
        if by_length:
            result[dataset] = {
                b: _pct([s for s, r in zip(scores, rows) if length_bucket(r["length"]) == b]) for b in LENGTH_BUCKETS
            }
        else:
            result[dataset] = _pct(scores)
    if not result:
        raise FileNotFoundError(f"no <subset>.jsonl prediction files in {folder}")
    write_json_atomic(folder / "result.json", result)
    print(json.dumps(result, ensure_ascii=False, indent=2))
    return result


def _pct(scores: list[float]) -> float | None:
    # an empty LongBench-E bucket is NaN in eval.py; null here (JSON has no NaN)
    return round(100 * sum(scores) / len(scores), 2) if scores else None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return parse_reader_args(build_parser(), argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return run_reader_cli(run, parse_args(argv))


if __name__ == "__main__":
    main(sys.argv[1:])
