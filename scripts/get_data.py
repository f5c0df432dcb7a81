"""Download a benchmark the paper used from its official source, verify it and lay it out where
the presets read it (configs/paths/default.yaml: ``data_root`` = ../datasets, ``ruler_root`` =
../RULER next to the project; docs/REPRODUCE.md names every source).

    python scripts/get_data.py hotpotqa          # or musique, 2wikimultihopqa, longbench, pg19, ruler, babi
    python scripts/get_data.py all
    python scripts/get_data.py hotpotqa --data-root /data/qrag --ruler-root /data/RULER
    python scripts/get_data.py hotpotqa --verify-only   # check files already in place

Every file is downloaded to ``<folder>/.download/`` (a partial download is a ``.part`` file,
replaced on the next attempt), its sha256 printed and, where the official source publishes none,
its record count checked against the official one. Files are laid out only once all of a
benchmark's files pass; a failure is one line naming the file, and removes the downloads so that
the next attempt fetches them afresh. ``<folder>/SOURCES.json`` records the
URL, sha256 and record count of everything laid out. ``--mirror URL`` fetches every file from
``URL/<file name>`` instead (a local copy of the sources; the tests use it).
"""

import argparse
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CHUNK = 1 << 20


class DataError(RuntimeError):
    """A download or a verification failed: one line saying which file and what to do."""


@dataclass(frozen=True)
class Remote:
    """One file of an official source; ``name`` is what it is saved as in ``.download/``."""

    url: str
    name: str
    sha256: str | None = None  # where the source publishes one


@dataclass(frozen=True)
class Expect:
    """A laid-out file (relative to the benchmark folder), its format and official record count."""

    path: str
    kind: str  # json (one array) | jsonl
    count: int


@dataclass
class Benchmark:
    root: str  # data_root | ruler_root
    folder: str  # below the root
    remotes: list[Remote]
    # archive member (or downloaded file name) -> path in the folder; None: every file as is
    layout: dict[str, str] | None
    expect: list[Expect] = field(default_factory=list)
    after: Callable[[Path, argparse.Namespace], None] | None = None  # build step once verified


