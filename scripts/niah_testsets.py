"""Table 1's RULER test sets (NIAH and QA): make them in parallel and check them against the manifest.

    # every NIAH file of the grid that is missing, on all cores, then the check (exit 1 on a mismatch):
    python scripts/niah_testsets.py --jobs 64
    # the QA files (--tasks qa), or both (--tasks all):
    python scripts/niah_testsets.py --jobs 64 --tasks qa
    # only some lengths / tasks (a task, a list, or the group niah / qa):
    python scripts/niah_testsets.py --lengths 4k,16k --tasks niah_multiquery
    python scripts/niah_testsets.py --tasks qa --lengths 4k,16k,32k,128k
    # check only, generate nothing (exit 1 on a missing or different file; QA: data/squad too):
    python scripts/niah_testsets.py --verify --tasks all
    # record the sha256 of files the manifest lacks (and of QA files whose inputs changed):
    python scripts/niah_testsets.py --write-manifest
    # (re)build the shipped SQuAD subset, data/squad, from a snapshot of chrischute/squad:
    python scripts/niah_testsets.py --squad-snapshot <git dir of chrischute/squad>

Grid (docs/DATA_OTHER.md, "Table 1 test sets"): the eight NIAH subtasks × 4K / 16K / 32K / 128K / 1M
GPT-2 tokens, 100 samples each (1M: 30 up to round 5), seed 0, the test books of the shipped
public-domain corpus; RULER's two QA tasks (``qa_squad`` = RULER's qa_1, ``qa_hotpot`` = qa_2;
envs/data/ruler_qa_generator.py) at the same lengths, 100 samples each, from the shipped real
records (data/squad, data/hotpotqa). Files: ``<root>/<task>/test<len>.jsonl.gz`` (the NIAH and
RULER QA loaders' layout: ``envs.data_path=<root>/<task> envs.test_split=test<len>``). The manifest
(``<root>/MANIFEST.json``) holds per file its samples, seed, the one-file command that makes the
same bytes and the sha256 of the uncompressed content (what evaluation meta files call
``data_sha256``), which every run checks the files against; a QA entry also holds the sha256 of
the data files it was made from (``inputs``), so a changed input is named as the cause of a
mismatch, and ``--write-manifest`` re-records such an entry. A file is made in pieces of samples on
separate processes: each sample has its own generator, so the pieces join to the file made at once,
whatever ``--jobs`` (tested), and the first n samples of a file are the file of n samples (tested).
So an entry also holds, under ``prefixes``, the sha256 of the first n samples of a file that was
evaluated at n samples before the grid grew (round 5's 1M files held 30): its records stay
verifiable (``recorded_sha256``), and a file made now must begin with those bytes.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import subprocess
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
from envs.data.niah_generator import TASKS, generate, hf_token_counter, read_corpus, write_jsonl, write_text  # noqa: E402
from envs.data.ruler_qa_generator import QA_TASKS, Pools, generate_qa, load_hotpot, load_squad, squad_subset  # noqa: E402

ROOT = REPO / "data" / "niah" / "ruler_gpt2"
CORPUS = "data/babilong/pg19-with-sentences/test.jsonl.gz"  # the test books (train books make training sets)
TOKENIZER = "gpt2"
SEED = 0
LENGTHS = {"4k": 4096, "16k": 16384, "32k": 32768, "128k": 131072, "1m": 1048576}
SAMPLES = {"4k": 100, "16k": 100, "32k": 100, "128k": 100, "1m": 100}  # 1M: 30 up to round 5 (its ``prefixes``)
QA_SAMPLES = 100  # every length: a QA sample at 1M is a few seconds to evaluate (some 8 000 paragraphs)
GROUPS = {"niah": list(TASKS), "qa": list(QA_TASKS)}
HOTPOT = REPO / "data" / "hotpotqa"  # questions: subset_test.jsonl.gz; paragraphs: every subset_*.jsonl.gz
SQUAD = REPO / "data" / "squad"
SQUAD_FILE = "dev_subset.json.gz"
# The CS224N default project's split of SQuAD v2.0 dev (its 35 articles: 16 with answers, 19 withheld), at
# the snapshot's commit; sha256 of each blob. "Miscellaneous" is the course's own article, in no SQuAD
# split: without it the two files hold SQuAD v2.0 dev's 35 articles, 1 204 paragraphs, 11 873 questions.
SQUAD_SOURCE = {
    "repo": "chrischute/squad",
    "commit": "85623adeb9e6639f145081fea9cae2d8f3a26379",
    "dev": ("data/dev-v2.0.json", "e67e5969b6dc6c1642154740806b79263b77fc048c7c11ee60d534eb48ef81e8"),
    "test": ("data/test-v2.0.json", "236eb1109ecfa6196db7e9a5a7cfb6011e54548fd3e68be4fb298895f33ce898"),
    "drop": ["Miscellaneous"],
}
PIECE_TOKENS = 400_000  # tokens of samples per process job: a 4K file is one job, a 1M file one per sample
NOTE = (
    "lengths are GPT-2 tokens (the shipped tokenizer), not Qwen3-4B's; the essay haystack is public-domain "
    "books standing in for Paul Graham's essays, which may not be redistributed; sha256 = of the uncompressed "
    "content; null = not generated yet; made_with null = recorded from an evaluation's .testset.json "
    "(recorded_from), the versions that made it unknown; prefixes = {n: the sha256 of the file's first n "
    "samples (lines), the content of the file made with n samples, which evaluations of n samples recorded}; "
    "qa_* (RULER's QA tasks from real records): inputs = the sha256 of the data files each was made from"
)
UNREADABLE = (OSError, EOFError, zlib.error)  # a folder, a file that is not gzip, a truncated gzip


def samples(task: str, length: str) -> int:
    return QA_SAMPLES if task in QA_TASKS else SAMPLES[length]


def qa_inputs() -> dict[str, str | None]:
    """The data files a QA test file is made from (repository-relative path -> content sha256)."""
    files = [*sorted(HOTPOT.glob("subset_*.jsonl.gz")), SQUAD / SQUAD_FILE]
    return {str(f.relative_to(REPO)): content_sha256(f) for f in files}


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
    if task in QA_TASKS:
        return f"python scripts/niah_testsets.py --tasks {task} --lengths {length} --root <root>"
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


@lru_cache(maxsize=1)
def _pools() -> Pools:
    return Pools({"hotpotqa": load_hotpot(HOTPOT), "squad": load_squad(SQUAD / SQUAD_FILE)}, _counter())


def _piece(job: tuple[str, str, int, int]) -> list[dict[str, Any]]:
    task, length, start, count = job
    if task in QA_TASKS:
        return generate_qa(task, count, LENGTHS[length], SEED, f"test{length}", _pools(), start)
    corpus = _corpus() if TASKS[task].haystack == "essay" else None
    return generate(task, count, LENGTHS[length], SEED, f"test{length}", _counter(), corpus, "fixed", start)


def make(files: list[tuple[str, str]], root: Path, jobs: int) -> None:
    """Generate ``files`` ((task, length) pairs), their pieces spread over ``jobs`` processes."""
    pieces: list[tuple[str, str, int, int]] = []
    for task, length in files:
        step = max(1, PIECE_TOKENS // LENGTHS[length])
        n = samples(task, length)
        pieces += [(task, length, s, min(step, n - s)) for s in range(0, n, step)]
    pieces.sort(key=lambda p: -LENGTHS[p[1]] * p[3])  # longest first: the pool ends together
    done: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for piece, records in zip(pieces, pool.map(_piece, pieces)):
            done[piece[:3]] = records
        # written on the pool too: a 1M file of 100 samples is up to 530 MB of text, one to two minutes of
        # gzip at level 9 on one core, so the eight written in turn would outlast their generation
        writes = []
        for task, length in files:
            starts = sorted(s for (t, n, s) in done if (t, n) == (task, length))
            records = [r for s in starts for r in done[(task, length, s)]]
            writes.append((pool.submit(write_jsonl, records, root / task / f"test{length}.jsonl.gz"), len(records)))
        for write, count in writes:
            print(f"{write.result()}: {count} samples")
    print(f"made {len(files)} files ({len(pieces)} pieces on {jobs} processes) in {time.time() - t0:.0f}s")


def sample_hashes(path: Path) -> list[str] | None:
    """The sha256 of a test file's first n samples (lines of its uncompressed content) for n = 0 to
    its number of samples, in one pass: the last is the file's sha256 (``content_sha256``'s), the
    list's length less one its number of samples; None if there is no file."""
    if not path.is_file():
        return None
    h = hashlib.sha256()
    out = [h.hexdigest()]
    with gzip.open(path, "rb") as f:
        for line in f:
            h.update(line)
            out.append(h.hexdigest())
    return out


