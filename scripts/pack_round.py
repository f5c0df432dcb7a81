"""Pack a GPU round's raw result files into the repository: one archive per round.

    python scripts/pack_round.py <runs dir> experiments/round9/runs.tar.xz   # the archive, its sha256 in MANIFEST.json
    python scripts/pack_round.py <runs dir> <folder>                         # the run folders, unarchived
    python scripts/pack_round.py <runs dir> <archive> --report '<script>.py {runs} ... --out {round}'  # another report

For every run folder (one holding config.yaml or metrics.jsonl) copies exactly what the tables are
made from: ``config.yaml`` and ``config_resolved.yaml`` (the run's settings as written and as
they resolved on the machine), ``metrics.jsonl``, the training ``summary.json``, and the evaluation
files: summaries ``*.summary.json``, settings ``*.meta.json``, the NIAH grid's test-file sidecars
``*.testset.json``, the beam's ``*.path_scores.json`` (experiments/table2/beam_path_scores.py) and
the per-sample records ``eval_*.jsonl`` as plain JSONL (a gzipped ``eval_*.jsonl.gz`` is unpacked:
the archive compresses them all at once, far better than one gzip each). The evaluation files are
taken from the run folder's sub-folders too, at any depth, under the same relative path (an
evaluation's ``output_dir``: Table 2's ``ood_musique/`` and ``real_test/``, the beam's ``beam_*/``, the
NIAH grid's ``niah/<task>/``); the run's own four files only from the run folder itself. Checkpoints,
logs, TensorBoard files (``tb_logs/``), hidden folders (``.eval_hydra/``, ``.hydra/``, caches) and
sharded part files (``*.rank<r>.jsonl``, an interrupted distributed evaluation) are left out.
A half-written last record (a run killed mid-write) is dropped, as the evaluation itself drops it on
resuming; a malformed record elsewhere stops the packing before anything is written, naming the
file and line. A packed file that a .gitignore pattern would keep out of git is an error (the raw
files are there to be committed). Absolute paths of the machine that made the runs are rewritten
in the settings and summaries: the repository root given by ``--root`` (default: this checkout's)
becomes relative to it, and ``--rewrite OLD=NEW`` maps any other prefix (``/scratch/runs=runs``); an
absolute path left after that stops the packing before anything is written. A ``.tar.xz``
destination holds the packed run folders as one deterministic archive (names sorted, time 0, owner
0 with empty names, fixed modes, xz preset 9 extreme through Python's lzma: the same files give the
same bytes, so re-packing leaves git nothing to commit), and the round's MANIFEST.json beside it
records its sha256 and size under ``archives`` and, under ``report``, the command that makes the
round's tables from it (``--report``; without it a new manifest gets scripts/report_round.py's and an
existing one keeps its own). The rounds committed before this format as ``runs.tgz`` (records
gzipped inside) are still read by every report; new ``.tgz`` archives are not written. Then
``scripts/make_results.sh`` (or the report itself) makes the tables.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import lzma
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PLAIN = ("config.yaml", "config_resolved.yaml", "metrics.jsonl", "summary.json")  # the run folder's own
# an evaluation's files beside its records, in the run folder or any sub-folder: summaries, settings, the NIAH
# grid's test-file sidecars (experiments/niah/niah_report.py checks them) and beam_path_scores.py's scores
SIDECARS = ("*.summary.json", "*.meta.json", "*.testset.json", "*.path_scores.json")
SKIP_DIRS = ("tb_logs", "__pycache__")  # and every hidden folder: .eval_hydra, .hydra, caches
RECORDS = re.compile(r"^eval_.*\.jsonl(\.gz)?$")
PART = re.compile(r"\.rank\d+\.jsonl(\.gz)?$")
ARCHIVE = ".tar.xz"  # what a round's raw records are committed as (experiments/<round>/runs.tar.xz)
OLD_ARCHIVES = (".tgz", ".tar.gz")  # the rounds packed before it: read, no longer written
READ_ARCHIVES = (ARCHIVE, *OLD_ARCHIVES)  # what the reports unpack (seed_report.py, stopping_analysis.py)
XZ_PRESET = 9 | lzma.PRESET_EXTREME


REPO = Path(__file__).resolve().parents[1]
# an absolute path inside a YAML or JSON value: after a quote, a blank, ``=``, ``[`` or ``(``
ABSOLUTE = re.compile(r"""(?:^|(?<=["'\s=\[(]))/[\w.@+-]+(?:/[\w.@+-]*)*""", re.M)


class PackError(Exception):
    pass


def rewrite_paths(text: str, rules: Sequence[tuple[str, str]]) -> str:
    """``text`` with every path below an ``OLD`` prefix moved below ``NEW`` (``NEW`` empty:
    relative to ``OLD``), longest prefix first."""
    for old, new in sorted(rules, key=lambda r: -len(r[0])):
        old = old.rstrip("/")
        pattern = re.compile(re.escape(old) + r"(/|(?![\w.@+/-]))")
        text = pattern.sub(
            lambda m, new=new: (new.rstrip("/") + m.group(1)) if new else ("" if m.group(1) else "."), text
        )
    return text


def absolute_paths(text: str) -> list[str]:
    return ABSOLUTE.findall(text)


def complete_records(path: Path) -> tuple[bytes, int]:
    """The records of an evaluation file as bytes (newline-terminated lines), and how many bytes of
    a half-written last line were dropped."""
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    lines = raw.split(b"\n")
    keep: list[bytes] = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            if all(not rest.strip() for rest in lines[no:]):  # the last line: half-written
                return b"".join(x + b"\n" for x in keep), len(line)
            raise PackError(f"{path}:{no}: not valid JSON ({e})") from e
        keep.append(line)
    return b"".join(x + b"\n" for x in keep), 0


def eval_files(folder: Path, prefix: str = "") -> list[tuple[Path, str]]:
    """[(source, name under the run folder)] of the evaluation files in ``folder`` and, at any depth,
    its sub-folders (``prefix``: ``folder``'s path under the run folder), sub-folders after files."""
    files = [(p, prefix + p.name) for pattern in SIDECARS for p in sorted(folder.glob(pattern)) if p.is_file()]
    names = {p.name for p in folder.iterdir() if p.is_file() and RECORDS.match(p.name) and not PART.search(p.name)}
    for name in sorted(names):
        stem = name.removesuffix(".gz")
        if name.endswith(".gz") and stem in names:
            continue  # the plain file is the newer one (report_round.py reads it first as well)
        files.append((folder / name, prefix + stem))
    for sub in sorted(folder.iterdir()):
        # a linked folder is not followed: it may point back up, or at records of another run
        if sub.is_dir() and not sub.is_symlink() and not sub.name.startswith(".") and sub.name not in SKIP_DIRS:
            files += eval_files(sub, f"{prefix}{sub.name}/")
    return files


def plan(runs: Path) -> dict[str, list[tuple[Path, str]]]:
    """{run: [(source, name in the destination)]} over every run folder of ``runs``."""
    out: dict[str, list[tuple[Path, str]]] = {}
    for run in sorted(p for p in runs.iterdir() if p.is_dir()):
        if not ((run / "config.yaml").is_file() or (run / "metrics.jsonl").is_file()):
            continue
        out[run.name] = [(run / n, n) for n in PLAIN if (run / n).is_file()] + eval_files(run)
    return out


def pack(runs: Path, dest: Path, rules: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    if not runs.is_dir():
        raise PackError(f"{runs} is not a folder")
    todo = plan(runs)
    if not todo:
        raise PackError(f"no run folders (config.yaml or metrics.jsonl) in {runs}")
    prepared: list[tuple[Path, bytes | Path]] = []
    dropped: list[str] = []
    for run, files in todo.items():
        for src, name in files:
            target = dest / run / name
            if RECORDS.match(src.name):
                data, cut = complete_records(src)  # checks every file before anything is written
                if cut:
                    dropped.append(f"{src}: dropped a half-written last line ({cut} bytes)")
                prepared.append((target, data))
            else:
                text = rewrite_paths(src.read_text(encoding="utf-8"), rules)
                if left := absolute_paths(text):
                    raise PackError(
                        f"{src} holds the absolute path {left[0]}: pass --root <the repository root of the "
                        "machine that made it> or --rewrite OLD=NEW"
                    )
                prepared.append((target, text.encode("utf-8")))
    for target, content in prepared:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    size = sum(t.stat().st_size for t, _ in prepared)
    per_run = {run: sum(1 for src, _ in files if RECORDS.match(src.name)) for run, files in todo.items()}
    return {
        "runs": len(todo),
        "files": len(prepared),
        "bytes": size,
        "dropped": dropped,
        "evals": per_run,
        "written": [t for t, _ in prepared],
    }


def is_archive(dest: Path) -> bool:
    """Whether ``dest`` names an archive (``.tar.xz``) rather than a folder; an old-format name is
    refused, so that it never becomes a folder called ``runs.tgz``."""
    if dest.name.endswith(OLD_ARCHIVES):
        raise SystemExit(f"error: {dest}: rounds are packed as {ARCHIVE} now (runs{ARCHIVE}); .tgz is only read")
    return dest.name.endswith(ARCHIVE)


def tar_entry(path: Path, name: str) -> tarfile.TarInfo:
    """``path``'s header with nothing of the machine in it: time 0, owner 0 unnamed, fixed modes."""
    info = tarfile.TarInfo(name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    if path.is_dir():
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    else:
        info.size, info.mode = path.stat().st_size, 0o644
    return info


def archive(folder: Path, dest: Path) -> dict[str, Any]:
    """``folder``'s contents as the deterministic ``.tar.xz`` ``dest``; its entry of the round's manifest."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", preset=XZ_PRESET, format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(folder.rglob("*"), key=lambda p: p.relative_to(folder).as_posix()):
            info = tar_entry(path, path.relative_to(folder).as_posix())
            if info.isdir():
                tar.addfile(info)
            else:
                with open(path, "rb") as f:
                    tar.addfile(info, f)
    data = buf.getvalue()
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


# the command scripts/make_results.sh runs on a round ({runs}: its archive unpacked), unless its manifest names another
REPORT = ["scripts/report_round.py", "{runs}", "--out", "{round}"]


def record_archive(dest: Path, entry: dict[str, Any], report: list[str] = REPORT, replace: bool = False) -> Path:
    """Write ``entry`` as ``archives[<dest's name>]`` of the MANIFEST.json beside ``dest``, keeping
    the rest of the manifest (a new one gets ``report``; ``replace``: an existing one too)."""
    manifest = dest.parent / "MANIFEST.json"
    data = json.loads(manifest.read_text()) if manifest.is_file() else {}
    data.setdefault("archives", {}).setdefault(dest.name, {}).update(entry)
    if replace:
        data["report"] = report
    data.setdefault("report", report)
    manifest.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return manifest


def pack_archive(
    runs: Path, dest: Path, rules: Sequence[tuple[str, str]] = (), report: list[str] | None = None
) -> dict[str, Any]:
    """pack() into a temporary folder, then archive() it as ``dest`` and record it in the manifest
    (``report``: the round's report command, replacing the manifest's)."""
    with tempfile.TemporaryDirectory() as tmp:
        res = pack(runs, Path(tmp), rules)
        entry = archive(Path(tmp), dest)
    manifest = record_archive(dest, entry, report or REPORT, replace=report is not None)
    return {**res, "bytes": entry["bytes"], "written": [dest, manifest], "sha256": entry["sha256"]}


def report_command(text: str) -> list[str]:
    """``--report``'s command as the manifest's list: a script of this repository and its arguments,
    ``{runs}`` among them."""
    args = shlex.split(text)
    if not args or not args[0].endswith(".py") or "{runs}" not in args:
        raise ValueError(f"--report {text!r}: expected '<script>.py ... {{runs}} ...' (make_results.sh fills {{runs}})")
    if not (REPO / args[0]).is_file():
        raise ValueError(f"--report: no script {args[0]} in {REPO} (name it from the repository's root)")
    return args


def ignored_by_git(paths: list[Path]) -> list[str]:
    """Those of ``paths`` that git would not commit because a .gitignore pattern matches them (empty
    outside a git work tree or without git)."""
    if not paths:
        return []
    try:
        res = subprocess.run(
            ["git", "-C", str(paths[0].parent), "check-ignore", "--stdin"],
            input="\n".join(str(p.resolve()) for p in paths),
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        return []
    return res.stdout.split() if res.returncode == 0 else []  # 1: nothing ignored; 128: not a work tree


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, help="the round's run folders (e.g. an unpacked tarball)")
    ap.add_argument("dest", type=Path, help="the round's archive (experiments/round9/runs.tar.xz) or a folder")
    ap.add_argument("--root", default=str(REPO), help="the runs' repository root: its paths become relative")
    ap.add_argument("--rewrite", action="append", default=[], metavar="OLD=NEW", help="a path prefix to replace")
    ap.add_argument(
        "--report",
        metavar="COMMAND",
        help="the round's report for MANIFEST.json, e.g. 'experiments/table2/report_table2.py {runs} --out "
        "{round}/table2.md' (default: a new manifest gets scripts/report_round.py's, an existing one keeps its own)",
    )
    args = ap.parse_args(argv)
    rules = [(args.root, "")] + [tuple(r.split("=", 1)) for r in args.rewrite if "=" in r]
    if len(rules) != len(args.rewrite) + 1 or any(not old.startswith("/") for old, _ in rules):
        ap.error("--rewrite takes OLD=NEW with an absolute OLD, --root an absolute path")
    try:
        report = report_command(args.report) if args.report is not None else None
    except ValueError as e:
        ap.error(str(e))
    try:
        if is_archive(args.dest):
            res = pack_archive(args.runs, args.dest, rules, report)
        elif report is not None:
            ap.error("--report goes into an archive's MANIFEST.json: give a .tar.xz destination")
        else:
            res = pack(args.runs, args.dest, rules)
    except PackError as e:
        raise SystemExit(f"error: {e}") from None
    for run, n in res["evals"].items():
        print(f"  {run}: {n} evaluation file(s)" + ("  <- none: not evaluated yet?" if n == 0 else ""))
    for line in res["dropped"]:
        print(f"warning: {line}", file=sys.stderr)
    print(f"packed {res['files']} files of {res['runs']} runs into {args.dest} ({res['bytes'] / 1e6:.1f} MB)")
    if ignored := ignored_by_git(res["written"]):
        raise SystemExit(
            f"error: .gitignore keeps {len(ignored)} packed file(s) out of git, e.g. {ignored[0]} "
            "(`git check-ignore -v <file>` names the pattern)"
        )
    return res


if __name__ == "__main__":
    main()
