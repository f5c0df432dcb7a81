"""Writing and reading run files so that kills, full disks and concurrent runs lose nothing.

* :func:`atomic_save` writes a checkpoint to a temporary file in the same folder and renames it
  over the old one: a kill at any moment leaves either the old or the new file, never a torn one.
  A full disk removes the temporary file, keeps the old checkpoint and raises :class:`DiskFullError`.
  The temporary file is created exclusively under an unpredictable name, so a symlink planted in
  a folder someone sent (an index folder, a run) is never written through. Every writer of a
  whole file goes through :func:`atomic_write` (:func:`atomic_save`, :func:`atomic_write_text`).
* :class:`FolderLock` is one writer per run folder / evaluation output (``flock``: the kernel drops
  it when its process dies, even by ``kill -9``, so a lock is never left stale).
* :func:`save_checkpoint` stores a sha256 of the checkpoint's contents (every tensor's bytes and
  every plain value) inside it; :func:`load_checkpoint` recomputes it, so bytes changed on disk
  after writing are an error instead of a silently different model. Checkpoints of older
  versions carry none and load unchecked.
* :func:`load_checkpoint` never runs code from a file: ``torch.load(weights_only=True)``.
* A folder that is (or becomes) read-only gives :class:`NotWritableError`, one line saying what to do.

Durability covers process kills (the page cache outlives the process); power loss is not covered
(no fsync: it would double the time of every checkpoint on a slow disk).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import pickle
import secrets
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)
CHECKSUM_KEY = "checksum"


class StorageError(RuntimeError):
    """A problem with the files of a run that the user has to resolve (message says how)."""


class DiskFullError(StorageError):
    pass


class FolderInUseError(StorageError):
    pass


class CheckpointLoadError(StorageError):
    pass


class NotWritableError(StorageError):
    pass


def _errno_cause(exc: BaseException, errnos: Any) -> OSError | None:
    """The OSError with an errno in ``errnos`` in ``exc``'s cause/context chain (torch.save wraps it
    in a RuntimeError), or None."""
    seen = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in errnos:
            return e
        e = e.__cause__ or e.__context__
    return None


def not_writable_cause(exc: BaseException) -> OSError | None:
    """The EACCES/EPERM/EROFS OSError behind ``exc``."""
    return _errno_cause(exc, NOT_WRITABLE)


def not_writable_message(path: Path, cause: OSError, then: str = "rerun the same command") -> str:
    folder = Path(path).parent
    return (
        f"cannot write {path} ({os.strerror(cause.errno or 0).lower()}); make {folder} writable "
        f"(e.g. chmod u+w {folder}), then {then}"
    )


def disk_full_cause(exc: BaseException) -> OSError | None:
    """The ENOSPC/EDQUOT OSError behind ``exc``."""
    return _errno_cause(exc, DISK_FULL)


def disk_full_message(path: Path, kept: str, then: str = "rerun the same command") -> str:
    """``kept``: what survived, e.g. "the previous model_last.pt is kept"; ``then``: how to go on."""
    try:
        st = os.statvfs(path.parent)
        free = f"{st.f_bavail * st.f_frsize / 2**20:.0f} MiB free"
    except OSError:
        free = "free space unknown"
    kept = f"; {kept}" if kept else ""
    return f"disk full while writing {path} ({free}){kept}. Free space on that disk, then {then}"


def probe_writable(folder: Path) -> OSError | None:
    """Why nothing can be written in ``folder`` (or, if it does not exist yet, in the first
    existing folder above it), else None: a temporary file is created and removed."""
    p = Path(folder).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        fd = os.open(p / f".qrag_write_test{os.getpid()}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        return exc
    os.close(fd)
    os.unlink(p / f".qrag_write_test{os.getpid()}")
    return None


def _open_for_write(path: Path):
    """The file object every run file is written through (one place to inject a full disk in tests):
    a new file, created exclusively (``O_EXCL`` fails on anything already there, a symlink included)."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb")


def _open_for_append(path: Path):
    """Unbuffered, so that a failed write leaves nothing pending to be flushed later."""
    return open(path, "ab", buffering=0)


def raise_storage_error(exc: BaseException, path: Path, then: str = "rerun the same command") -> None:
    """A full disk or a read-only folder behind ``exc`` (writing ``path``) raised as
    :class:`DiskFullError` / :class:`NotWritableError`; returns if it is neither."""
    if disk_full_cause(exc) is not None:
        kept = f"the previous {path.name} is kept" if path.exists() else ""
        raise DiskFullError(disk_full_message(path, kept, then)) from None
    cause = not_writable_cause(exc)
    if cause is not None:
        raise NotWritableError(not_writable_message(path, cause, then)) from None


