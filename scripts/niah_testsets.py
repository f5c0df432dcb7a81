"""Table 1's RULER NIAH test sets: make them in parallel and check them against the manifest.

    # every file of the grid that is missing, on all cores, then the check (exit 1 on a mismatch):
    python scripts/niah_testsets.py --jobs 64
    # only some lengths / tasks:
    python scripts/niah_testsets.py --lengths 4k,16k --tasks niah_multiquery
    # record the sha256 of files the manifest lacks (none today: every file of the grid is recorded):
    python scripts/niah_testsets.py --write-manifest

Grid (docs/DATA_OTHER.md, "Table 1 test sets"): the eight subtasks × 4K / 16K / 32K / 128K / 1M
GPT-2 tokens, 100 samples each up to 128K and 30 at 1M, seed 0, the test books of the shipped
public-domain corpus. Files: ``<root>/<task>/test<len>.jsonl.gz`` (the NIAH loader's layout:
``envs.data_path=<root>/<task> envs.test_split=test<len>``). The manifest
(``<root>/MANIFEST.json``) holds per file its samples, seed, the one-file command that makes the
same bytes (scripts/generate_niah.py) and the sha256 of the uncompressed content (what
evaluation meta files call ``data_sha256``), which every run checks the files against. A file is
made in pieces of samples on separate processes: each sample has its own generator, so the pieces
join to the file made at once, whatever ``--jobs`` (tested).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from envs.data.common import content_sha256  # noqa: E402
from envs.data.niah_generator import TASKS, generate, hf_token_counter, read_corpus, write_jsonl  # noqa: E402

ROOT = REPO / "data" / "niah" / "ruler_gpt2"
CORPUS = "data/babilong/pg19-with-sentences/test.jsonl.gz"  # the test books (train books make training sets)
TOKENIZER = "gpt2"
SEED = 0
LENGTHS = {"4k": 4096, "16k": 16384, "32k": 32768, "128k": 131072, "1m": 1048576}
SAMPLES = {"4k": 100, "16k": 100, "32k": 100, "128k": 100, "1m": 30}
PIECE_TOKENS = 400_000  # tokens of samples per process job: a 4K file is one job, a 1M file one per sample
NOTE = (
    "lengths are GPT-2 tokens (the shipped tokenizer), not Qwen3-4B's; the essay haystack is public-domain "
    "books standing in for Paul Graham's essays, which may not be redistributed; sha256 = of the uncompressed "
    "content; null = not generated yet; made_with null = recorded from an evaluation's .testset.json "
    "(recorded_from), the versions that made it unknown"
)
UNREADABLE = (OSError, EOFError, zlib.error)  # a folder, a file that is not gzip, a truncated gzip


class TestsetError(ValueError):
    """A manifest or test-file path this script cannot work with: one line saying which and why."""


def read_manifest(root: Path) -> dict[str, Any]:
    """``<root>/MANIFEST.json`` (no file: an empty manifest), its entries checked for what is read here."""
    mpath = root / "MANIFEST.json"
    if not mpath.exists():
        return {"files": []}
    try:
        manifest = json.loads(mpath.read_bytes())
    except (OSError, ValueError) as e:  # ValueError: not JSON, not UTF-8
        raise TestsetError(f"{mpath} cannot be read ({e}); restore it (git checkout) or remove it") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, list) or not all(isinstance(e, dict) and isinstance(e.get("file"), str) for e in files):
        raise TestsetError(f"{mpath} is not a test-set manifest (a 'files' list of entries naming their 'file')")
    return manifest


def command(task: str, length: str) -> str:
    """The one-file command that writes the same bytes."""
    return (
        f"python scripts/generate_niah.py --task {task} --out <root>/{task} "
        f"--test {SAMPLES[length]}:{LENGTHS[length]} --seed {SEED} --tokenizer {TOKENIZER} --corpus {CORPUS} --gzip"
    )


@lru_cache(maxsize=1)
def _counter():
    return hf_token_counter(TOKENIZER)


@lru_cache(maxsize=1)
def _corpus():
    return read_corpus(REPO / CORPUS)


def _piece(job: tuple[str, str, int, int]) -> list[dict[str, Any]]:
    task, length, start, count = job
    corpus = _corpus() if TASKS[task].haystack == "essay" else None
    return generate(task, count, LENGTHS[length], SEED, f"test{length}", _counter(), corpus, "fixed", start)


def make(files: list[tuple[str, str]], root: Path, jobs: int) -> None:
    """Generate ``files`` ((task, length) pairs), their pieces spread over ``jobs`` processes."""
    pieces: list[tuple[str, str, int, int]] = []
    for task, length in files:
        step = max(1, PIECE_TOKENS // LENGTHS[length])
        pieces += [(task, length, s, min(step, SAMPLES[length] - s)) for s in range(0, SAMPLES[length], step)]
    pieces.sort(key=lambda p: -LENGTHS[p[1]] * p[3])  # longest first: the pool ends together
    done: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for piece, records in zip(pieces, pool.map(_piece, pieces)):
            done[piece[:3]] = records
    for task, length in files:
        starts = sorted(s for (t, n, s) in done if (t, n) == (task, length))
        records = [r for s in starts for r in done[(task, length, s)]]
        path = write_jsonl(records, root / task / f"test{length}.jsonl.gz")
        print(f"{path}: {len(records)} samples")
    print(f"made {len(files)} files ({len(pieces)} pieces on {jobs} processes) in {time.time() - t0:.0f}s")


def manifest_entry(task: str, length: str, root: Path) -> dict[str, Any]:
    path = root / task / f"test{length}.jsonl.gz"
    return {
        "file": f"{task}/test{length}.jsonl.gz",
        "task": task,
        "split": f"test{length}",
        "tokens": LENGTHS[length],
        "samples": SAMPLES[length],
        "seed": SEED,
        "command": command(task, length),
        "sha256": content_sha256(path),
    }


def verify(files: list[tuple[str, str]], root: Path, manifest: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(mismatches, unrecorded): one line per file that is missing or differs from the manifest's
    sha256, and one per file whose sha256 the manifest does not hold yet (``--write-manifest``
    records it)."""
    want = {e["file"]: e for e in manifest["files"]}
    bad, unrecorded = [], []
    for task, length in files:
        try:
            entry = manifest_entry(task, length, root)
        except UNREADABLE as e:
            bad.append(f"{task}/test{length}.jsonl.gz: cannot be read ({e or type(e).__name__})")
            continue
        expected = want.get(entry["file"], {}).get("sha256")
        if entry["sha256"] is None:
            bad.append(f"{entry['file']}: missing")
        elif expected is None:
            unrecorded.append(f"{entry['file']}: sha256 {entry['sha256']}")
        elif entry["sha256"] != expected:
            bad.append(f"{entry['file']}: sha256 {entry['sha256']}, manifest {expected}")
    return bad, unrecorded


