#!/usr/bin/env python
"""Build (or verify) the shipped real HotpotQA, MuSiQue and 2WikiMultihopQA subsets (data/hotpotqa,
data/musique, data/2wikimultihopqa; docs/DATA_OTHER.md, "Real multi-hop records") from public
repository snapshots.

The full dev/train files cannot be downloaded on every machine, but public repositories hold
subsets of the datasets' own records. This script reads them from local git clones of those
repositories at pinned commits, brings every record to the dataset's own layout with only the
dataset's own fields (the snapshot owners' added fields go), checks that a question held by several
sources is the same question with the same gold paragraphs in each (any difference stops the build),
removes repeated ids and repeated question texts (first source wins), splits the questions into
training, validation and test questions and writes ``subset_{train,validation,test}.jsonl.gz`` and
``MANIFEST.json`` in each folder.

    python scripts/build_real_multihop.py --verify                       # shipped files vs MANIFEST.json
    python scripts/build_real_multihop.py --mirrors <folder> [--out data]   # rebuild from the snapshots
    python scripts/build_real_multihop.py --mirrors <folder> --verify       # rebuild == shipped

``<folder>`` holds one git clone (bare or not) per repository of ``SOURCES``, named ``<owner>+<name>``
(``git clone --bare https://github.com/<owner>/<name> <folder>/<owner>+<name>``), each holding the
pinned commit.

Split (fixed; ``split_key(id)`` = sha256 of ``"qrag-split:" + id``): the test questions are round 5's
where the dataset shipped before (HotpotQA: every original-layout record of the round-5 sources;
MuSiQue: the 200 smallest keys among the round-5 sources' records; the test files are unchanged), and
2Wiki's the 300 smallest keys; the validation questions are the 100 smallest keys among the rest, and
the rest are training questions. No id and no question text is in two splits.
"""

import argparse
import gzip
import hashlib
import io
import json
import re
import subprocess
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from envs.data.hotpotqa import hotpot_record_to_sample  # noqa: E402
from envs.data.ircot import ircot_record_to_sample  # noqa: E402

SPLIT_SALT = "qrag-split:"
VALIDATION = 100  # questions per dataset for model selection (issue 44: at least 50)
MUSIQUE_TEST = 200  # round 5's rule, among the round-5 sources' records
TWOWIKI_TEST = 300
DATASETS = ("hotpotqa", "musique", "2wikimultihopqa")
SPLITS = ("train", "validation", "test")
LICENCE = {"hotpotqa": "CC BY-SA 4.0", "musique": "CC BY 4.0", "2wikimultihopqa": "Apache-2.0"}
HOTPOTQA_FIELDS = ("_id", "question", "answer", "supporting_facts", "context", "type", "level")
IRCOT_FIELDS = ("question_id", "question_text", "answers_objects", "contexts")
MUSIQUE_FIELDS = ("id", "paragraphs", "question", "question_decomposition", "answer", "answer_aliases", "answerable")
TWOWIKI_FIELDS = (
    "_id", "type", "question", "context", "entity_ids", "supporting_facts", "evidences", "answer", "evidences_id",
    "answer_id",
)  # fmt: skip
# the layout a record is written in (after ``to_own_layout``)
FIELDS = {"hotpotqa": HOTPOTQA_FIELDS, "ircot": IRCOT_FIELDS, "musique": MUSIQUE_FIELDS, "2wiki": TWOWIKI_FIELDS}
ID_FIELD = {"hotpotqa": "_id", "ircot": "question_id", "musique": "id", "2wiki": "_id"}
QUESTION_FIELD = {"hotpotqa": "question", "ircot": "question_text", "musique": "question", "2wiki": "question"}


@dataclass(frozen=True)
class Source:
    dataset: str  # hotpotqa | musique | 2wikimultihopqa
    repo: str
    commit: str
    path: str
    # hotpotqa (original distractor layout) | hf_hotpotqa (the Hugging Face layout of the same
    # records: supporting_facts {title, sent_id}, context {title, sentences}, id) | ircot |
    # musique (ans v1.0) | 2wiki
    layout: str
    # jsonl | array | data_array ({"data": [...]}) | columns (pandas to_json: {field: {row: value}})
    container: str
    round5: bool = False  # in the files round 5 ran on (their test questions stay the test questions)
    rename: tuple[tuple[str, str], ...] = ()  # (snapshot's field, dataset's field)