def atomic_write(path: Path, write: Any, then: str = "rerun the same command") -> None:
    """``write(f)`` into a new temporary file beside ``path``, then renamed over it; a full disk or a
    read-only folder is :class:`DiskFullError` / :class:`NotWritableError` (``then``: how to go on)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{secrets.randbits(63)}")  # unpredictable: no planted link waits there
    try:
        f = _open_for_write(tmp)
    except BaseException as exc:  # (nothing of ours to remove: what is at tmp is not ours)
        raise_storage_error(exc, path, then)
        raise
    try:
        with f:
            write(f)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # a folder that became read-only: nothing was written there either
            pass
        raise_storage_error(exc, path, then)
        raise


def atomic_save(obj: Any, path: Path, then: str = "rerun the same command") -> None:
    """torch.save ``obj`` to ``path`` through a temporary file and a rename."""
    import torch

    atomic_write(path, lambda f: torch.save(obj, f), then)


def atomic_write_bytes(path: Path, data: bytes, then: str = "rerun the same command") -> None:
    atomic_write(path, lambda f: f.write(data), then)


def atomic_write_text(path: Path, text: str, then: str = "rerun the same command") -> None:
    atomic_write_bytes(path, text.encode("utf-8"), then)


def remove_stale_tmp(folder: Path, names: Iterable[str]) -> list[Path]:
    """Temporary files of ``names`` left by writers killed mid-write (call while holding the lock
    that covers those names; other writers' temporary files in the folder are not touched)."""
    stale = []
    for name in names:
        stale += [p for p in Path(folder).glob(f".{name}.tmp*") if p.is_file()]
        stale += [p for p in Path(folder).glob(f"{name}.tmp") if p.is_file()]  # the name older versions used
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def _last_byte(path: Path, size: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(size - 1)
        return f.read(1)


def append_line(path: Path, line: str, then: str = "rerun the same command") -> None:
    """One JSON line appended whole or, on a full disk, cut back to where the file was. A torn
    last line (a kill mid-write: no closing newline) is cut off first, so the new line is not
    glued onto it and lost to every reader."""
    path = Path(path)
    try:
        f = _open_for_append(path)
    except OSError as exc:
        if exc.errno in NOT_WRITABLE:
            raise NotWritableError(not_writable_message(path, exc, then)) from None
        raise
    with f:
        start = f.seek(0, os.SEEK_END)
        if start and _last_byte(path, start) != b"\n":
            whole = path.read_bytes()[:start].rfind(b"\n") + 1
            log.warning("%s: cut off a torn last line (%d bytes) left by an interrupted write", path, start - whole)
            f.truncate(whole)
            start = f.seek(whole)
        try:
            data = memoryview(line.encode("utf-8") + b"\n")
            while data:
                data = data[f.write(data) :]
        except OSError as exc:
            if exc.errno in DISK_FULL:
                f.truncate(start)
                raise DiskFullError(disk_full_message(path, "the lines before it are kept", then)) from None
            if exc.errno in NOT_WRITABLE:
                raise NotWritableError(not_writable_message(path, exc, then)) from None
            raise


def read_jsonl_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSONL file; a line that does not parse (the torn last line of a kill) is skipped."""
    if not path.exists():
        return []
    data = path.read_bytes()
    rows = []
    for line in data.split(b"\n")[:-1]:
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]], then: str = "rerun the same command") -> None:
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows), then)


class FolderLock:
    """An exclusive ``flock`` on ``<folder>/<name>``, holding the holder's pid, host and start time.

    ``what`` names the resource in the refusal ("run folder runs/x", "evaluation output ...").
    The holder deletes the file before it lets go, so finished runs leave none behind; a file left
    by a killed holder is simply locked again by the next one.
    """

    def __init__(self, path: Path, what: str, advice: str):
        self.path, self.what, self.advice = Path(path), what, advice
        self._fd: int | None = None

    def acquire(self) -> FolderLock:
        try:
            return self._acquire()
        except OSError as exc:
            if exc.errno in NOT_WRITABLE:
                raise NotWritableError(not_writable_message(self.path, exc)) from None
            raise

    def _acquire(self) -> FolderLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "unknown process"
                os.close(fd)
                raise FolderInUseError(f"{self.what} is in use by another process ({holder}); {self.advice}") from None
            try:  # the file we locked may have been deleted by its previous holder meanwhile: lock the new one
                if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(
            fd, f"pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}".encode(), 0
        )
        self._fd = fd
        return self

    def holder(self) -> str | None:
        """Who holds the lock now, or None (taking nothing): lets a refusal come before any write."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "unknown process"
        finally:
            os.close(fd)  # closing drops a lock taken here
        return None

    def release(self) -> None:
        if self._fd is not None:
            self.path.unlink(missing_ok=True)  # while still holding it: see acquire
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


# -- checkpoints --------------------------------------------------------------------------------
def _numpy_globals() -> list[Any]:
    """What checkpoints of older versions hold besides tensors: numpy's global RNG state (an
    ndarray of uint32). Rebuilding an ndarray runs no code from the file."""
    import numpy as np

    core = getattr(np, "_core", None) or np.core  # numpy 2 / numpy 1
    return [core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def _feed(h: Any, x: Any) -> None:
    """Hash ``x`` (nested dicts / lists of tensors, arrays and plain values) into ``h``, tagging
    every value with its type and shape so that no two different contents hash alike."""
    import numpy as np
    import torch

    if isinstance(x, torch.Tensor):
        t = x.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        if t.numel():  # (an empty tensor has no bytes to view)
            h.update(t.reshape(-1).view(torch.uint8).numpy())
    elif isinstance(x, np.ndarray):
        h.update(f"A{x.dtype}{x.shape}".encode())
        h.update(np.ascontiguousarray(x).tobytes())
    elif isinstance(x, dict):  # in key order: a resumed run may rebuild a dict in another order
        h.update(f"D{len(x)}".encode())
        for k, v in sorted(x.items(), key=lambda kv: (type(kv[0]).__name__, repr(kv[0]))):
            _feed(h, k)
            _feed(h, v)
    elif isinstance(x, (list, tuple)):
        h.update(f"L{len(x)}".encode())
        for v in x:
            _feed(h, v)
    else:
        text = repr(x).encode()
        h.update(f"V{type(x).__name__}{len(text)}:".encode() + text)


def state_checksum(state: dict[str, Any]) -> str:
    """sha256 of a checkpoint's contents (its own checksum entry left out)."""
    h = hashlib.sha256()
    _feed(h, {k: v for k, v in state.items() if k != CHECKSUM_KEY})
    return f"sha256:{h.hexdigest()}"


def save_checkpoint(state: dict[str, Any], path: Path, then: str = "rerun the same command") -> None:
    """:func:`atomic_save` of ``state`` with its :func:`state_checksum` added under ``checksum``."""
    atomic_save({**state, CHECKSUM_KEY: state_checksum(state)}, path, then)


def _first_line(exc: BaseException) -> str:
    lines = [x.strip() for x in str(exc).splitlines() if x.strip()]
    return lines[0] if lines else type(exc).__name__


def load_checkpoint(path: Path, map_location: Any = None) -> dict[str, Any]:
    """A checkpoint loaded with ``weights_only=True`` (tensors and plain values only, so a crafted
    file cannot execute anything) and checked against the checksum it was saved with."""
    import torch

    path = Path(path)
    unreadable = f"{path} is not a readable checkpoint ({{}}); it is truncated or corrupt: restore it from a copy"
    if path.is_file() and path.stat().st_size == 0:
        raise CheckpointLoadError(unreadable.format("an empty file"))
    try:
        with torch.serialization.safe_globals(_numpy_globals()):
            state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        lines = [x.strip() for x in str(exc).split("WeightsUnpickler error:")[-1].splitlines() if x.strip()]
        code = [x for x in lines if "GLOBAL" in x.upper()]  # a forbidden class or function named in the file
        if not code:  # damaged bytes (e.g. "Unsupported operand 182"), not a forbidden object
            raise CheckpointLoadError(unreadable.format(lines[0] if lines else "not a pickle")) from None
        raise CheckpointLoadError(
            f"{path} holds objects other than tensors and plain values ({code[0]}), so it is not loaded: "
            f"loading it could run code from the file. It was not written by this version of Q-RAG; "
            f"retrain, or load it yourself with torch.load(weights_only=False) only if you trust its source"
        ) from None
    except FileNotFoundError:
        raise CheckpointLoadError(f"{path} is missing; restore it from a copy") from None
    except Exception as exc:  # anything torch's reader raises on damaged bytes
        raise CheckpointLoadError(unreadable.format(_first_line(exc))) from None
    if not isinstance(state, dict):
        raise CheckpointLoadError(f"{path} holds a {type(state).__name__}, not a Q-RAG checkpoint")
    saved = state.get(CHECKSUM_KEY)
    if saved is None:  # files of versions before the checksum; a deleted entry reads the same
        log.warning("%s has no checksum entry: loaded unchecked (written before checksums, or edited)", path)
    elif saved != state_checksum(state):
        raise CheckpointLoadError(
            f"{path} is corrupt: its contents no longer match the checksum written with it (the file "
            f"changed on disk after it was saved); restore it from a copy"
        )
    return state


def require_keys(state: dict[str, Any], path: Path, keys: Iterable[str], then: str) -> None:
    """Each dotted key must be present in ``state``: one error line naming the missing ones
    (``then``: what to do) instead of a KeyError deep inside the loader."""
    missing = []
    for dotted in keys:
        node: Any = state
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                missing.append(dotted)
                break
            node = node[part]
    if missing:
        raise CheckpointLoadError(
            f"{path} lacks {', '.join(missing)} (it was not written whole by this version of Q-RAG); {then}"
        )
