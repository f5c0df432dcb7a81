"""The generation loop the three reader scripts share: build the backend from the common flags,
generate the prepared prompts in batches, let the script score each output, append the lines.

A script keeps what is its own: which records are pending (prompts_and_metrics/reader_io.py),
how a record becomes a prompt (a ``Job``) and how an output becomes a scored line."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prompts_and_metrics.reader_io import append_jsonl, sample_key


@dataclass(frozen=True)
class Job:
    """One pending retriever record, ready to generate: its chat ``messages``, the number of new
    tokens, and ``info`` = whatever the script needs again to build the output line (the filter's
    kept chunks, the record's benchmark, ...)."""

    record: dict[str, Any]
    messages: list[dict[str, str]]
    max_tokens: int
    info: Any = None


def add_backend_args(p: argparse.ArgumentParser) -> None:
    """The flags ``build_reader_backend`` reads, plus ``--limit`` (docs/READERS.md). A script
    whose defaults differ sets them with ``p.set_defaults`` (--help shows the value in force)."""
    p.add_argument(
        "--backend",
        default="auto",
        choices=("auto", "vllm", "transformers", "server"),
        help="auto = vllm if importable, else transformers",
    )
    p.add_argument(
        "--batch_size",
        type=int,
        default=64,
        help="records per generation call (and per output flush; transformers also batches by this)",
    )
    p.add_argument("--limit", type=int, default=None, help="only the first N samples of the log")
    p.add_argument("--gpu_util", type=float, default=0.9, help="vLLM gpu_memory_utilization (default %(default)s)")
    p.add_argument("--max_model_len", type=int, default=32000, help="context window (default %(default)s)")
    p.add_argument(
        "--num_threads",
        type=int,
        default=None,
        help="transformers backend on CPU: torch intra-op threads (default: torch's choice)",
    )
    p.add_argument("--tensor_parallel_size", type=int, default=1)
    p.add_argument("--data_parallel_size", type=int, default=1)
    p.add_argument(
        "--dtype", default="auto", help="model dtype (auto: bfloat16 on GPU; float32 on CPU for transformers)"
    )
    p.add_argument("--api_base_url", default="http://localhost:10001/v1", help="server backend")
    p.add_argument(
        "--trust_remote_code",
        action="store_true",
        help="run the model repository's own Python code (vllm/transformers; off by default)",
    )
    p.add_argument("--max_at_same_time", type=int, default=20, help="server backend concurrency")
    p.add_argument(
        "--timeout_s", type=float, default=120.0, help="server backend per-request timeout (default %(default)s)"
    )
    p.add_argument("--max_retries", type=int, default=2, help="server backend retries")


def build_reader_backend(args: argparse.Namespace) -> Any:
    """The generation backend from the flags every reader script has (docs/READERS.md); vLLM's
    ``--dtype auto`` means bfloat16. Failures raise: a reader never scores a missing answer."""
    from prompts_and_metrics.llm import build_backend

    dtype = "bfloat16" if args.backend in ("vllm", "auto") and args.dtype == "auto" else args.dtype
    return build_backend(
        args.backend,
        args.llm_name,
        tensor_parallel_size=args.tensor_parallel_size,
        data_parallel_size=args.data_parallel_size,
        gpu_memory_utilization=args.gpu_util,
        max_model_len=args.max_model_len,
        dtype=dtype,
        batch_size=args.batch_size,
        num_threads=args.num_threads,
        api_base_url=args.api_base_url,
        max_at_same_time=args.max_at_same_time,
        timeout_s=args.timeout_s,
        max_retries=args.max_retries,
        on_failure="raise",
        trust_remote_code=args.trust_remote_code,
    )


def generate_lines(
    args: argparse.Namespace,
    backend: Any | None,
    jobs: list[Job],
    make_line: Callable[[Job, str], dict[str, Any]],
    out_path: Path,
    enable_thinking: bool | None,
    desc: str,
    grow_context: bool = True,
) -> list[dict[str, Any]]:
    """Generate every job greedily and append one line per job to ``out_path`` (``make_line``'s
    scored line plus the record's ``sample_key``), flushed after each ``--batch_size`` jobs: a
    killed run loses at most the batch in progress. Jobs are grouped by their token budget (in
    order of first appearance). With ``grow_context`` a backend that can (vllm, transformers)
    gets its context window raised to fit the longest prompt of a group plus its budget.
    ``backend`` None builds one from ``args``, only when there is something to generate.
    Returns the lines written."""
    if not jobs:
        return []
    from tqdm import tqdm

    if backend is None:
        backend = build_reader_backend(args)
    groups: dict[int, list[Job]] = {}
    for job in jobs:
        groups.setdefault(job.max_tokens, []).append(job)
    written: list[dict[str, Any]] = []
    bar = tqdm(total=len(jobs), desc=desc, unit="q")
    for n_new, group in groups.items():
        if grow_context and hasattr(backend, "ensure_context") and hasattr(backend, "count_tokens"):
            backend.ensure_context(max(backend.count_tokens(j.messages, enable_thinking) for j in group) + n_new)
        for start in range(0, len(group), args.batch_size):
            chunk = group[start : start + args.batch_size]
            outs = backend.generate([j.messages for j in chunk], n_new, 0.0, 1.0, enable_thinking=enable_thinking)
            new = [{**make_line(job, out), "sample_key": sample_key(job.record)} for job, out in zip(chunk, outs)]
            append_jsonl(out_path, new)
            written.extend(new)
            bar.update(len(chunk))
    bar.close()
    return written
