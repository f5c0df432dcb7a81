"""Rebuild and verify the real bAbI v1.2 qa1-qa5 files shipped under data/babilong/babi/.

    python scripts/build_babi.py --verify                    # check the shipped files against MANIFEST.json
    python scripts/build_babi.py                             # download the official tarball, rebuild, verify
    python scripts/build_babi.py --tarball tasks_1-20_v1-2.tar.gz   # the same from a local copy
    python scripts/build_babi.py --snapshot <dir>            # from a public copy of the release (no tarball)

The shipped set is en-10k's train and test file of each of qa1-qa5, except qa3's train file: the
public snapshot lacks en-10k's qa3 train file, so the shipped qa3 train file is the real qa3
training material both sources hold, the stories of ``en/qa3_three-supporting-facts_train.txt``
(1k release) followed by those of ``en-valid-10k/qa3_valid.txt`` that are not already there
(385 stories, 1 925 questions, none in the test file). Both sources therefore give byte-identical
files, checked against the sha256 of the uncompressed content in MANIFEST.json. A rebuild (and its
download) happens in a temporary folder beside ``--out``; its files replace those in ``--out`` only
once they verify, so a damaged or foreign source leaves the shipped files as they were.

``--snapshot`` takes a folder holding the release's ``en/``, ``en-10k/`` and ``en-valid-10k/``
folders (e.g. ``data/`` of a clone of github.com/ghundal93/QA-Experiments-with-DMN), or a bare
git directory of that repository (read with ``git cat-file``).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zlib
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "data/babilong/babi"
TARBALL_URL = "http://www.thespermwhale.com/jaseweston/babi/tasks_1-20_v1-2.tar.gz"
SNAPSHOT_REPO = "https://github.com/ghundal93/QA-Experiments-with-DMN"
TASKS = (
    "qa1_single-supporting-fact",
    "qa2_two-supporting-facts",
    "qa3_three-supporting-facts",
    "qa4_two-arg-relations",
    "qa5_three-arg-relations",
)
QA3 = "qa3_three-supporting-facts"
# Release paths (relative to the release's root folder) that make up each shipped file.
QA3_TRAIN_PARTS = (f"en/{QA3}_train.txt", "en-valid-10k/qa3_valid.txt")


def shipped_files() -> dict[str, tuple[str, ...]]:
    """Shipped file name -> the release files it is built from, in order."""
    files: dict[str, tuple[str, ...]] = {}
    for task in TASKS:
        for split in ("train", "test"):
            name = f"{task}_{split}.txt"
            files[name] = QA3_TRAIN_PARTS if (task, split) == (QA3, "train") else (f"en-10k/{name}",)
    return files


def split_stories(text: str) -> list[str]:
    """A bAbI file's stories (each a block of lines starting at line number 1)."""
    stories: list[list[str]] = []
    for line in text.splitlines(keepends=True):
        if line.split(" ", 1)[0] == "1" or not stories:
            stories.append([])
        stories[-1].append(line)
    return ["".join(s) for s in stories]


def concat_unique(texts: list[str]) -> str:
    """The stories of ``texts`` in order, each story kept once (the 1k and valid-10k files share some)."""
    seen: set[str] = set()
    out: list[str] = []
    for text in texts:
        for story in split_stories(text):
            if story not in seen:
                seen.add(story)
                out.append(story)
    return "".join(out)


def count(text: str) -> tuple[int, int]:
    """(stories, questions) of a bAbI file's text."""
    return len(split_stories(text)), sum("\t" in line for line in text.splitlines())


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tarball_reader(path: Path) -> Callable[[str], str]:
    tar = tarfile.open(path)
    root = "tasks_1-20_v1-2"

    def read(rel: str) -> str:
        name = f"{root}/{rel}"
        try:
            member = tar.getmember(name)
        except KeyError:
            raise FileNotFoundError(f"{path}: no {name}") from None
        if not member.isfile():  # a link is not the release's file (and is never followed)
            raise tarfile.TarError(f"{path}: {name} is not a regular file")
        return tar.extractfile(member).read().decode("utf-8")

    return read


def snapshot_reader(where: Path) -> Callable[[str], str]:
    if (where / "HEAD").is_file() and (where / "objects").is_dir():  # a bare git directory

        def read(rel: str) -> str:
            proc = subprocess.run(
                ["git", f"--git-dir={where}", "cat-file", "-p", f"HEAD:data/{rel}"], capture_output=True
            )
            if proc.returncode != 0 or not proc.stdout:
                raise FileNotFoundError(f"{where}: data/{rel} missing from the snapshot")
            return proc.stdout.decode("utf-8")

        return read

    def read_dir(rel: str) -> str:
        path = where / rel
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: --snapshot needs the release's en/, en-10k/, en-valid-10k/")
        return path.read_text(encoding="utf-8")

    return read_dir


