"""Reading the JSONL files evaluations and readers write, for the scripts that score or repackage
them (scripts/leaderboard.py babilong, scripts/ruler_effective_length.py): the reading side of
:func:`runstore.append_line`.

These files may come from a run that was killed, a disk that filled or another machine: a
half-written last line (the writer killed mid-line) is skipped with a warning, as the readers of
eval_retriever.py and eval_llm_*.py skip it; anything else that cannot be read is an
:class:`InputError`, one line naming the file (and line) and why.
"""

from __future__ import annotations

import gzip
import json
import sys
import zlib
from pathlib import Path
from typing import Any


class InputError(ValueError):
    """An input that cannot be read: one line naming it and why."""


def read_bytes(path: Path) -> bytes:
    """The bytes of ``path``, gunzipped when it is named ``.gz``."""
    if path.is_dir():
        raise InputError(f"{path}: a folder, not a file")
    if not path.exists():
        raise InputError(f"{path}: no such file")
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as e:  # unreadable, not gzip, a truncated gzip
        raise InputError(f"{path}: cannot be read ({e or type(e).__name__})") from None


def read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, JSON object) of each line of a ``.jsonl`` / ``.jsonl.gz`` file, blank lines skipped."""
    lines = read_bytes(path).split(b"\n")
    rows = []
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise InputError(f"{path}:{n}: not UTF-8 text (byte {e.start + 1} of the line)") from None
        except json.JSONDecodeError as e:
            if n == len(lines):  # no newline after it: the last line of a writer that was killed
                print(f"warning: {path}:{n}: skipped a half-written last line", file=sys.stderr)
                break
            raise InputError(f"{path}:{n}: not valid JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise InputError(f"{path}:{n}: expected a JSON object, got {type(row).__name__}")
        rows.append((n, row))
    return rows