# Priority order: a repeated id or question keeps the record of the first source listing it.
# HotpotQA's IRCoT-layout source comes last, so that a question some source holds in the original
# layout keeps its sentence-level supporting_facts.
SOURCES = (
    Source("hotpotqa", "AdelWang/MIGRES", "1de6265c9ca1014054d6ba875738e785830908f8",
           "data/hotpot.json", "hotpotqa", "jsonl", round5=True),
    Source("hotpotqa", "OpenSPG/KAG", "e1012d39e41900bb9b0d0b01fbd1a2fdd409ee37",
           "kag/open_benchmark/hotpotqa/data/qa_train.json", "hotpotqa", "array", round5=True),
    Source("hotpotqa", "ayvan180/infodecay", "caf4cf6b530fb029a884e1ff38477db3f4a8b5d7",
           "data/hotpotqa_dev_500.jsonl", "hf_hotpotqa", "jsonl"),
    Source("hotpotqa", "omarelansary/Balanced_KG_Wikontic", "e22dcb57955373a0fda29a0a51bd8fb8e237377d",
           "datasets/hotpotqa200.json", "hotpotqa", "array"),
    Source("hotpotqa", "zirconiumnmlee/TCA", "9034c9d04e7857494f85f03f669e69857a149e82",
           "input/corpus/hotpotqa_test/hotpot_test_200.json", "hotpotqa", "array"),
    Source("hotpotqa", "zirconiumnmlee/TCA", "9034c9d04e7857494f85f03f669e69857a149e82",
           "input/corpus/hotpotqa/hotpot_dev_200.json", "hotpotqa", "array"),
    Source("hotpotqa", "xindili-cmu/anlp-project-multihop", "df0d5757f42f098ab6026f40323e91c369307506",
           "processed_data/hotpotqa/dev_subsampled.jsonl", "ircot", "jsonl", round5=True),
    Source("musique", "AdelWang/MIGRES", "1de6265c9ca1014054d6ba875738e785830908f8",
           "data/musique.json", "musique", "jsonl", round5=True),
    Source("musique", "OpenSPG/KAG", "e1012d39e41900bb9b0d0b01fbd1a2fdd409ee37",
           "kag/open_benchmark/musique/data/qa_train.json", "musique", "array", round5=True),
    # deleted from KAG in b754d919; its last version is in the parent commit
    Source("musique", "OpenSPG/KAG", "8901a93e04cd70c90e2fe029bb838a93c58c65ed",
           "kag/examples/musique_pike/solver/data/musique_qa_100.json", "musique", "array", round5=True),
    Source("musique", "zirconiumnmlee/TCA", "9034c9d04e7857494f85f03f669e69857a149e82",
           "input/corpus/musique/musique_dev_200.json", "musique", "array"),
    Source("musique", "zirconiumnmlee/TCA", "9034c9d04e7857494f85f03f669e69857a149e82",
           "input/corpus/musique_test/musique_test_200.json", "musique", "array"),
    Source("musique", "omarelansary/Balanced_KG_Wikontic", "e22dcb57955373a0fda29a0a51bd8fb8e237377d",
           "datasets/musique_200_test.json", "musique", "data_array"),
    Source("2wikimultihopqa", "zirconiumnmlee/TCA", "9034c9d04e7857494f85f03f669e69857a149e82",
           "input/corpus/2wiki/2wiki_dev_200.json", "2wiki", "array"),
    Source("2wikimultihopqa", "zirconiumnmlee/TCA", "9034c9d04e7857494f85f03f669e69857a149e82",
           "input/corpus/2wiki_test/2wiki_test_200.json", "2wiki", "array"),
    # a pandas frame: ``_1`` holds the dataset's _id, ``id`` the row number in the official dev file
    Source("2wikimultihopqa", "saptarshi059/TTS-project", "1322e0245882eeb3eb8d8e205ab8538bea735878",
           "sampled_data/2wikimultihopqa/sampled_ds.json", "2wiki", "columns", rename=(("_1", "_id"),)),
)  # fmt: skip


@dataclass(frozen=True)
class Excluded:
    dataset: str
    repo: str
    commit: str
    path: str
    why: str


