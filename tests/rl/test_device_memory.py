"""Device memory per log window and per metrics.jsonl row (rl/run/device_memory.py): nothing on the
CPU, and on CUDA, faked here through torch.cuda's allocator counters, the peaks in GiB since the
previous reading (a log window's) or the previous row (a row's, its evaluation included). A CPU run's
rows and log lines without them: tests/rl/test_train_run.py::test_run_folder_contract."""

from __future__ import annotations

import json

import torch

import rl.run.train as train_mod
from rl.learners.pqn import PQNLearner
from rl.run.device_memory import PEAK_ALLOCATED, PEAK_RESERVED, RESERVED, DeviceMemory
from rl.run.train import Trainer, run

CARD = torch.device("cuda:0")
GIB = 1024**3  # the test's own: a wrong unit in the module must not move the fake with it


class FakeCard:
    """One card's allocator counters in bytes, as torch.cuda reports them: a pass that needs ``a`` GiB
    allocated raises the allocated peak; the reserve only grows (a caching allocator keeps it) until
    ``release``; a reset brings the peaks down to what is held now (1 GiB allocated between passes)."""

    def __init__(self, monkeypatch):
        self.alloc, self.reserved = 1 * GIB, 1 * GIB
        self.peak_a, self.peak_r = self.alloc, self.reserved
        for name, read in (
            ("max_memory_allocated", lambda: self.peak_a),
            ("max_memory_reserved", lambda: self.peak_r),
            ("memory_reserved", lambda: self.reserved),
            ("reset_peak_memory_stats", self.reset),
        ):
            monkeypatch.setattr(torch.cuda, name, self.on_card(read))

    def on_card(self, f):
        def read(device=None):
            assert device == CARD, device  # the run's own device, not the current one
            return f()

        return read

    def use(self, a: float, r: float) -> None:
        self.peak_a = max(self.peak_a, int(a * GIB))
        self.reserved = max(self.reserved, int(r * GIB))
        self.peak_r = max(self.peak_r, self.reserved)

    def release(self, r: float) -> None:  # torch.cuda.empty_cache down to r GiB
        self.reserved = int(r * GIB)

    def reset(self) -> None:
        self.peak_a, self.peak_r = self.alloc, self.reserved


def mem(a: float, pr: float, r: float) -> dict[str, float]:
    return {PEAK_ALLOCATED: a, PEAK_RESERVED: pr, RESERVED: r}


def test_cpu_reads_nothing(monkeypatch):
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: 1 / 0)  # never called off CUDA
    m = DeviceMemory(torch.device("cpu"))
    assert m.window() == {} and m.row() == {}


def test_window_and_row_peaks(monkeypatch):
    card = FakeCard(monkeypatch)
    m = DeviceMemory(CARD)
    card.use(6, 8)  # the warm-up's loss pass
    assert m.window() == mem(6, 8, 8)
    card.use(2, 8)
    assert m.window() == mem(2, 8, 8)  # the warm-up's peak is gone: the counters were reset
    card.use(3, 8)  # the evaluation after the window
    assert m.row() == mem(6, 8, 8)  # the most since the previous row
    card.release(4)
    card.use(2.5, 4)
    assert m.window() == mem(2.5, 8, 4)  # reserved 8 GiB until the release within this window
    assert m.window() == mem(1, 4, 4)
    card.use(3.5, 4)  # an evaluation that needs more than the training since the previous row
    assert m.row() == mem(3.5, 8, 4)  # and not the previous row's 6 GiB


def read_rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def scalars_of(monkeypatch):
    """Every scalar the run sends to TensorBoard: {name: [values]}."""
    seen: dict[str, list[float]] = {}
    original = Trainer.log_scalars

    def record(self, scalars, step):
        for k, v in scalars.items():
            seen.setdefault(k, []).append(v)
        original(self, scalars, step)

    monkeypatch.setattr(Trainer, "log_scalars", record)
    return seen


def test_fake_cuda_run_records_memory(tiny_cfg, tmp_path, monkeypatch, caplog):
    """Log windows at steps 1-4, rows at steps 0, 2, 4; the first optimiser step needs 6 GiB, later ones
    2 GiB, every evaluation 3 GiB."""
    card = FakeCard(monkeypatch)
    monkeypatch.setattr(train_mod, "DeviceMemory", lambda device: DeviceMemory(CARD))
    step, evaluate = PQNLearner.micro_step, Trainer.in_training_eval

    def micro_step(self):
        card.use(6 if self.counters.optimizer_steps == 0 else 2, 8)
        return step(self)

    def in_training_eval(self):
        card.use(3, 8)
        return evaluate(self)

    monkeypatch.setattr(PQNLearner, "micro_step", micro_step)
    monkeypatch.setattr(Trainer, "in_training_eval", in_training_eval)
    seen = scalars_of(monkeypatch)
    with caplog.at_level("INFO", logger="qrag.train"):
        run(tiny_cfg("logger.log_interval=1", "final_eval_episodes=0"))
    rows = read_rows(tmp_path / "run")
    assert [r["step"] for r in rows] == [0, 2, 4]
    assert [{k: r[k] for k in mem(0, 0, 0)} for r in rows] == [mem(3, 8, 8), mem(6, 8, 8), mem(3, 8, 8)]
    assert seen[PEAK_ALLOCATED] == [6, 2, 2, 2] and seen[PEAK_RESERVED] == [8] * 4 and seen[RESERVED] == [8] * 4
    assert "gpu_GiB peak_allocated 6.00 peak_reserved 8.00 reserved 8.00 sps " in caplog.text
