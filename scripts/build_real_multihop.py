#!/usr/bin/env python
"""Build (or verify) the shipped real HotpotQA and MuSiQue subsets (data/hotpotqa, data/musique;
docs/DATA_OTHER.md, "Real HotpotQA and MuSiQue records") from public repository snapshots.

The full dev/train files cannot be downloaded on every machine, but public repositories hold
subsets of the datasets' own records. This script reads them from local git mirrors of those
repositories at pinned commits, keeps only the datasets' own fields (the snapshot owners' added
fields go), removes repeated ids (first source wins), splits them into training and test
questions and writes ``subset_{train,test}.jsonl.gz`` and ``MANIFEST.json`` in each folder.

    python scripts/build_real_multihop.py --verify                  # shipped files vs MANIFEST.json
    python scripts/build_real_multihop.py --ircot <git dir> --migres <git dir> --kag <git dir> [--out data]
    python scripts/build_real_multihop.py --ircot ... --migres ... --kag ... --verify   # rebuild == shipped

``<git dir>``: a bare clone (or ``.git`` folder) of xindili-cmu/anlp-project-multihop, AdelWang/MIGRES and
OpenSPG/KAG holding the commits below.

Split (fixed, documented): HotpotQA's test questions are every record in the original distractor
layout (they keep sentence-level ``supporting_facts``), its training questions the IRCoT-layout
records (paragraph-level ``is_supporting`` only) whose id is not among them. MuSiQue's test
questions are the ``MUSIQUE_TEST`` records with the smallest sha256 of ``"qrag-split:" + id``,
the rest are training questions.
"""

import argparse
import gzip
import hashlib
import io
import json
import subprocess
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUSIQUE_TEST = 200
SPLIT_SALT = "qrag-split:"
HOTPOTQA_LICENCE = "CC BY-SA 4.0"
MUSIQUE_LICENCE = "CC BY 4.0"
HOTPOTQA_FIELDS = ("_id", "question", "answer", "supporting_facts", "context", "type", "level")
IRCOT_FIELDS = ("question_id", "question_text", "answers_objects", "contexts")
MUSIQUE_FIELDS = ("id", "paragraphs", "question", "question_decomposition", "answer", "answer_aliases", "answerable")


@dataclass(frozen=True)
class Source:
    dataset: str  # hotpotqa | musique
    mirror: str  # --ircot | --migres | --kag
    repo: str
    commit: str
    path: str
    layout: str  # hotpotqa (original distractor) | ircot | musique (ans v1.0)
    container: str  # jsonl | array


# Priority order: a repeated id keeps the record of the first source listing it.
SOURCES = (
    Source("hotpotqa", "migres", "AdelWang/MIGRES", "1de6265c9ca1014054d6ba875738e785830908f8",
           "data/hotpot.json", "hotpotqa", "jsonl"),
    Source("hotpotqa", "kag", "OpenSPG/KAG", "e1012d39e41900bb9b0d0b01fbd1a2fdd409ee37",
           "kag/open_benchmark/hotpotqa/data/qa_train.json", "hotpotqa", "array"),
    Source("hotpotqa", "ircot", "xindili-cmu/anlp-project-multihop", "df0d5757f42f098ab6026f40323e91c369307506",
           "processed_data/hotpotqa/dev_subsampled.jsonl", "ircot", "jsonl"),
    Source("musique", "migres", "AdelWang/MIGRES", "1de6265c9ca1014054d6ba875738e785830908f8",
           "data/musique.json", "musique", "jsonl"),
    Source("musique", "kag", "OpenSPG/KAG", "e1012d39e41900bb9b0d0b01fbd1a2fdd409ee37",
           "kag/open_benchmark/musique/data/qa_train.json", "musique", "array"),
    # deleted from KAG in b754d919; its last version is in the parent commit
    Source("musique", "kag", "OpenSPG/KAG", "8901a93e04cd70c90e2fe029bb838a93c58c65ed",
           "kag/examples/musique_pike/solver/data/musique_qa_100.json", "musique", "array"),
)  # fmt: skip
FIELDS = {"hotpotqa": HOTPOTQA_FIELDS, "ircot": IRCOT_FIELDS, "musique": MUSIQUE_FIELDS}
ID_FIELD = {"hotpotqa": "_id", "ircot": "question_id", "musique": "id"}
LICENCE = {"hotpotqa": HOTPOTQA_LICENCE, "musique": MUSIQUE_LICENCE}


