"""Errors raised by dataset loaders: they always name the file (and line or record)."""

from __future__ import annotations

import os
from pathlib import Path


class DatasetFormatError(ValueError):
    """Malformed input: names the file, the line/record and what was expected."""

    def __init__(self, path: str | Path, location: str | int | None, message: str):
        loc = f":{location}" if isinstance(location, int) else (f" ({location})" if location else "")
        super().__init__(f"{path}{loc}: {message}")
        self.path = str(path)
        self.location = location


class DatasetNotFoundError(FileNotFoundError):
    """A dataset file/folder is missing: says what format it should be and how to get it."""

    def __init__(self, path: str | Path, what: str, how_to_get: str):
        path = os.path.normpath(str(path))  # show ".../datasets", not "<repo>/../datasets"
        super().__init__(f"Dataset not found: {path}\n  expected: {what}\n  how to get it: {how_to_get}")
        self.path = path


class FeedbackError(RuntimeError):
    """The reward could not be computed (e.g. the LLM-feedback server is unreachable): one line
    naming the server and what to do."""
