"""Print the README's tables of the schema keys (rl/schema.py): every learner's
``algo.<name>.hyperparams`` and the shared ``algo`` keys, one row per key with its default and doc.
Usage: python scripts/config_tables.py (tests/rl/test_hyperparams.py checks the README holds them)."""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from rl.run.config import schema_tables  # noqa: E402

for title, rows in schema_tables().items():
    print(f"{title}\n\n| key | default | what |\n|---|---|---|")
    print("\n".join(rows) + "\n")