def read_blob(git_dir: str, src: Source) -> bytes:
    try:
        return subprocess.run(
            ["git", "--git-dir", git_dir, "show", f"{src.commit}:{src.path}"], capture_output=True, check=True
        ).stdout
    except subprocess.CalledProcessError as e:
        sys.exit(f"error: {src.repo} {src.commit[:10]}:{src.path} not in {git_dir}: {e.stderr.decode().strip()}")


def parse(blob: bytes, src: Source) -> list[dict]:
    text = blob.decode("utf-8")
    if src.container == "array":
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def own_fields(rec: dict, layout: str, where: str) -> dict:
    """The dataset's own fields, in the dataset's order; a missing one is an error."""
    missing = [f for f in FIELDS[layout] if f not in rec]
    if missing:
        sys.exit(f"error: {where}: record {rec.get(ID_FIELD[layout])!r} lacks {missing}")
    return {f: rec[f] for f in FIELDS[layout]}


def split_key(rid: str) -> str:
    return hashlib.sha256((SPLIT_SALT + rid).encode()).hexdigest()


def collect(mirrors: dict[str, str]) -> dict[str, dict]:
    """Per dataset: records (id, layout, record) in source order, and each source's manifest entry."""
    out: dict[str, dict] = {d: {"records": [], "sources": []} for d in ("hotpotqa", "musique")}
    for src in SOURCES:
        blob = read_blob(mirrors[src.mirror], src)
        recs = parse(blob, src)
        seen = {r[0]: r for r in out[src.dataset]["records"]}
        kept = 0
        for rec in recs:
            rec = own_fields(rec, src.layout, f"{src.repo}:{src.path}")
            rid = str(rec[ID_FIELD[src.layout]])
            if rid in seen:
                if seen[rid][1] == src.layout and seen[rid][2] != rec:
                    sys.exit(f"error: id {rid} differs between sources ({src.repo}:{src.path})")
                continue
            seen[rid] = (rid, src.layout, rec)
            out[src.dataset]["records"].append(seen[rid])
            kept += 1
        out[src.dataset]["sources"].append(
            {
                "repo": src.repo,
                "commit": src.commit,
                "path": src.path,
                "layout": src.layout,
                "sha256": hashlib.sha256(blob).hexdigest(),
                "records": len(recs),
                "kept": kept,
            }
        )
    return out


def split(dataset: str, records: list[tuple]) -> dict[str, list[tuple]]:
    if dataset == "hotpotqa":
        test = [r for r in records if r[1] == "hotpotqa"]
    else:
        chosen = set(sorted((r[0] for r in records), key=split_key)[:MUSIQUE_TEST])
        test = [r for r in records if r[0] in chosen]
    test_ids = {r[0] for r in test}
    return {"train": [r for r in records if r[0] not in test_ids], "test": test}


def jsonl_bytes(records: list[tuple]) -> bytes:
    return "".join(json.dumps(r[2], ensure_ascii=False) + "\n" for r in records).encode("utf-8")


