"""Training runs end to end on the offline MiniLM: run folder contract, refusal, resume equivalence."""

import json
import subprocess
import sys

import pytest
import torch

from rl.learners.pqn import PQNLearner
from rl.run.run_folder import RunFolderError
from rl.run.train import run
from tests.conftest import ROOT, TINY, interrupt_after


def read_metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_run_folder_contract(tiny_cfg, tmp_path, caplog, capsys):
    with caplog.at_level("INFO", logger="qrag.train"):
        summary = run(tiny_cfg())
    rd = tmp_path / "run"
    # every phase says what it does and how much; the run folder is named at the start and the end
    assert f"run folder: {rd}" in caplog.text
    for line in (
        "untrained retriever: 4 test samples",
        "eval: 4 validation samples",
        "trained retriever: 4 test samples",
    ):
        assert line in caplog.text, line
    out = capsys.readouterr().out
    assert "[Q-RAG] held-out test (4 samples): fact F1 untrained" in out and f"; summary: {rd / 'summary.json'}" in out
    for f in ("config.yaml", "config_resolved.yaml", "model_last.pt", "model_best.pt", "metrics.jsonl", "summary.json"):
        assert (rd / f).exists(), f
    assert list((rd / "tb_logs").iterdir())
    assert "${" in (rd / "config.yaml").read_text()  # kept unresolved for eval merging
    rows = read_metrics(rd)
    assert [r["step"] for r in rows] == [0, 2, 4]
    assert all(k in rows[0] for k in ("eval/return", "eval/fact_em", "eval/fact_f1", "env_steps"))
    # no device memory off CUDA (rl/run/device_memory.py): no key, so a CPU run's rows are as before
    assert not [k for r in rows for k in r if k.startswith("gpu/")] and "gpu_GiB" not in caplog.text
    assert "step 4/4" in caplog.text  # the log window whose line would show it
    for k in ("untrained/fact_em", "untrained/fact_f1", "trained/fact_em", "trained/fact_f1"):
        assert 0.0 <= summary[k] <= 1.0
    assert json.loads((rd / "summary.json").read_text())["optimizer_steps"] == 4
    # model_best.pt: only what evaluation reads, the online encoders (targets and AdamW are resume state)
    best = torch.load(rd / "model_best.pt", weights_only=True)
    last = torch.load(rd / "model_last.pt", weights_only=True)
    assert set(best) == {"learner", "best", "step", "config", "code_version", "checksum"} and set(best["learner"]) == {
        "agent"
    }
    assert not [k for k in best["learner"]["agent"] if k.startswith(("target_state.", "target_action."))]
    assert {k.split(".")[0] for k in best["learner"]["agent"]} >= {"state_enc", "action_enc"}
    assert any(k.startswith("target_state.") for k in last["learner"]["agent"])
    assert (rd / "model_best.pt").stat().st_size < 0.3 * (rd / "model_last.pt").stat().st_size
    with pytest.raises(RunFolderError, match="resume=true"):
        run(tiny_cfg())  # a finished run is never silently overwritten


def test_resume_equals_uninterrupted(tiny_cfg, tmp_path, monkeypatch, caplog):
    full_dir, cut_dir = tmp_path / "full", tmp_path / "cut"
    run(tiny_cfg(run_dir=full_dir))

    restore = interrupt_after(monkeypatch, PQNLearner)
    with pytest.raises(KeyboardInterrupt):
        run(tiny_cfg(run_dir=cut_dir))
    restore()
    assert [r["step"] for r in read_metrics(cut_dir)] == [0, 2]
    with caplog.at_level("INFO", logger="qrag.train"):
        run(tiny_cfg("resume=true", run_dir=cut_dir))
    assert read_metrics(cut_dir) == read_metrics(full_dir)
    # the first log line after the resume averages a window that starts there, and says so
    assert "resumed at optimiser step 2: the log line at step 4 averages steps 3-4 only" in caplog.text
    assert "[window since resume: steps 3-4]" in caplog.text
    a = torch.load(full_dir / "model_last.pt", weights_only=False)["learner"]["agent"]
    b = torch.load(cut_dir / "model_last.pt", weights_only=False)["learner"]["agent"]
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=0, rtol=0)