def write_manifest(root: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Every file of the grid, with the sha256 of those that exist; a file that differs from a
    recorded sha256 is an error (a manifest is written once, then only checked): a recorded entry
    is kept as it stands, as are the entries of files outside the grid (the training mixture)."""
    from importlib.metadata import version

    # the packages whose random streams, token counts and key lists the bytes depend on (a mismatch
    # elsewhere: compare these first)
    here = {p: version(p) for p in ("numpy", "tokenizers", "wonderwords")}
    old = {e["file"]: e for e in manifest["files"]}
    entries = []
    for length in LENGTHS:
        for task in TASKS:
            try:
                entry = manifest_entry(task, length, root)
            except UNREADABLE as e:
                raise TestsetError(f"{task}/test{length}.jsonl.gz cannot be read ({e or type(e).__name__})") from None
            was = old.get(entry["file"], {})
            if was.get("sha256") is not None and entry["sha256"] not in (None, was["sha256"]):
                raise TestsetError(f"{entry['file']} differs from the manifest's sha256 {was['sha256']}")
            if was.get("sha256") is not None:
                entry = was
            elif entry["sha256"] is not None:
                entry["made_with"] = here
            entries.append(entry)
    grid = {e["file"] for e in entries}
    return {
        "tokenizer": TOKENIZER,
        "corpus": CORPUS,
        "note": NOTE,
        "files": entries + [e for e in manifest["files"] if e["file"] not in grid],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: every core)")
    ap.add_argument("--lengths", default=",".join(LENGTHS), help=f"subset of {','.join(LENGTHS)}")
    ap.add_argument("--tasks", default="all", help="comma-separated subset of the eight, or all")
    ap.add_argument("--force", action="store_true", help="regenerate files that exist")
    ap.add_argument("--write-manifest", action="store_true", help="record the files' sha256 in the manifest")
    args = ap.parse_args(argv)
    tasks = list(TASKS) if args.tasks == "all" else args.tasks.split(",")
    lengths = args.lengths.split(",")
    if bad := [t for t in tasks if t not in TASKS] + [n for n in lengths if n not in LENGTHS]:
        ap.error(f"unknown task or length: {', '.join(bad)}")
    files = [(t, n) for n in lengths for t in tasks]
    mpath = args.root / "MANIFEST.json"
    try:
        manifest = read_manifest(args.root)
        if args.write_manifest:
            manifest = write_manifest(args.root, manifest)
            mpath.parent.mkdir(parents=True, exist_ok=True)
            mpath.write_text(json.dumps(manifest, indent=1) + "\n")
            recorded = sum(e["sha256"] is not None for e in manifest["files"])
            print(f"{mpath}: {recorded}/{len(manifest['files'])} recorded")
            return 0
        paths = {(t, n): args.root / t / f"test{n}.jsonl.gz" for t, n in files}
        if taken := [str(p) for p in paths.values() if p.exists() and not p.is_file()]:
            # refused before generating: the write would fail only after the whole file is made
            raise TestsetError(f"not a file: {', '.join(taken)}; move it away, then rerun")
    except TestsetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    todo = [f for f, p in paths.items() if args.force or not p.is_file()]
    if todo:
        make(todo, args.root, args.jobs)
    bad, unrecorded = verify(files, args.root, manifest)
    for line in bad:
        print(f"MISMATCH {line}")
    for line in unrecorded:
        print(f"UNRECORDED {line} (record it: --write-manifest, then commit MANIFEST.json)")
    print(f"{len(files) - len(bad) - len(unrecorded)}/{len(files)} files match {mpath}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