# -- verification ---------------------------------------------------------------------------
def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def count_records(path: Path, kind: str) -> int:
    """Records of a JSON array or JSON Lines file (``.gz`` read too); a file that does not parse
    is an error naming it (and the line)."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            if kind == "json":
                data = json.load(f)
                if not isinstance(data, list):
                    raise DataError(f"{path}: expected a JSON array of records, found {type(data).__name__}")
                return len(data)
            n = 0
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    try:
                        json.loads(line)
                    except json.JSONDecodeError as e:
                        raise DataError(f"{path}:{lineno}: not a JSON record ({e.msg})") from None
                    n += 1
            return n
    except (json.JSONDecodeError, UnicodeDecodeError, EOFError, OSError) as e:
        raise DataError(f"{path}: not readable as {kind} ({e}): delete it and download again") from None


def verify(folder: Path, expect: Sequence[Expect]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in expect:
        path = folder / e.path
        if not path.is_file():
            raise DataError(f"{path} is missing: run `python scripts/get_data.py` for this benchmark")
        n = count_records(path, e.kind)
        if n != e.count:
            raise DataError(
                f"{path} holds {n} records, the official file {e.count}: an incomplete or different "
                f"download; delete it (and {folder / '.download'}) and run again"
            )
        counts[e.path] = n
        print(f"  ok  {e.path}: {n} records")
    return counts


# -- downloading ----------------------------------------------------------------------------
def source_url(remote: Remote, mirror: str | None) -> str:
    return f"{mirror.rstrip('/')}/{remote.name}" if mirror else remote.url


def download(remote: Remote, dest: Path, mirror: str | None) -> str:
    """``dest`` (kept if present and, where known, its sha256 matches); returns its sha256."""
    if dest.is_file():
        digest = sha256(dest)
        if remote.sha256 in (None, digest):
            print(f"  have {dest.name} (sha256 {digest})")
            return digest
        dest.unlink()
    url = source_url(remote, mirror)
    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    print(f"  get  {url}")
    try:
        req = urllib.request.Request(url, headers={"User-Agent": "qrag-get-data"})
        with urllib.request.urlopen(req, timeout=60) as resp, open(part, "wb") as out:
            total = int(resp.headers.get("Content-Length") or 0)
            done = 0
            while block := resp.read(CHUNK):
                out.write(block)
                done += len(block)
                if total:
                    print(f"\r       {done / 2**20:.0f} / {total / 2**20:.0f} MiB", end="", flush=True)
            if total:
                print()
            if total and done != total:
                raise DataError(f"{url}: the connection closed after {done} of {total} bytes; run again")
    except OSError as e:
        part.unlink(missing_ok=True)
        raise DataError(f"cannot download {url} ({e}); check the network, or pass --mirror") from None
    digest = sha256(part)
    if remote.sha256 is not None and digest != remote.sha256:
        part.unlink()
        raise DataError(f"{url}: sha256 {digest} is not the published {remote.sha256}; run again")
    part.replace(dest)
    print(f"       sha256 {digest}")
    return digest


def inside(stage: Path, target: str) -> Path:
    """``stage / target``, refused unless it stays below ``stage`` (a layout comes from an index
    that a mirror serves: a name with ``..`` or an absolute one must not write elsewhere)."""
    path = stage / target
    if not path.resolve().is_relative_to(stage.resolve()):
        raise DataError(f"{target!r} would be written outside {stage}: refused, nothing written")
    return path


# what a damaged member raises as it is read: a bad CRC, a truncated or invalid deflate stream, a
# damaged compression-method field, a damaged offset
ZIP_DAMAGE = (zipfile.BadZipFile, EOFError, zlib.error, NotImplementedError, ValueError)


def lay_out(downloads: Path, stage: Path, b: Benchmark) -> None:
    """Copy the downloaded files (or archive members, matched by file name) to their places
    below ``stage``."""
    targets = [*(b.layout or {}).values(), *(r.name for r in b.remotes)]
    for target in targets:  # every target checked before the first is written
        inside(stage, target)
    for remote in b.remotes:
        src = downloads / remote.name
        if zipfile.is_zipfile(src):
            try:
                with zipfile.ZipFile(src) as z:
                    for member in z.namelist():
                        target = (b.layout or {}).get(Path(member).name)
                        if target is not None and not member.endswith("/"):
                            _write_atomic(stage / target, z.open(member))
            except ZIP_DAMAGE as e:
                raise DataError(f"{src}: a damaged archive ({e}); delete it and run again") from None
        else:
            target = (b.layout or {}).get(remote.name, remote.name)
            with open(src, "rb") as f:
                _write_atomic(stage / target, f)


def _write_atomic(path: Path, stream: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as out:
        shutil.copyfileobj(stream, out, CHUNK)
    tmp.replace(path)


def fetch(name: str, b: Benchmark, roots: dict[str, Path], args: argparse.Namespace) -> Path:
    """Download, lay out in a staging folder, verify there, then move into place: a file that
    fails verification never reaches the folder the presets read."""
    folder = roots[b.root] / b.folder
    print(f"{name}: {folder}")
    sources = []
    if args.verify_only:
        counts = verify(folder, b.expect)
    else:
        downloads = folder / ".download"
        try:
            for r in b.remotes:
                sources.append({"url": r.url, "file": r.name, "sha256": download(r, downloads / r.name, args.mirror)})
        except DataError:  # nothing fetched (offline): no empty folders left behind
            for empty in (downloads, folder):
                if empty.is_dir() and not any(empty.iterdir()):
                    empty.rmdir()
            raise
        stage = downloads / "staged"
        shutil.rmtree(stage, ignore_errors=True)
        lay_out(downloads, stage, b)
        try:
            counts = verify(stage, b.expect)
        except DataError as e:  # a truncated or foreign download: fetched afresh next time
            shutil.rmtree(downloads, ignore_errors=True)
            raise DataError(f"{e} (the downloads were removed: run again to fetch them afresh)") from None
        for f in sorted(p for p in stage.rglob("*") if p.is_file()):
            target = folder / f.relative_to(stage)
            target.parent.mkdir(parents=True, exist_ok=True)
            f.replace(target)
    if b.after is not None:
        b.after(folder, args)
    if sources:
        manifest = {"benchmark": name, "sources": sources, "records": counts}
        (folder / "SOURCES.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        if not args.keep_downloads:
            shutil.rmtree(folder / ".download", ignore_errors=True)
    return folder


# -- derived sets ---------------------------------------------------------------------------
def build_ruler(folder: Path, args: argparse.Namespace) -> None:
    """RULER's QA task 2 (HotpotQA) in RULER's format from the verified HotpotQA dev set, and the
    NIAH multivalue sets with the project's reimplementation of RULER's generator (docs/DATA_OTHER.md)."""
    sys.path.insert(0, str(REPO))
    from envs.data.multihop_generator import make_ruler_qa

    records = json.loads((folder / "sources" / "hotpot_dev_distractor_v1.json").read_text(encoding="utf-8"))
    qa = Path(args.data_root) / "ruler_qa" / "qa_2.jsonl"
    qa.parent.mkdir(parents=True, exist_ok=True)
    tmp = qa.with_name(f".{qa.name}.tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in make_ruler_qa(records, 0)), "utf-8")
    tmp.replace(qa)
    print(f"  made {qa} ({len(records)} records, RULER QA format)")
    if args.niah_train or args.niah_test:
        cmd = [sys.executable, str(REPO / "scripts" / "generate_niah.py"), "--task", "niah_multivalue"]
        cmd += ["--out", str(folder / "mv_niah_4k" / "niah_multivalue"), "--tokenizer", args.niah_tokenizer]
        cmd += [f"--train={args.niah_train}"] if args.niah_train else []
        cmd += [f"--test={args.niah_test}"] if args.niah_test else []
        print("  run  " + " ".join(cmd))
        subprocess.run(cmd, check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def build_pg19(folder: Path, args: argparse.Namespace) -> None:
    """PG19 books -> the BabiLong noise corpus the loader reads (docs/DATA_BABILONG.md):
    ``babilong/pg19-with-sentences/{train,test}.jsonl.gz``, one book per line as
    ``{"title", "sentences"}``, split into sentences as scripts/build_noise_corpus.py does. PG19's
    test books become the test noise, its validation (and any train) books the training noise."""
    sys.path.insert(0, str(REPO / "scripts"))
    from build_noise_corpus import strip_gutenberg, to_sentences

    out = Path(args.data_root) / "babilong" / "pg19-with-sentences"
    out.mkdir(parents=True, exist_ok=True)
    for split, sources in (("train", ("validation", "train")), ("test", ("test",))):
        books = sorted(p for src in sources for p in (folder / src).glob("*.txt"))
        if not books:
            raise DataError(f"{folder}: no PG19 {'/'.join(sources)} books to build the {split} noise from")
        path = out / f"{split}.jsonl.gz"
        tmp = path.with_name(f".{path.name}.tmp")
        with gzip.open(tmp, "wt", encoding="utf-8") as f:
            for book in books:
                text = strip_gutenberg(book.read_text(encoding="utf-8", errors="replace"))
                sentences = to_sentences(text.splitlines())
                f.write(json.dumps({"title": f"PG19 {book.stem}", "sentences": sentences}, ensure_ascii=False) + "\n")
        tmp.replace(path)
        print(f"  made {path} ({len(books)} books)")


# -- the official sources -------------------------------------------------------------------
HOTPOT = "http://curtis.ml.cmu.edu/datasets/hotpot"
LONGBENCH_COUNTS = {
    **dict.fromkeys(
        "narrativeqa qasper multifieldqa_zh hotpotqa 2wikimqa musique dureader gov_report qmsum multi_news "
        "vcsum trec triviaqa samsum lsht passage_count passage_retrieval_en passage_retrieval_zh".split(),
        200,
    ),
    "multifieldqa_en": 150,
    "lcc": 500,
    "repobench-p": 500,
}
PG19 = "https://storage.googleapis.com/deepmind-gutenberg"


PG19_BOOK = re.compile(r"(test|validation|train)/[0-9]+")


def pg19_book_list(text: str | None) -> list[str]:
    """The ``split/<id>`` names of ``--pg19-books`` or of an index; any other name (``..``, a
    folder, an absolute path) is refused before anything is fetched."""
    books = [b for b in (text or "").split(",") if b]
    bad = [b for b in books if not PG19_BOOK.fullmatch(b)]
    if bad:
        raise DataError(f"PG19 book name {bad[0]!r} is not split/<number> (split: test, validation or train)")
    return books


def benchmarks(args: argparse.Namespace) -> dict[str, Benchmark]:
    pg19_books = pg19_book_list(args.pg19_books)
    return {
        "hotpotqa": Benchmark(
            "data_root",
            "hotpotqa",
            [
                Remote(f"{HOTPOT}/hotpot_train_v1.1.json", "hotpot_train_v1.1.json"),
                Remote(f"{HOTPOT}/hotpot_dev_distractor_v1.json", "hotpot_dev_distractor_v1.json"),
                Remote(f"{HOTPOT}/hotpot_dev_fullwiki_v1.json", "hotpot_dev_fullwiki_v1.json"),
            ],
            None,
            [
                Expect("hotpot_train_v1.1.json", "json", 90447),
                Expect("hotpot_dev_distractor_v1.json", "json", 7405),
                Expect("hotpot_dev_fullwiki_v1.json", "json", 7405),
            ],
        ),
        "musique": Benchmark(
            "data_root",
            "musique",
            [
                Remote(
                    "https://drive.usercontent.google.com/download?id=1tGdADlNjWFaHLeZZGShh2IRcpO6Lv24h"
                    "&export=download&confirm=t",
                    "musique_v1.0.zip",
                )
            ],
            {
                f"data/{n}": n
                for n in (f"musique_{v}_v1.0_{s}.jsonl" for v in ("ans", "full") for s in ("train", "dev"))
            },
            [
                Expect("musique_ans_v1.0_train.jsonl", "jsonl", 19938),
                Expect("musique_ans_v1.0_dev.jsonl", "jsonl", 2417),
                Expect("musique_full_v1.0_train.jsonl", "jsonl", 39876),
                Expect("musique_full_v1.0_dev.jsonl", "jsonl", 4834),
            ],
        ),
        "2wikimultihopqa": Benchmark(
            "data_root",
            "2wikimultihopqa",
            [Remote("https://www.dropbox.com/s/ms2m13252h6xubs/data_ids_april7.zip?dl=1", "data_ids_april7.zip")],
            {n: n for n in ("train.json", "dev.json", "test.json", "id_aliases.json")},
            [
                Expect("train.json", "json", 167454),
                Expect("dev.json", "json", 12576),
                Expect("test.json", "json", 12576),
            ],
        ),
        "longbench": Benchmark(
            "data_root",
            "longbench",
            [Remote("https://huggingface.co/datasets/THUDM/LongBench/resolve/main/data.zip", "data.zip")],
            {f"{s}{e}.jsonl": f"{s}{e}.jsonl" for s in LONGBENCH_COUNTS for e in ("", "_e")},
            [Expect(f"{s}.jsonl", "jsonl", n) for s, n in LONGBENCH_COUNTS.items()],
        ),
        "pg19": Benchmark(
            "data_root",
            "pg19",
            [Remote(f"{PG19}/{book}.txt", f"{book.replace('/', '__')}.txt") for book in pg19_books],
            {f"{book.replace('/', '__')}.txt": f"{book}.txt" for book in pg19_books},
            [],
            build_pg19,
        ),
        "ruler": Benchmark(
            "ruler_root",
            ".",
            [Remote(f"{HOTPOT}/hotpot_dev_distractor_v1.json", "hotpot_dev_distractor_v1.json")],
            {"hotpot_dev_distractor_v1.json": "sources/hotpot_dev_distractor_v1.json"},
            [Expect("sources/hotpot_dev_distractor_v1.json", "json", 7405)],
            build_ruler,
        ),
    }


def default_roots() -> dict[str, Path]:
    """configs/paths/default.yaml's roots, relative to the project folder as the configs take them."""
    text = (REPO / "configs" / "paths" / "default.yaml").read_text(encoding="utf-8")
    roots = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("data_root", "ruler_root"):
            roots[key] = (REPO / value.split("#")[0].strip().replace("${paths.root_dir}/", "")).resolve()
    return roots