# Listed in issue 44 and left out: a joblib pickle (unpickling runs code named by the file). Its ids
# are read from the raw bytes (pickle's BINUNICODE strings of 24 hex digits, HotpotQA's _id form),
# never unpickled, and checked to be among the kept records, so leaving it out loses no question.
EXCLUDED = (
    Excluded("hotpotqa", "noahshinn/reflexion", "218cf0ef1df84b05ce379dd4a8e47f17766733a0",
             "hotpotqa_runs/data/hotpot-qa-distractor-sample.joblib",
             "a pickle (loading it would run code the file names); every id it holds, read from its bytes "
             "without unpickling, is a kept record"),
)  # fmt: skip
PICKLED_HOTPOT_ID = re.compile(rb"X\x18\x00\x00\x00([0-9a-f]{24})")


class BuildError(Exception):
    """A snapshot that cannot be read or disagrees with another: the build stops, naming it."""


@dataclass
class Rec:
    rid: str
    layout: str  # hotpotqa | ircot | musique | 2wiki
    record: dict[str, Any]
    source: Source


@dataclass
class Collected:
    records: list[Rec] = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)
    excluded: list[dict[str, Any]] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)


def clone_dir(mirrors: Path, repo: str) -> Path:
    return mirrors / repo.replace("/", "+")


def read_blob(mirrors: Path, repo: str, commit: str, path: str) -> bytes:
    where = clone_dir(mirrors, repo)
    try:
        return subprocess.run(
            ["git", "-C", str(where), "show", f"{commit}:{path}"], capture_output=True, check=True
        ).stdout
    except (subprocess.CalledProcessError, FileNotFoundError, NotADirectoryError) as e:
        detail = e.stderr.decode().strip() if isinstance(e, subprocess.CalledProcessError) else str(e)
        raise BuildError(
            f"{repo} {commit[:10]}:{path} not in {where} ({detail}); clone it there: "
            f"git clone --bare https://github.com/{repo} {where}"
        ) from None


def parse(blob: bytes, src: Source) -> list[dict[str, Any]]:
    where = f"{src.repo}:{src.path}"
    try:
        text = blob.decode("utf-8")
        if src.container == "jsonl":
            recs = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            data = json.loads(text)
            if src.container == "data_array":
                data = data["data"]
            elif src.container == "columns":
                rows = list(next(iter(data.values())))
                data = [{name: column[row] for name, column in data.items()} for row in rows]
            recs = data
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError, StopIteration) as e:
        raise BuildError(f"{where}: not a {src.container} file of records ({type(e).__name__}: {e})") from None
    if not isinstance(recs, list) or not all(isinstance(r, dict) for r in recs):
        raise BuildError(f"{where}: not a list of JSON objects")
    return recs


def to_own_layout(rec: dict[str, Any], src: Source) -> tuple[str, dict[str, Any]]:
    """(layout, the record with the dataset's own fields in the dataset's order); a missing field is
    an error naming the source and the record."""
    for old, new in src.rename:
        if old in rec:
            rec = {new if k == old else k: v for k, v in rec.items()}
    layout = src.layout
    if layout == "hf_hotpotqa":
        rec = hf_to_hotpotqa(rec, src)
        layout = "hotpotqa"
    missing = [f for f in FIELDS[layout] if f not in rec]
    if missing:
        raise BuildError(f"{src.repo}:{src.path}: record {rec.get(ID_FIELD[layout])!r} lacks {missing}")
    return layout, {f: rec[f] for f in FIELDS[layout]}


def hf_to_hotpotqa(rec: dict[str, Any], src: Source) -> dict[str, Any]:
    """The Hugging Face ``hotpot_qa`` layout of a record in HotpotQA's own: the parallel lists of
    ``supporting_facts`` and ``context`` zipped back into pairs, ``id`` named ``_id``."""
    try:
        facts, context = rec["supporting_facts"], rec["context"]
        if len(facts["title"]) != len(facts["sent_id"]) or len(context["title"]) != len(context["sentences"]):
            raise ValueError("parallel lists of different lengths")
        return {
            "_id": rec["id"],
            "question": rec["question"],
            "answer": rec["answer"],
            "supporting_facts": [[t, s] for t, s in zip(facts["title"], facts["sent_id"])],
            "context": [[t, s] for t, s in zip(context["title"], context["sentences"])],
            "type": rec["type"],
            "level": rec["level"],
        }
    except (KeyError, TypeError, ValueError) as e:
        raise BuildError(
            f"{src.repo}:{src.path}: record {rec.get('id')!r} is not in the Hugging Face HotpotQA layout ({e!r})"
        ) from None


