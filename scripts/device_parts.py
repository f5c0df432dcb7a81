"""A model's fp16 weights in parts that fit the lent GPU machine's calls (scripts/lease.sh takes them).

    python scripts/device_parts.py offline:mpnet --name mpnet      # -> .device/part-mpnet-1 ... -N
    python scripts/device_parts.py offline:minilm --name minilm

A device call carries the repository's working tree and the paths it names, 64 MiB in all
(/work/.library/device/README.md, "Limits"), so a part can be as large as what the tree leaves free. The
tree is what git would send from this checkout (tracked files and untracked ones it does not ignore);
``--part-mib`` overrides the computed size. The model folder's floating-point tensors are written in
fp16 (the runs load them into fp32, as every lease since round 5 did with MiniLM), the file is cut in
pieces named as ``split`` names them (``model.safetensors.part-aa``, ``-ab``, ...), and each piece goes
into a folder of its own, ``.device/part-<name>-<k>``, with ``PARTS`` (how many there are) and
``MODEL`` (``<name>``: lease.sh joins the pieces into ``$CODE/.device/<name>``); the first folder also
holds the model's other files (config, tokenizer, pooling) and the fp16 file's sha256, which lease.sh
checks after joining. Earlier parts of the same name are removed first. It prints the carry lists,
one device call each.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from rl.model.embedder import resolve_model_path  # noqa: E402

sys.path.insert(0, str(REPO / "scripts"))
from get_data import sha256 as sha256_of  # noqa: E402  (the scripts' one file hash)

MiB = 1 << 20
CALL_LIMIT = 64 * MiB  # what one device call may carry, the tree included
RESERVE = 1 * MiB  # room left for what a call adds beside a part (.device/whl at setup: 0.4 MiB)
WEIGHTS = ("model.safetensors",)
SKIP = {"desktop.ini"}  # a Windows folder setting some zips carry
SKIP_SUFFIXES = (".bin", ".onnx", ".h5", ".msgpack", ".ot", ".safetensors")  # other weight formats
WEIGHT_DIRS = {"onnx", "openvino"}


def tree_bytes(repo: Path) -> int:
    """Bytes of what a device call sends from ``repo``: tracked files and untracked, not ignored ones, each
    counted by the disk blocks it holds (the device tool measures the tree so: 875 files of 50.2 MiB took
    52.2 MiB, and a part cut to the byte count was refused)."""
    out = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout
    stats = [(repo / p).stat() for p in out.decode().split("\0") if p and (repo / p).is_file()]
    return sum(max(st.st_size, st.st_blocks * 512) for st in stats)


def small_files(model: Path) -> list[Path]:
    """The folder's files other than weights (config, tokenizer, pooling, card), relative to it."""
    out = []
    for p in sorted(model.rglob("*")):
        rel = p.relative_to(model)
        if (
            p.is_file()
            and p.name not in SKIP
            and not p.name.endswith(SKIP_SUFFIXES)
            and rel.parts[0] not in WEIGHT_DIRS
        ):
            out.append(rel)
    return out


def fp16_copy(model: Path, out: Path) -> None:
    """``model.safetensors`` with every floating tensor in fp16 (integer buffers kept), refused if a
    value leaves fp16's range."""
    tensors = load_file(str(model / WEIGHTS[0]))
    half = {}
    for k, v in tensors.items():
        h = v.to(torch.float16) if v.is_floating_point() else v
        if h.is_floating_point() and not torch.isfinite(h).all():
            raise SystemExit(f"error: {k} holds values beyond fp16's range; fp16 parts would change the model")
        half[k] = h
    save_file(half, str(out), metadata={"format": "pt"})


def piece_names(n: int) -> list[str]:
    """split's suffixes: aa, ab, ..., az, ba, ..."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    return [f"model.safetensors.part-{letters[i // 26]}{letters[i % 26]}" for i in range(n)]


def make_parts(model: Path, name: str, out: Path, part_bytes: int) -> list[Path]:
    """Write ``out/part-<name>-<k>`` folders; returns them."""
    for old in out.glob(f"part-{name}-*"):
        shutil.rmtree(old)
    small = small_files(model)
    small_bytes = sum((model / p).stat().st_size for p in small)
    with tempfile.TemporaryDirectory() as tmp:
        fp16 = Path(tmp) / "model.safetensors"
        fp16_copy(model, fp16)
        size = fp16.stat().st_size
        digest = sha256_of(fp16)
        # the first part carries the small files too: its piece is smaller by their size
        first = part_bytes - small_bytes
        if first <= 0:
            raise SystemExit(
                f"error: parts of {part_bytes} bytes cannot hold the model's {small_bytes} bytes of small files"
            )
        bounds = [0, min(first, size)]
        while bounds[-1] < size:
            bounds.append(min(bounds[-1] + part_bytes, size))
        n = len(bounds) - 1
        folders = []
        with fp16.open("rb") as f:
            for k, piece in enumerate(piece_names(n)):
                folder = out / f"part-{name}-{k + 1}"
                folder.mkdir(parents=True)
                (folder / piece).write_bytes(f.read(bounds[k + 1] - bounds[k]))
                (folder / "PARTS").write_text(f"{n}\n")
                (folder / "MODEL").write_text(f"{name}\n")
                folders.append(folder)
    for rel in small:
        (folders[0] / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(model / rel, folders[0] / rel)
    (folders[0] / "model.safetensors.sha256").write_text(f"{digest}  model.safetensors\n")
    print(
        f"{name}: fp16 model.safetensors {size / MiB:.1f} MiB (sha256 {digest[:12]}...) in {n} parts of <= {part_bytes / MiB:.1f} MiB"
    )
    return folders


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a model folder or an offline alias (offline:mpnet, offline:minilm)")
    ap.add_argument("--name", required=True, help="the folder the device joins it into: $CODE/.device/<name>")
    ap.add_argument(
        "--out", type=Path, default=REPO / ".device", help="where the part folders go (default: %(default)s)"
    )
    ap.add_argument("--part-mib", type=float, help="bytes per call for a part, in MiB (default: 64 MiB less the tree)")
    args = ap.parse_args(argv)
    model = Path(resolve_model_path(args.model))
    if not (model / WEIGHTS[0]).is_file():
        ap.error(f"{model} holds no {WEIGHTS[0]}")
    if args.part_mib:
        part = int(args.part_mib * MiB)
    else:
        tree = tree_bytes(REPO)
        part = CALL_LIMIT - tree - RESERVE
        print(f"the tree that travels with every call: {tree / MiB:.1f} MiB; a part may hold {part / MiB:.1f} MiB")
    folders = make_parts(model, args.name, args.out, part)
    rel = [f.relative_to(REPO) if f.is_relative_to(REPO) else f for f in folders]
    print(f"{len(folders)} device calls, each carrying one: " + ", ".join(str(r) for r in rel))
    return 0


if __name__ == "__main__":
    sys.exit(main())