def manifest_entry(task: str, length: str, hashes: list[str] | None) -> dict[str, Any]:
    """The entry of a grid file whose ``sample_hashes`` are ``hashes`` (None: not made)."""
    return {
        "file": f"{task}/test{length}.jsonl.gz",
        "task": task,
        "split": f"test{length}",
        "tokens": LENGTHS[length],
        "samples": samples(task, length),
        "seed": SEED,
        "command": command(task, length),
        "sha256": hashes[-1] if hashes else None,
        **({"inputs": qa_inputs()} if task in QA_TASKS else {}),
    }


def recorded_sha256(entry: dict[str, Any], n: int) -> str:
    """The manifest's sha256 of the first ``n`` samples of ``entry``'s file: the file's own at its
    number of samples, a ``prefixes`` one below it (round 5's 30 at 1M). An evaluation of n samples
    recorded the sha256 of a file of n samples, so it is checked against this (niah_report.py)."""
    known = {int(k): p["sha256"] for k, p in entry.get("prefixes", {}).items()}
    known[int(entry["samples"])] = entry.get("sha256")
    if known.get(n) is None:
        has = "; ".join(f"first {k}: {v or 'not recorded yet (--write-manifest)'}" for k, v in sorted(known.items()))
        raise TestsetError(f"{entry['file']}: the manifest has no sha256 of its first {n} samples ({has})")
    return known[n]


