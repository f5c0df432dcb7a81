"""Access to the top-level ``legacy`` switches (DESIGN §11) with a False default."""

from __future__ import annotations

from typing import Any


def flag(legacy: Any, name: str) -> bool:
    """``legacy.<name>``, False when the node or the key is absent."""
    if legacy is None:
        return False
    try:
        return bool(legacy.get(name, False))
    except AttributeError:
        return bool(getattr(legacy, name, False))
