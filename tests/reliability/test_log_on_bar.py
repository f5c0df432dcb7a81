"""Issue 36 item 19: log lines written while a progress bar is shown start on their own line.

A tiny training run with its bar on writes the bar and the console log into one stream, as a
terminal shows stdout and stderr together; the stream is replayed as a terminal draws it (a carriage
return goes back to the line's start, later characters overwrite earlier ones), and every log line
must start at the first column: ``…sps=5.3][2026-11-27 06:03:40 …`` is the failure.
"""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

PREFIX = "LOG "  # the console format's start: every log line on the screen must begin with it


def screen(stream: str) -> list[str]:
    """The lines a terminal shows for ``stream``."""
    lines: list[list[str]] = [[]]
    col = 0
    for ch in stream:
        if ch == "\n":
            lines.append([])
            col = 0
        elif ch == "\r":
            col = 0
        else:
            line = lines[-1]
            line.extend(" " * (col + 1 - len(line)))
            line[col] = ch
            col += 1
    return ["".join(chars).rstrip() for chars in lines]


def test_screen_replays_carriage_returns():
    assert screen("train:  0%|\rtrain: 50%|\n[log] a\nabc\rX") == ["train: 50%|", "[log] a", "Xbc"]


@contextmanager
def terminal() -> Iterator[io.StringIO]:
    """stdout and stderr as one stream, and a console log handler on the root logger, as Hydra sets
    one up. Entered in the test's body: pytest puts its own capture back after a fixture's setup."""
    term = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "stdout", term)
        mp.setattr(sys, "stderr", term)
        root = logging.getLogger()
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter(PREFIX + "[%(name)s][%(levelname)s] - %(message)s"))
        level = root.level
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        try:
            yield term
        finally:
            root.removeHandler(handler)
            root.setLevel(level)


def test_log_lines_start_on_their_own_line_under_the_training_bar(tiny_cfg):
    from rl.run.train import run

    cfg = tiny_cfg("logger.progress_bar=true", "logger.log_interval=1", "logger.tensorboard=false")
    with terminal() as term:
        run(cfg)
    shown = screen(term.getvalue())
    assert any(line.startswith("train:") for line in shown), "the bar was never drawn"
    logged = [line for line in shown if PREFIX + "[qrag." in line]
    assert any("step 1/4" in line for line in logged) and any("eval @ step 2" in line for line in logged)
    on_bar = [line for line in logged if not line.startswith(PREFIX)]
    assert not on_bar, f"log lines drawn on a bar's line: {on_bar[:3]}"


def test_the_console_handler_is_restored_and_a_disabled_bar_redirects_nothing():
    from rl.run.progress import progress

    with terminal():
        before = list(logging.getLogger().handlers)
        with progress(total=2, disable=True):
            assert logging.getLogger().handlers == before
        with progress(total=2):
            assert logging.getLogger().handlers != before
        assert logging.getLogger().handlers == before