def unrecordable(entry: dict[str, Any], hashes: list[str], prefixes: dict[str, Any]) -> str | None:
    """Why a file whose sha256 the manifest lacks must not be recorded, or None: it holds another
    number of samples than the grid's (a file made before the grid grew), or its first n samples
    are not the recorded ``prefixes`` (the generator no longer makes the samples evaluated)."""
    count = len(hashes) - 1
    if count != entry["samples"]:
        return (
            f"{entry['file']}: {count} samples, the grid's {entry['samples']} (an older file? regenerate it: --force)"
        )
    for n, prefix in prefixes.items():
        got = hashes[int(n)] if int(n) <= count else None
        if got != prefix["sha256"]:
            return (
                f"{entry['file']}: its first {n} samples have sha256 {got}, the manifest {prefix['sha256']} "
                f"({prefix.get('recorded_from', 'recorded')}): the generator no longer makes those samples"
            )
    return None


def changed_inputs(entry: dict[str, Any], recorded: dict[str, Any]) -> list[str]:
    """The input files whose sha256 differs from the one ``recorded`` was made from (QA entries)."""
    now, then = entry.get("inputs") or {}, recorded.get("inputs") or {}
    return sorted(f for f in set(now) | set(then) if now.get(f) != then.get(f))


def verify(files: list[tuple[str, str]], root: Path, manifest: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(mismatches, unrecorded): one line per file that is missing or differs from the manifest's
    sha256 (or, where the manifest has none yet, ``unrecordable``), and one per file whose sha256
    the manifest does not hold yet (``--write-manifest`` records it)."""
    want = {e["file"]: e for e in manifest["files"]}
    bad, unrecorded = [], []
    for task, length in files:
        try:
            hashes = sample_hashes(root / task / f"test{length}.jsonl.gz")
        except UNREADABLE as e:
            bad.append(f"{task}/test{length}.jsonl.gz: cannot be read ({e or type(e).__name__})")
            continue
        entry = manifest_entry(task, length, hashes)
        recorded = want.get(entry["file"], {})
        expected = recorded.get("sha256")
        changed = changed_inputs(entry, recorded) if expected is not None else []
        if entry["sha256"] is None:
            bad.append(f"{entry['file']}: missing")
        elif expected is None:
            if problem := unrecordable(entry, hashes, recorded.get("prefixes", {})):
                bad.append(problem)
            else:
                unrecorded.append(f"{entry['file']}: sha256 {entry['sha256']}")
        elif entry["sha256"] != expected:
            cause = (
                f" (made from other data: {', '.join(changed)} changed since it was recorded; regenerate with "
                "--force, then --write-manifest)"
                if changed
                else ""
            )
            bad.append(f"{entry['file']}: sha256 {entry['sha256']}, manifest {expected}{cause}")
    return bad, unrecorded


def write_manifest(root: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Every file of the grid, with the sha256 of those that exist; a file that differs from a
    recorded sha256 is an error (a manifest is written once, then only checked): a recorded entry
    is kept as it stands, as are the entries of files outside the grid (the training mixture), and
    an entry's ``prefixes``; an ``unrecordable`` file is an error too. A QA entry whose inputs
    changed since it was recorded is recorded anew (its data changed)."""
    from importlib.metadata import version

    # the packages whose random streams, token counts and key lists the bytes depend on (a mismatch
    # elsewhere: compare these first)
    here = {p: version(p) for p in ("numpy", "tokenizers", "wonderwords")}
    old = {e["file"]: e for e in manifest["files"]}
    entries = []
    for length in LENGTHS:
        for task in [*TASKS, *QA_TASKS]:
            try:
                hashes = sample_hashes(root / task / f"test{length}.jsonl.gz")
            except UNREADABLE as e:
                raise TestsetError(f"{task}/test{length}.jsonl.gz cannot be read ({e or type(e).__name__})") from None
            entry = manifest_entry(task, length, hashes)
            was = old.get(entry["file"], {})
            if was.get("sha256") is not None and changed_inputs(entry, was):
                was = {}  # made from other data: the old record describes a file that no longer exists
            if was.get("sha256") is not None and entry["sha256"] not in (None, was["sha256"]):
                raise TestsetError(f"{entry['file']} differs from the manifest's sha256 {was['sha256']}")
            if was.get("sha256") is not None:
                entry = was
            else:
                if "prefixes" in was:  # they keep the records of fewer samples verifiable, before and after
                    entry["prefixes"] = was["prefixes"]
                if entry["sha256"] is not None:
                    if problem := unrecordable(entry, hashes, entry.get("prefixes", {})):
                        raise TestsetError(problem)
                    entry["made_with"] = here
            entries.append(entry)
    grid = {e["file"] for e in entries}
    return {
        "tokenizer": TOKENIZER,
        "corpus": CORPUS,
        "note": NOTE,
        "files": entries + [e for e in manifest["files"] if e["file"] not in grid],
    }


def stale_qa_files(root: Path, manifest: dict[str, Any]) -> list[tuple[str, str]]:
    """QA files on disk whose manifest entry was made from other inputs: ``--write-manifest``
    re-makes them before recording (the file on disk may still be the old one)."""
    old = {e["file"]: e for e in manifest["files"]}
    out = []
    for length in LENGTHS:
        for task in QA_TASKS:
            was = old.get(f"{task}/test{length}.jsonl.gz", {})
            if (root / task / f"test{length}.jsonl.gz").is_file() and was.get("sha256") is not None:
                if changed_inputs({"inputs": qa_inputs()}, was):
                    out.append((task, length))
    return out


def squad_blob(git_dir: str, path: str, sha256: str) -> bytes:
    try:
        blob = subprocess.run(
            ["git", "--git-dir", git_dir, "show", f"{SQUAD_SOURCE['commit']}:{path}"], capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise TestsetError(
            f"{git_dir}: no {path} at {SQUAD_SOURCE['commit']} ({e}); fetch {SQUAD_SOURCE['repo']}"
        ) from None
    if hashlib.sha256(blob).hexdigest() != sha256:
        raise TestsetError(f"{git_dir}: {path} at {SQUAD_SOURCE['commit']} is not the pinned blob (sha256 {sha256})")
    return blob


def build_squad(git_dir: str, out: Path) -> dict[str, Any]:
    """data/squad/dev_subset.json.gz and its MANIFEST.json from a snapshot of chrischute/squad."""
    dev = json.loads(squad_blob(git_dir, *SQUAD_SOURCE["dev"]))
    test = json.loads(squad_blob(git_dir, *SQUAD_SOURCE["test"]))
    subset = squad_subset(dev, test, SQUAD_SOURCE["drop"])
    path = write_text(json.dumps(subset, ensure_ascii=False), out / SQUAD_FILE)
    source = load_squad(path)

    def counts(d: dict[str, Any]) -> dict[str, int]:
        paragraphs = [p for a in d["data"] for p in a["paragraphs"]]
        return {
            "articles": len(d["data"]),
            "paragraphs": len(paragraphs),
            "questions": sum(len(p["qas"]) for p in paragraphs),
        }

    manifest = {
        "dataset": "squad",
        "version": "v2.0 dev",
        "licence": "CC BY-SA 4.0",
        "built_by": "scripts/niah_testsets.py --squad-snapshot",
        "sources": [
            {"repo": SQUAD_SOURCE["repo"], "commit": SQUAD_SOURCE["commit"], "path": p, "sha256": h, **counts(d)}
            for (p, h), d in ((SQUAD_SOURCE["dev"], dev), (SQUAD_SOURCE["test"], test))
        ],
        "left_out": {t: "the CS224N course's own article, in no SQuAD split" for t in SQUAD_SOURCE["drop"]},
        "files": [
            {
                "file": SQUAD_FILE,
                "sha256": content_sha256(path),
                **counts(subset),
                "answerable": len(source.questions),
            }
        ],
    }
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def verify_squad(out: Path) -> list[str]:
    """The shipped SQuAD subset against its MANIFEST.json: one line per finding."""
    try:
        entries = json.loads((out / "MANIFEST.json").read_bytes())["files"]
        want = {str(e["file"]): str(e["sha256"]) for e in entries}
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [f"{out / 'MANIFEST.json'}: cannot be read as this script's manifest ({e or type(e).__name__})"]
    bad = []
    for name, sha256 in want.items():
        try:
            got = content_sha256(out / name)
        except UNREADABLE as e:
            bad.append(f"{out / name}: cannot be read ({e or type(e).__name__})")
            continue
        if got is None:
            bad.append(f"{out / name}: missing")
        elif got != sha256:
            bad.append(f"{out / name}: sha256 {got}, manifest {sha256}")
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: every core)")
    ap.add_argument("--lengths", default=",".join(LENGTHS), help=f"subset of {','.join(LENGTHS)}")
    ap.add_argument(
        "--tasks",
        default="niah",
        help="comma-separated tasks, or a group: niah (the eight; default), qa (the two), all",
    )
    ap.add_argument("--force", action="store_true", help="regenerate files that exist")
    ap.add_argument("--verify", action="store_true", help="check the files and data/squad only; generate nothing")
    ap.add_argument("--write-manifest", action="store_true", help="record the files' sha256 in the manifest")
    ap.add_argument("--squad-snapshot", metavar="GIT_DIR", help="(re)build data/squad from chrischute/squad, then stop")
    args = ap.parse_args(argv)
    if args.squad_snapshot:
        try:
            m = build_squad(args.squad_snapshot, SQUAD)
        except TestsetError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"{SQUAD / SQUAD_FILE}: {m['files'][0]}")
        return 0
    groups = {**GROUPS, "all": [*TASKS, *QA_TASKS]}
    tasks = [t for name in args.tasks.split(",") for t in groups.get(name, [name])]
    lengths = args.lengths.split(",")
    if bad := [t for t in tasks if t not in TASKS and t not in QA_TASKS] + [n for n in lengths if n not in LENGTHS]:
        ap.error(f"unknown task or length: {', '.join(bad)}")
    files = [(t, n) for n in lengths for t in tasks]
    mpath = args.root / "MANIFEST.json"
    try:
        manifest = read_manifest(args.root)
        if args.write_manifest:
            if stale := stale_qa_files(args.root, manifest):
                make(stale, args.root, args.jobs)
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
    if todo and not args.verify:
        make(todo, args.root, args.jobs)
    bad, unrecorded = verify(files, args.root, manifest)
    source_bad = verify_squad(SQUAD) if args.verify and any(t in QA_TASKS for t in tasks) else []  # a QA input
    for line in bad + source_bad:
        print(f"MISMATCH {line}")
    for line in unrecorded:
        print(f"UNRECORDED {line} (record it: --write-manifest, then commit MANIFEST.json)")
    print(f"{len(files) - len(bad) - len(unrecorded)}/{len(files)} files match {mpath}")
    return 1 if bad or source_bad else 0


if __name__ == "__main__":
    sys.exit(main())