def normal_question(text: str) -> str:
    return " ".join(text.split()).casefold()


def same_question(a: Rec, b: Rec) -> list[str]:
    """What differs between two records of one id ([] = nothing): the whole record in one layout;
    across HotpotQA's two layouts the question, answer, paragraphs and gold paragraphs as the
    loaders read them (the IRCoT layout has no sentence ids to compare)."""
    if a.layout == b.layout:
        return [f for f in FIELDS[a.layout] if a.record[f] != b.record[f]]
    x, y = (sample_of(r) for r in (a, b))
    return [k for k in ("question", "answer", "chunks", "sf_idx") if x[k] != y[k]]


def sample_of(r: Rec) -> dict[str, Any]:
    where = Path(f"{r.source.repo}:{r.source.path}")
    if r.layout == "ircot":
        return ircot_record_to_sample(r.record, where, r.rid, " ")
    return hotpot_record_to_sample(r.record, where, r.rid)


def collect(mirrors: Path) -> dict[str, Collected]:
    """Per dataset: the kept records in source order, each source's manifest entry, the excluded
    snapshots' entries and every disagreement between sources."""
    out = {d: Collected() for d in DATASETS}
    for src in SOURCES:
        got = out[src.dataset]
        blob = read_blob(mirrors, src.repo, src.commit, src.path)
        recs = parse(blob, src)
        by_id = {r.rid: r for r in got.records}
        by_question = {normal_question(r.record[QUESTION_FIELD[r.layout]]): r for r in got.records}
        kept = repeated = same_text = 0
        for raw in recs:
            layout, rec = to_own_layout(raw, src)
            new = Rec(str(rec[ID_FIELD[layout]]), layout, rec, src)
            question = normal_question(rec[QUESTION_FIELD[layout]])
            first = by_id.get(new.rid)
            if first is not None:
                repeated += 1
                diff = same_question(first, new)
                if diff:
                    got.conflicts.append(
                        f"{src.dataset} id {new.rid}: {src.repo}:{src.path} differs from "
                        f"{first.source.repo}:{first.source.path} in {diff}"
                    )
                continue
            if question in by_question:  # another id with the same question text: one question, kept once
                same_text += 1
                continue
            by_id[new.rid] = by_question[question] = new
            got.records.append(new)
            kept += 1
        got.sources.append(
            {
                "repo": src.repo,
                "commit": src.commit,
                "path": src.path,
                "layout": src.layout,
                "sha256": hashlib.sha256(blob).hexdigest(),
                "records": len(recs),
                "kept": kept,
                "repeated_ids": repeated,  # each checked equal to the kept record
                "repeated_questions": same_text,  # another id, same question text: left out
            }
        )
    for ex in EXCLUDED:
        blob = read_blob(mirrors, ex.repo, ex.commit, ex.path)
        ids = {m.decode() for m in PICKLED_HOTPOT_ID.findall(blob)}
        kept_ids = {r.rid for r in out[ex.dataset].records}
        out[ex.dataset].excluded.append(
            {
                "repo": ex.repo,
                "commit": ex.commit,
                "path": ex.path,
                "sha256": hashlib.sha256(blob).hexdigest(),
                "why": ex.why,
                "ids_found": len(ids),
                "ids_kept_from_other_sources": len(ids & kept_ids),
            }
        )
        if not ids or ids - kept_ids:
            out[ex.dataset].conflicts.append(
                f"{ex.repo}:{ex.path}: {len(ids - kept_ids)} of its {len(ids)} ids are not kept from another "
                "source, so leaving it out loses questions"
            )
    return out


def split_key(rid: str) -> str:
    return hashlib.sha256((SPLIT_SALT + rid).encode()).hexdigest()


def smallest_keys(records: list[Rec], n: int) -> set[str]:
    return set(sorted((r.rid for r in records), key=split_key)[:n])


def split(dataset: str, records: list[Rec]) -> dict[str, list[Rec]]:
    """The fixed split (module docstring); each part in source order."""
    if dataset == "hotpotqa":
        test = {r.rid for r in records if r.source.round5 and r.layout == "hotpotqa"}
    elif dataset == "musique":
        test = smallest_keys([r for r in records if r.source.round5], MUSIQUE_TEST)
    else:
        test = smallest_keys(records, TWOWIKI_TEST)
    validation = smallest_keys([r for r in records if r.rid not in test], VALIDATION)
    part = {r.rid: "test" if r.rid in test else "validation" if r.rid in validation else "train" for r in records}
    return {s: [r for r in records if part[r.rid] == s] for s in SPLITS}


