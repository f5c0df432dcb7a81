"""File handling shared by the three reader scripts: retriever logs in, resumable JSONL out.

Every retriever record and every reader output line is identified by its sample key
(docs/READERS.md, *Sample keys*): a log read here holds each sample once, and resume skips
exactly the samples whose key already has an output line."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runstore import FolderLock, StorageError, append_line

REQUIRED_FIELDS = ("id", "question", "answer", "sf_idx", "pred_idx", "sf_texts", "pred_texts")


class LogFormatError(ValueError):
    """A malformed retriever log or reader output line; names the file and the line number."""


def read_jsonl(path: str | Path, required: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Records of a JSONL file (blank lines skipped). Raises FileNotFoundError naming the path and
    what produces it, or LogFormatError naming file:line for bad JSON / missing fields."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"retriever log not found: {p} (expected the JSONL written by eval_retriever.py, "
            "e.g. <run>/eval_seed0_ns50.jsonl)"
        )
    records = []
    with p.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                if not line.endswith("\n"):  # only the last line can lack it: torn by a killed writer
                    print(f"warning: {p}:{lineno}: skipped a half-written last line", file=sys.stderr)
                    break
                raise LogFormatError(f"{p}:{lineno}: not valid JSON ({exc.msg})") from None
            if not isinstance(rec, dict):
                raise LogFormatError(f"{p}:{lineno}: expected a JSON object, got {type(rec).__name__}")
            missing = [k for k in required if k not in rec]
            if missing:
                raise LogFormatError(f"{p}:{lineno}: record lacks field(s) {', '.join(missing)}")
            records.append(rec)
    return records


def read_output(path: str | Path) -> list[dict[str, Any]]:
    """Existing reader output (for resume). A truncated last line (killed mid-write) is dropped and
    the file rewritten without it; a malformed line elsewhere is an error."""
    p = Path(path)
    if not p.is_file():
        return []
    lines = p.read_text(encoding="utf-8").splitlines()
    records = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if lineno == len(lines):
                with p.open("w", encoding="utf-8") as fh:
                    fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
                break
            raise LogFormatError(f"{p}:{lineno}: malformed output line; delete the file to start over") from None
    return records


def rescore_outputs(
    path: str | Path, records: list[dict[str, Any]], version: int, rescore: Callable[[dict[str, Any]], dict[str, Any]]
) -> list[dict[str, Any]]:
    """Bring reader output lines written by an older scorer up to ``version``: every line whose
    ``scoring`` differs is passed to ``rescore`` (which recomputes its metrics from the stored
    model output and returns the updated line, or raises ValueError when it cannot) and the
    file is rewritten atomically. Lines already at ``version`` are kept as they are."""
    stale = [k for k, r in enumerate(records) if r.get("scoring") != version]
    if not stale:
        return records
    p = Path(path)
    out = list(records)
    for k in stale:
        try:
            out[k] = {**rescore(records[k]), "scoring": version}
        except (KeyError, ValueError) as exc:
            raise LogFormatError(
                f"{p}: line {k + 1} was written by an older scorer and cannot be rescored ({exc}); "
                "delete the file to evaluate afresh"
            ) from None
    tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in out), encoding="utf-8")
    os.replace(tmp, p)
    print(f"[reader] {p.name}: rescored {len(stale)} line(s) written by an older scorer (scoring v{version})")
    return out


def sample_key(rec: dict[str, Any]) -> dict[str, Any]:
    """The key of a retriever record (stored as ``sample_key`` in each reader output line): its
    ``index`` (position in the seed-permuted test set, on every record since eval_retriever.py's
    record_format 2), else ``source`` and ``id`` (combined open-QA sets repeat ids across
    sources), else ``id``. Ids compare as text, as they always have."""
    if "index" in rec:
        return {"index": rec["index"]}
    if "source" in rec:
        return {"source": str(rec["source"]), "id": str(rec["id"])}
    return {"id": str(rec["id"])}


def key_text(key: dict[str, Any]) -> str:
    """A sample key as one hashable string (the same key always gives the same text)."""
    return json.dumps(key, sort_keys=True, ensure_ascii=False)


def record_key(rec: dict[str, Any]) -> str:
    return key_text(sample_key(rec))


def line_key(line: dict[str, Any]) -> str | None:
    """The sample an output line belongs to; None for a line of an older reader whose id names no
    sample of the log (such a line is kept in the file but never counted)."""
    return key_text(line["sample_key"]) if "sample_key" in line else None


@dataclass(frozen=True)
class RetrieverLog:
    """A retriever log read once per sample: ``samples`` = every sample of the file in file order,
    ``records`` = the first ``--limit`` of them (all without a limit)."""

    path: Path
    samples: list[dict[str, Any]]
    records: list[dict[str, Any]]


def read_retriever_log(path: str | Path, limit: int | None = None) -> RetrieverLog:
    """The retriever log at ``path`` with each sample once. Two records with the same key are the
    same sample written twice (logs written before record_format 2 by two concurrent runs): the
    first is kept and one warning line says how many copies were dropped. Records with different
    keys are all kept, whatever their ids."""
    p = Path(path)
    rows = read_jsonl(p, REQUIRED_FIELDS)
    seen: set[str] = set()
    samples = []
    for rec in rows:
        k = record_key(rec)
        if k not in seen:
            seen.add(k)
            samples.append(rec)
    if len(samples) < len(rows):
        print(
            f"[reader] warning: {p}: {len(rows) - len(samples)} duplicate record(s) dropped "
            "(the same sample written twice; its first record is read)",
            file=sys.stderr,
        )
    return RetrieverLog(p, samples, samples if limit is None else samples[:limit])


def read_keyed_output(out_path: Path, log: RetrieverLog, output_flag: str) -> list[dict[str, Any]]:
    """The output lines of ``out_path`` (see ``read_output``), each with its ``sample_key``.
    Lines written before output lines carried one have an ``id`` only (the synthetics reader also
    copied its record's fields): they are given the key of the log sample they name, their own
    fields when those name a sample, else their id. An id that several samples of the log share
    (ids repeated across sources) cannot be mapped and stops the run."""
    lines = read_output(out_path)
    known = {record_key(r) for r in log.samples}
    by_id: dict[str, list[dict[str, Any]]] = {}
    for rec in log.samples:
        by_id.setdefault(str(rec["id"]), []).append(sample_key(rec))
    for lineno, line in enumerate(lines, 1):
        if "sample_key" in line:
            continue
        if record_key(line) in known:
            line["sample_key"] = sample_key(line)
            continue
        found = by_id.get(str(line.get("id")), [])
        if len(found) > 1:
            raise LogFormatError(
                f"{out_path}:{lineno}: this output was written before reader lines carried a sample key, and "
                f"its id {line.get('id')!r} names {len(found)} samples of {log.path}, so it cannot tell which "
                f"was scored; delete it or choose another {output_flag}"
            )
        if found:
            line["sample_key"] = found[0]
    return lines


def pending_records(
    out_path: Path,
    existing: list[dict[str, Any]],
    records: list[dict[str, Any]],
    settings: dict[str, Any],
    output_flag: str,
) -> list[dict[str, Any]]:
    """The retriever records that ``existing`` (keyed output lines) holds no line for yet. An
    output made with other reader settings stops the run: mixing them would average two
    different readers."""
    for r in existing:
        if r.get("reader_settings") != settings:
            raise SystemExit(
                f"{out_path} already holds results made with {r.get('reader_settings')}, not {settings}; "
                f"choose another {output_flag} or delete it"
            )
    done = {line_key(r) for r in existing}
    return [r for r in records if record_key(r) not in done]


def sample_lines(records: list[dict[str, Any]], lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One output line per record of ``records`` that has one (the first written for its key),
    in file order: what the summary averages."""
    wanted = {record_key(r) for r in records}
    rows: dict[str, dict[str, Any]] = {}
    for line in lines:
        k = line_key(line)
        if k in wanted and k not in rows:
            rows[k] = line
    return list(rows.values())


def append_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> None:
    """A batch of output lines appended whole; on a full disk the file is cut back to where it was
    and the run stops with one line (the lines of earlier batches are kept and resume skips them)."""
    text = "\n".join(json.dumps(r, ensure_ascii=False) for r in records)
    if text:
        append_line(Path(path), text)


def write_json_atomic(path: str | Path, obj: Any) -> None:
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, p)