NAMES = ("hotpotqa", "musique", "2wikimultihopqa", "longbench", "pg19", "ruler", "babi")


def main(argv: Sequence[str] | None = None) -> list[Path]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("benchmark", choices=(*NAMES, "all"))
    roots = default_roots()
    ap.add_argument("--data-root", default=str(roots["data_root"]), help="paths.data_root (default %(default)s)")
    ap.add_argument("--ruler-root", default=str(roots["ruler_root"]), help="paths.ruler_root (default %(default)s)")
    ap.add_argument("--mirror", default=None, help="fetch every file from MIRROR/<file name> instead")
    ap.add_argument("--verify-only", action="store_true", help="download nothing; check the files in place")
    ap.add_argument("--keep-downloads", action="store_true", help="keep <folder>/.download/ after laying out")
    ap.add_argument(
        "--pg19-books",
        default=None,
        help="pg19: comma-separated split/id list (e.g. test/10146,train/1000); default: every test and "
        "validation book of PG19's bucket index",
    )
    ap.add_argument("--niah-train", default="1000:4096", help="ruler: N:TOKENS of the NIAH train set ('' = none)")
    ap.add_argument("--niah-test", default="500:4096", help="ruler: N:TOKENS[,...] of the NIAH test sets ('' = none)")
    ap.add_argument("--niah-tokenizer", default="minilm", help="ruler: the reader's tokenizer (generate_niah.py)")
    args = ap.parse_args(argv)
    roots = {"data_root": Path(args.data_root), "ruler_root": Path(args.ruler_root)}
    names = [n for n in NAMES if n != "babi"] + ["babi"] if args.benchmark == "all" else [args.benchmark]
    done = []
    try:
        for name in names:
            if name == "babi":  # the real bAbI files: scripts/build_babi.py fetches and checks them
                out = roots["data_root"] / "babilong" / "babi"
                subprocess.run([sys.executable, str(REPO / "scripts" / "build_babi.py"), "--out", str(out)], check=True)
                done.append(out)
                continue
            b = benchmarks(args)[name]
            if name == "pg19" and not b.remotes:
                b = benchmarks(_with_pg19_list(args))[name]
            done.append(fetch(name, b, roots, args))
    except DataError as e:
        raise SystemExit(f"error: {e}") from None
    except OSError as e:  # a read-only or full data root
        raise SystemExit(f"error: {e}") from None
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"error: {' '.join(map(str, e.cmd))} failed (exit {e.returncode})") from None
    return done