SPLIT_RULE = {
    "hotpotqa": "test = round 5's test questions (the original-layout records of the round-5 sources)",
    "musique": f"test = round 5's test questions (the {MUSIQUE_TEST} smallest split keys among the round-5 "
    "sources' records)",
    "2wikimultihopqa": f"test = the {TWOWIKI_TEST} smallest split keys",
}


def jsonl_bytes(records: list[Rec]) -> bytes:
    return "".join(json.dumps(r.record, ensure_ascii=False) + "\n" for r in records).encode("utf-8")


def gzip_bytes(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as f:
        f.write(data)
    return buf.getvalue()


def build(mirrors: Path) -> tuple[dict[str, dict[str, bytes]], list[str]]:
    """({dataset: {file name: bytes}} (the gzipped splits and MANIFEST.json), one line per dataset
    with its counts). A disagreement between sources is a BuildError listing every one."""
    collected = collect(mirrors)
    conflicts = [c for got in collected.values() for c in got.conflicts]
    if conflicts:
        raise BuildError(f"{len(conflicts)} disagreement(s) between sources:\n" + "\n".join(conflicts))
    files: dict[str, dict[str, bytes]] = {}
    lines = []
    for dataset, got in collected.items():
        parts = split(dataset, got.records)
        manifest: dict[str, Any] = {
            "dataset": dataset,
            "licence": LICENCE[dataset],
            "built_by": "scripts/build_real_multihop.py",
            "split": f"split key = sha256('{SPLIT_SALT}' + id); {SPLIT_RULE[dataset]}; validation = the "
            f"{VALIDATION} smallest split keys among the rest; train = the rest",
            "checks": {
                "ids_in_several_sources": sum(s["repeated_ids"] for s in got.sources),
                "disagreements": 0,  # the build stops on any
                "repeated_questions_left_out": sum(s["repeated_questions"] for s in got.sources),
            },
            "sources": got.sources,
            "files": [],
        }
        if got.excluded:
            manifest["excluded"] = got.excluded
        files[dataset] = {}
        for name, recs in parts.items():
            raw = jsonl_bytes(recs)
            files[dataset][f"subset_{name}.jsonl.gz"] = gzip_bytes(raw)
            layouts: dict[str, int] = {}
            for r in recs:
                layouts[r.layout] = layouts.get(r.layout, 0) + 1
            manifest["files"].append(
                {
                    "file": f"subset_{name}.jsonl.gz",
                    "sha256": hashlib.sha256(raw).hexdigest(),  # of the uncompressed content
                    "records": len(recs),
                    "layouts": layouts,
                }
            )
        files[dataset]["MANIFEST.json"] = (json.dumps(manifest, indent=1, ensure_ascii=False) + "\n").encode()
        sizes = ", ".join(f"{s} {len(parts[s])}" for s in SPLITS)
        lines.append(
            f"{dataset}: {len(got.records)} questions ({sizes}); "
            f"{manifest['checks']['ids_in_several_sources']} repeated ids, all equal; "
            f"{manifest['checks']['repeated_questions_left_out']} repeated question texts left out"
        )
    return files, lines


def read_shipped(path: Path) -> bytes:
    """The content of a shipped file (gunzipped for ``.gz``); OSError, EOFError or zlib.error when
    it cannot be read."""
    data = path.read_bytes()
    return gzip.decompress(data) if path.name.endswith(".gz") else data


def verify_shipped(out: Path) -> list[str]:
    """Each shipped file against its MANIFEST.json (sha256 of the content, record count): one line
    per file that is missing, cannot be read or differs."""
    errors = []
    for dataset in DATASETS:
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
    ap.add_argument("--mirrors", type=Path, help="folder of git clones named <owner>+<name>, one per source repository")
    ap.add_argument("--out", type=Path, default=ROOT / "data", help="data folder (default: the repository's)")
    ap.add_argument("--verify", action="store_true", help="check instead of writing")
    args = ap.parse_args(argv)
    if args.mirrors is None:
        if not args.verify:
            ap.error("building needs --mirrors")
        errors = verify_shipped(args.out)
        print("\n".join(errors) or "shipped files match their MANIFEST.json")
        return 1 if errors else 0
    try:
        files, lines = build(args.mirrors)
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(lines))
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