def context_key(logfile: str | Path, records: list[dict[str, Any]]) -> str:
    """Digits after ``ns`` in the log name, else the split (``eval_seed0_<split>.jsonl`` or the
    records' ``split`` field), else ``unknown``."""
    name = Path(logfile).name
    m = re.search(r"ns(\d+)", name)
    if m:
        return m.group(1)
    m = re.match(r"eval_seed\d+_(.+)\.jsonl$", name)
    if m:
        return m.group(1)
    splits = {str(r["split"]) for r in records if r.get("split") is not None}
    if len(splits) == 1:
        return splits.pop()
    return "unknown"


def model_basename(llm_name: str) -> str:
    return os.path.basename(str(llm_name).rstrip("/")) or str(llm_name)


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def parse_reader_args(
    parser: argparse.ArgumentParser, argv: list[str] | None = None, presets: dict[str, dict[str, Any]] | None = None
) -> argparse.Namespace:
    """Parse a reader CLI. ``--api_key`` is refused (the key comes from the environment only);
    with ``presets`` a ``--reader`` preset (paper | ref, DESIGN §9.6) sets the defaults of other
    flags, and flags given explicitly still win."""
    from prompts_and_metrics.llm.server_backend import refuse_key_argument

    refuse_key_argument(sys.argv[1:] if argv is None else argv)
    if presets:
        parser.add_argument(
            "--reader",
            default="paper",
            choices=sorted(presets),
            help="defaults preset: paper (App. G) or ref (the reference scripts' values)",
        )
        known, _ = parser.parse_known_args(argv)
        parser.set_defaults(**presets[known.reader])
    return parser.parse_args(argv)


def run_reader_cli(run: Callable[[argparse.Namespace], dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Run a reader script, turning user errors (missing or malformed log, bad flag) into a
    one-line ``error: ...`` exit instead of a traceback."""
    try:
        return run(args)
    except (FileNotFoundError, LogFormatError, ValueError, StorageError) as exc:
        raise SystemExit(f"error: {exc}") from None


def output_lock(out_path: Path, output_flag: str) -> FolderLock:
    """One reader per output file: a second process on the same output would score every pending
    sample again and interleave its lines with the first one's (``flock``, released on kill -9)."""
    return FolderLock(
        out_path.with_name(f".{out_path.name}.lock"),
        f"reader output {out_path}",
        f"wait for that reader to end, or choose another {output_flag}",
    )
