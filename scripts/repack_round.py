"""Convert a round's old raw archive (``runs.tgz``, records gzipped inside) to scripts/pack_round.py's
format (``runs.tar.xz``, records plain inside), changing no record:

    python scripts/repack_round.py experiments/round8/runs.tgz   # -> experiments/round8/runs.tar.xz
    git add -A experiments/round8                                   # the .tgz is removed, MANIFEST.json updated

The archive is checked against the sha256 its MANIFEST.json records, unpacked, every ``*.jsonl.gz``
gunzipped beside itself (a plain file of the same name already there is an error), and the folder
packed by pack_round.archive() (deterministic: converting again gives the same bytes). Every other
file is kept byte for byte, run folders nested or not (round 7's ``wave1/``, NIAH's ``niah/<task>/``),
which pack_round.py's selection of a fresh run folder would not be. The manifest's ``runs.tgz``
entry becomes ``runs.tar.xz`` with the new sha256 and size, its other keys kept (``holds`` names
``.jsonl`` where it named ``.jsonl.gz``); then the old archive is deleted.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pack_round import ARCHIVE, OLD_ARCHIVES, archive  # noqa: E402


def gunzip_records(folder: Path) -> int:
    """Replace every ``*.jsonl.gz`` under ``folder`` by its plain content; how many."""
    files = sorted(folder.rglob("*.jsonl.gz"))
    for gz in files:
        plain = gz.with_name(gz.name.removesuffix(".gz"))
        if plain.exists():
            raise SystemExit(f"error: {gz.relative_to(folder)} and its plain twin are both in the archive")
        plain.write_bytes(gzip.decompress(gz.read_bytes()))
        gz.unlink()
    return len(files)


def renamed_entry(archives: dict, old: str, new: str, entry: dict) -> dict:
    """``archives`` with the key ``old`` replaced by ``new`` in place, ``entry`` over its values."""
    holds = archives[old].get("holds")
    kept = {**archives[old], **entry} | ({"holds": holds.replace("jsonl.gz", "jsonl")} if holds else {})
    return {new if k == old else k: kept if k == old else v for k, v in archives.items()}


def repack(old: Path) -> dict:
    if not old.name.endswith(OLD_ARCHIVES):
        raise SystemExit(f"error: {old} is not a .tgz archive")
    manifest_path = old.parent / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text())
    data = old.read_bytes()
    want = manifest.get("archives", {}).get(old.name, {}).get("sha256")
    if hashlib.sha256(data).hexdigest() != want:
        raise SystemExit(f"error: {old} does not have the sha256 {want} that {manifest_path} records for it")
    dest = old.with_name(old.name.removesuffix(".tgz").removesuffix(".tar.gz") + ARCHIVE)
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(old) as tar:
            tar.extractall(tmp, filter="data")
        n = gunzip_records(Path(tmp))
        entry = archive(Path(tmp), dest)
    manifest["archives"] = renamed_entry(manifest["archives"], old.name, dest.name, entry)
    manifest_path.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    old.unlink()
    return {"dest": dest, "records": n, "before": len(data), **entry}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("archives", nargs="+", type=Path, help="experiments/<round>/runs.tgz")
    for old in ap.parse_args(argv).archives:
        res = repack(old)
        print(
            f"{old} ({res['before']} bytes) -> {res['dest']} ({res['bytes']} bytes, {res['records']} records gunzipped)"
        )


if __name__ == "__main__":
    main()