def _with_pg19_list(args: argparse.Namespace) -> argparse.Namespace:
    """PG19's test books (the noise of test haystacks) and validation books (training noise), by
    the official metadata: ``{PG19}/{split}/`` listed through the bucket's JSON index."""
    books = []
    for split in ("test", "validation"):
        url = f"https://storage.googleapis.com/storage/v1/b/deepmind-gutenberg/o?prefix={split}/&fields=items(name)"
        if args.mirror:
            url = f"{args.mirror.rstrip('/')}/pg19_{split}_index.json"
        try:
            with urllib.request.urlopen(url, timeout=60) as resp:
                items = json.load(resp).get("items", [])
            names = [i["name"] for i in items]
            if not all(isinstance(n, str) for n in names):
                raise TypeError("a name that is not a string")
        except OSError as e:
            raise DataError(f"cannot list PG19 books at {url} ({e}); pass --pg19-books or --mirror") from None
        except (ValueError, AttributeError, TypeError, KeyError) as e:  # not the bucket's JSON index
            raise DataError(f"{url} is not a PG19 bucket index ({type(e).__name__}): pass --pg19-books") from None
        books += [n[: -len(".txt")] for n in names if n.endswith(".txt")]
    return argparse.Namespace(**{**vars(args), "pg19_books": ",".join(pg19_book_list(",".join(books)))})


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except SystemExit as e:
        if isinstance(e.code, str):  # one error line, and the project's status for a refused input
            print(e.code, file=sys.stderr)
            raise SystemExit(2) from None
        raise