def gzip_bytes(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as f:
        f.write(data)
    return buf.getvalue()


def build(mirrors: dict[str, str]) -> dict[str, dict[str, bytes]]:
    """{dataset: {file name: bytes}} (the gzipped splits and MANIFEST.json)."""
    files: dict[str, dict[str, bytes]] = {}
    for dataset, got in collect(mirrors).items():
        parts = split(dataset, got["records"])
        manifest = {
            "dataset": dataset,
            "licence": LICENCE[dataset],
            "built_by": "scripts/build_real_multihop.py",
            "split": (
                "test = the original-layout records (sentence-level supporting_facts); train = the rest"
                if dataset == "hotpotqa"
                else f"test = the {MUSIQUE_TEST} ids with the smallest sha256('{SPLIT_SALT}' + id); train = the rest"
            ),
            "sources": got["sources"],
            "files": [],
        }
        files[dataset] = {}
        for name, recs in parts.items():
            raw = jsonl_bytes(recs)
            files[dataset][f"subset_{name}.jsonl.gz"] = gzip_bytes(raw)
            layouts: dict[str, int] = {}
            for r in recs:
                layouts[r[1]] = layouts.get(r[1], 0) + 1
            manifest["files"].append(
                {
                    "file": f"subset_{name}.jsonl.gz",
                    "sha256": hashlib.sha256(raw).hexdigest(),  # of the uncompressed content
                    "records": len(recs),
                    "layouts": layouts,
                }
            )
        files[dataset]["MANIFEST.json"] = (json.dumps(manifest, indent=1) + "\n").encode()
    return files


def read_shipped(path: Path) -> bytes:
    """The content of a shipped file (gunzipped for ``.gz``); OSError, EOFError or zlib.error when
    it cannot be read."""
    data = path.read_bytes()
    return gzip.decompress(data) if path.name.endswith(".gz") else data


def verify_shipped(out: Path) -> list[str]:
    """Each shipped file against its MANIFEST.json (sha256 of the content, record count): one line
    per file that is missing, cannot be read or differs."""
    errors = []
    for dataset in ("hotpotqa", "musique"):
        mpath = out / dataset / "MANIFEST.json"
        if not mpath.exists():
            errors.append(f"{mpath}: missing")
            continue
        try:
            manifest = json.loads(read_shipped(mpath))
            entries = [(str(e["file"]), str(e["sha256"]), int(e["records"])) for e in manifest["files"]]
        except (OSError, ValueError) as e:
            errors.append(f"{mpath}: cannot be read ({e})")
            continue
        except (KeyError, TypeError):  # valid JSON, not this script's manifest
            errors.append(f"{mpath}: not a manifest of this script (a 'files' list naming file, sha256, records)")
            continue
        for name, sha256, records in entries:
            path = out / dataset / name
            if not path.exists():
                errors.append(f"{path}: missing")
                continue
            try:
                raw = read_shipped(path)
            except (OSError, EOFError, zlib.error) as e:  # a folder, not gzip, truncated
                errors.append(f"{path}: cannot be read ({e or type(e).__name__})")
                continue
            if hashlib.sha256(raw).hexdigest() != sha256:
                errors.append(f"{path}: sha256 differs from MANIFEST.json")
            count = raw.count(b"\n")
            if count != records:
                errors.append(f"{path}: {count} records, MANIFEST.json says {records}")
    return errors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ircot", help="git dir of xindili-cmu/anlp-project-multihop")
    ap.add_argument("--migres", help="git dir of AdelWang/MIGRES")
    ap.add_argument("--kag", help="git dir of OpenSPG/KAG")
    ap.add_argument("--out", type=Path, default=ROOT / "data", help="data folder (default: the repository's)")
    ap.add_argument("--verify", action="store_true", help="check instead of writing")
    args = ap.parse_args(argv)
    mirrors = {"ircot": args.ircot, "migres": args.migres, "kag": args.kag}
    have = [k for k, v in mirrors.items() if v]
    if have and len(have) != 3:
        ap.error("give all three of --ircot, --migres, --kag (or none, with --verify)")
    if not have:
        if not args.verify:
            ap.error("building needs --ircot, --migres and --kag")
        errors = verify_shipped(args.out)
        print("\n".join(errors) or "shipped files match their MANIFEST.json")
        return 1 if errors else 0
    files = build(mirrors)
    errors = []
    for dataset, named in files.items():
        folder = args.out / dataset
        for name, data in named.items():
            path = folder / name
            if args.verify:
                if not path.is_file() or path.read_bytes() != data:
                    errors.append(f"{path}: differs from the rebuild")
            else:
                folder.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                print(f"wrote {path}")
    if args.verify:
        print("\n".join(errors) or "shipped files equal the rebuild from the snapshots")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
