"""Shared paths for the BabiLong data tests."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "babi"
EMBEDDED = REPO / "data"
BABI_DIR = "${paths.data_root}/babilong/babi/en-10k"  # as configs/paths/embedded.yaml


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
