"""Progress bars that log lines do not run into.

A tqdm bar leaves the cursor at the end of its line; a log record written to the terminal at that
moment (Hydra's console handler writes to stdout, the bar to stderr, both on one terminal) lands
on the bar's line: ``…sps=5.3][2026-11-27 06:03:40 …``. While a bar is shown, ``progress`` routes
the root logger's console handlers through ``tqdm.write``, which clears the bars, writes the line
and redraws them. File handlers (the run's ``train_q_rag.log``) are left as they are.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm


def _writes_to_console(handler: logging.Handler) -> bool:
    return isinstance(handler, logging.StreamHandler) and handler.stream in (sys.stdout, sys.stderr)


@contextmanager
def progress(iterable: Any = None, **kwargs: Any) -> Iterator[Any]:
    """``tqdm(iterable, **kwargs)``, closed on leaving; console logging goes through it while shown.

    Nothing is redirected for a disabled bar, or where the root logger has no console handler
    (retrieve.py configures none: a handler added here would print records that are otherwise not shown)."""
    bar = tqdm(iterable, **kwargs)
    try:
        if bar.disable or not any(_writes_to_console(h) for h in logging.getLogger().handlers):
            yield bar
        else:
            with logging_redirect_tqdm(tqdm_class=tqdm):
                yield bar
    finally:
        bar.close()