def download(url: str, dest: Path) -> Path:
    print(f"downloading {url} -> {dest}", flush=True)
    with urllib.request.urlopen(url, timeout=60) as resp, open(dest, "wb") as f:
        total = int(resp.headers.get("Content-Length") or 0)
        done = 0
        while chunk := resp.read(1 << 20):
            f.write(chunk)
            done += len(chunk)
            print(f"\r  {done >> 20} / {total >> 20 or '?'} MiB", end="", flush=True)
    print()
    return dest


def build(read: Callable[[str], str], source: str, out: Path) -> dict:
    """Write every shipped file (gzipped, deterministic bytes) and return the manifest."""
    out_dir = out / "en-10k"
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest: dict = {"source": source, "files": []}
    for name, parts in shipped_files().items():
        text = concat_unique([read(p) for p in parts]) if len(parts) > 1 else read(parts[0])
        stories, questions = count(text)
        (out_dir / f"{name}.gz").write_bytes(gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0))
        manifest["files"].append(
            {
                "file": f"en-10k/{name}.gz",
                "built_from": [f"tasks_1-20_v1-2/{p}" for p in parts],
                "sha256": sha256(text),
                "stories": stories,
                "questions": questions,
            }
        )
        print(f"{out_dir / name}.gz: {stories} stories, {questions} questions", flush=True)
    return manifest


def verify(out: Path, manifest: dict) -> list[str]:
    """Problems found comparing the files under ``out`` with ``manifest`` (empty = all good)."""
    problems = []
    for entry in manifest["files"]:
        path = out / entry["file"]
        if not path.is_file():
            problems.append(f"{path}: missing")
            continue
        try:
            text = gzip.decompress(path.read_bytes()).decode("utf-8")
        except (OSError, EOFError, UnicodeDecodeError, zlib.error) as e:
            problems.append(f"{path}: not a gzipped UTF-8 bAbI file ({type(e).__name__})")
            continue
        if sha256(text) != entry["sha256"]:
            problems.append(f"{path}: sha256 {sha256(text)[:12]}… differs from the manifest's {entry['sha256'][:12]}…")
        elif count(text) != (entry["stories"], entry["questions"]):
            problems.append(
                f"{path}: {count(text)} (stories, questions), manifest says {(entry['stories'], entry['questions'])}"
            )
    return problems


# What a damaged source raises while it is read: a truncated or foreign archive, a member that is
# not UTF-8, a download cut short.
SOURCE_ERRORS = (OSError, EOFError, tarfile.TarError, UnicodeDecodeError, zlib.error)


def rebuild(args: argparse.Namespace, manifest: dict) -> list[str]:
    """Download (if needed) and build into a temporary sibling of ``--out``, verify there, and only
    then move the files into ``--out``: a source that fails leaves the shipped files as they were
    and no partial download in the data folder. Returns the problems (empty = moved into place)."""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{args.out.name}.build-", dir=args.out.parent))
    try:
        if args.snapshot:
            read, source = snapshot_reader(args.snapshot), f"public snapshot {SNAPSHOT_REPO}"
        else:
            tar = args.tarball or download(args.url, work / "tasks_1-20_v1-2.tar.gz")
            read, source = tarball_reader(tar), f"official tarball {TARBALL_URL}"
        built = build(read, source, work / "out")
        problems = verify(work / "out", built if args.write_manifest else manifest)
        if problems:
            return [f"{p} (built from {source}; {args.out} left as it was)" for p in problems]
        for entry in built["files"]:
            target = args.out / entry["file"]
            target.parent.mkdir(parents=True, exist_ok=True)
            (work / "out" / entry["file"]).replace(target)
        if args.write_manifest:
            (args.out / "MANIFEST.json").write_text(json.dumps(built, indent=1) + "\n")
        return []
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--verify", action="store_true", help="only check the shipped files against MANIFEST.json")
    src.add_argument("--tarball", type=Path, help="a local tasks_1-20_v1-2.tar.gz")
    src.add_argument("--snapshot", type=Path, help="a folder or bare git dir of a public copy of the release")
    ap.add_argument("--url", default=TARBALL_URL, help="where to download the official tarball")
    ap.add_argument("--out", type=Path, default=OUT, help="where to write the files (default: the shipped folder)")
    ap.add_argument("--write-manifest", action="store_true", help="record the built files as the new MANIFEST.json")
    args = ap.parse_args()
    manifest_path = OUT / "MANIFEST.json"
    expected = json.loads(manifest_path.read_text())
    if not args.verify:
        try:
            problems = rebuild(args, expected)
        except SOURCE_ERRORS as e:
            print(f"error: {e}; {args.out} left as it was", file=sys.stderr)
            return 2
        for p in problems:
            print(f"error: {p}", file=sys.stderr)
        if problems:
            return 1
        expected = json.loads(manifest_path.read_text())  # --write-manifest may have replaced it
    problems = verify(args.out, expected)
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    if problems:
        print(
            "the files differ from the released bAbI v1.2 set; rebuild them with this script (see --help)",
            file=sys.stderr,
        )
        return 1
    n = sum(e["questions"] for e in expected["files"])
    print(f"verified {len(expected['files'])} files ({n} questions) in {args.out} against {manifest_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
