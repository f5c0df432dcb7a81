from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "other"


@pytest.fixture
def fix() -> Path:
    return FIX


@pytest.fixture
def repo() -> Path:
    return REPO