@pytest.mark.parametrize(
    "extra",
    [
        ["legacy=ref"],
        [
            "algo.pqn.hyperparams.soft_target=false",
            "algo.pqn.hyperparams.use_target_networks=false",
            "envs.positions_processor=none",
            "precision=bf16",
        ],
    ],
)
def test_variants_train(tiny_cfg, extra):
    summary = run(tiny_cfg(*extra, "steps_count=2", "final_eval_episodes=0"))
    assert summary["optimizer_steps"] == 2


def test_train_samples_caps_only_the_training_set(tiny_cfg):
    """summary.json says how many samples a run trained on and selected on: train_samples=3 trains on
    3, while model selection (4 validation samples) and the test (4) keep theirs."""
    full = run(tiny_cfg("steps_count=2", run_dir=tiny_cfg().run_dir + "_all"))
    capped = run(tiny_cfg("steps_count=2", "train_samples=3"))
    assert full["train_samples"] > 100 and (full["selection_samples"], full["test_samples"]) == (4, 4)
    assert (capped["train_samples"], capped["selection_samples"], capped["test_samples"]) == (3, 4, 4)


def test_cli_two_steps_and_multirun(tmp_path):
    args = [a for a in TINY if not a.startswith(("steps_count", "eval_interval"))]
    out = subprocess.run(
        [
            sys.executable,
            "train_q_rag.py",
            *args,
            "steps_count=2",
            "eval_interval=1",
            "final_eval_episodes=0",
            f"hydra.run.dir={tmp_path}/single",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "single" / "model_best.pt").exists()
    out = subprocess.run(
        [
            sys.executable,
            "train_q_rag.py",
            "-m",
            *args,
            "steps_count=1",
            "eval_interval=1",
            "final_eval_episodes=0",
            "seed=1,2",
            f"hydra.sweep.dir={tmp_path}/sweep",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    runs = sorted(p.name for p in (tmp_path / "sweep").iterdir() if (p / "summary.json").exists())
    assert len(runs) == 2 and runs == ["0_qa2_two-supporting-facts_seed1", "1_qa2_two-supporting-facts_seed2"]
    for job in runs:  # each job's result line names its job and its summary
        assert f"[Q-RAG job {job}] best validation return" in out.stdout
        assert f"{tmp_path}/sweep/{job}/summary.json" in out.stdout


def test_cli_user_errors_are_one_line(tmp_path):
    missing = subprocess.run(
        [sys.executable, "train_q_rag.py", *TINY, f"paths.data_root={tmp_path}/nowhere", f"hydra.run.dir={tmp_path}/a"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert missing.returncode != 0
    assert "error: Dataset not found" in missing.stderr and "how to get it" in missing.stderr
    assert "Traceback" not in missing.stderr
    offline = subprocess.run(
        [
            sys.executable,
            "train_q_rag.py",
            *TINY,
            "algo.model.name=some-org/not-a-local-model",
            f"hydra.run.dir={tmp_path}/b",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"},
    )
    assert offline.returncode != 0 and "error: could not load model" in offline.stderr
    assert "Traceback" not in offline.stderr
    # failed starts leave no run folder behind (each used to leave .hydra/ and a log)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.parametrize(("extra", "best_step"), [((), 4), (("legacy.best_keeps_earliest_tie=true",), 0)])
def test_a_tied_evaluation_keeps_the_later_model(tiny_cfg, tmp_path, monkeypatch, extra, best_step):
    """A saturated validation set (every evaluation returns the same) must not keep the step-0
    encoder: a tie goes to the later model; the legacy switch restores the reference's strict rule."""
    from rl.run.train import Trainer

    def saturated(self):
        return {"return": 1.0, "fact_em": 1.0, "fact_f1": 1.0, "split": self.eval_split}

    monkeypatch.setattr(Trainer, "in_training_eval", saturated)
    run(tiny_cfg(*extra))
    assert [r["step"] for r in read_metrics(tmp_path / "run")] == [0, 2, 4]
    assert torch.load(tmp_path / "run" / "model_best.pt", weights_only=True)["step"] == best_step
