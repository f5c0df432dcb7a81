"""``resume=true`` continues a run with the run's own config (rl/run/run_folder.py, resume_config):
the command line may change how long and where it runs, never the task, the data, T or the
learner, and a refused resume leaves every file of the run as it was. A run folder may come from
anyone: neither its config.yaml nor its checkpoint's config is resolved against this machine's
environment (issues 46 and 47)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rl.run.run_folder import RESUME_MAY_CHANGE, RunFolderError
from rl.run.train import run
from runstore import load_checkpoint, save_checkpoint
from tests.conftest import ROOT
from tests.reliability.harness import TINY_RUN, metrics, run_cfg
from tests.reliability.test_damaged_run import copy_run

SECRET = "sk-resumers-own-key-0123456789"
ALLOWED = f"A resume may change only {', '.join(RESUME_MAY_CHANGE)}: drop the rest, or start a new run in another folder (hydra.run.dir=...)"


def files(run_dir: Path) -> dict[str, bytes]:
    """Every file of a run folder (its .hydra/ records included) with its bytes."""
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def edit_config(run_dir: Path, edit) -> None:
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    edit(saved)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(saved))


@pytest.mark.parametrize(
    "override, change",
    [
        (
            "envs.task=qa1_single-supporting-fact",
            "envs.task: 'qa2_two-supporting-facts' (run) -> 'qa1_single-supporting-fact'",
        ),
        ("envs.max_steps=3", "envs.max_steps: 2 (run) -> 3"),
        ("learner=dqn", "algo.objective: 'pqn' (run) -> 'dqn'"),
    ],
)
def test_a_resume_that_changes_what_is_learned_is_refused(reference_run, tmp_path, override, change):
    """T changed on resume: a warning, then training went on with the other T."""
    rd = copy_run(reference_run, tmp_path / "run")
    before = files(rd)
    with pytest.raises(RunFolderError) as e:
        run(run_cfg(rd, override, "resume=true"))
    msg = str(e.value)
    assert msg.startswith(
        f"resume=true continues {rd} with its own config (config.yaml); this command changes {change}"
    )
    assert msg.endswith(ALLOWED) and "\n" not in msg
    assert files(rd) == before


def test_more_steps_are_taken_and_kept_for_the_next_resume(reference_run, tmp_path, growing_eval):
    rd = copy_run(reference_run, tmp_path / "run")
    run(run_cfg(rd, "steps_count=2", "resume=true"))
    assert [r["step"] for r in metrics(rd)] == [0, 1, 2]
    saved = yaml.safe_load((rd / "config.yaml").read_text())
    assert saved["steps_count"] == 2 and saved["algo"]["scheduler"]["total"] == "${steps_count}"


def test_the_checkpoints_config_is_never_resolved(reference_run, tmp_path, monkeypatch, caplog):
    """A model_last.pt whose config said ``${oc.env:QRAG_API_KEY}`` (re-saved with a valid
    checksum) put the resuming user's key into the warning, on stderr and in train_q_rag.log."""
    monkeypatch.setenv("QRAG_API_KEY", SECRET)
    rd = copy_run(reference_run, tmp_path / "run", skip=("model_last.pt",))
    state = load_checkpoint(reference_run / "model_last.pt")
    state["config"]["algo"]["note"] = "${oc.env:QRAG_API_KEY}"
    save_checkpoint({k: v for k, v in state.items() if k != "checksum"}, rd / "model_last.pt")
    with caplog.at_level(logging.WARNING, logger="qrag.train"):
        run(run_cfg(rd, "resume=true"))
    assert "algo.note: '${oc.env:QRAG_API_KEY}' -> '<absent>'" in caplog.text
    assert SECRET not in caplog.text


@pytest.mark.parametrize(
    "value, what",
    [
        ("${oc.env:QRAG_API_KEY}", "the resolver oc.env:"),
        ("${..steps_count}", "the relative key ..steps_count"),
    ],
)
def test_a_run_config_reading_this_machine_is_refused_on_resume(reference_run, tmp_path, monkeypatch, value, what):
    monkeypatch.setenv("QRAG_API_KEY", SECRET)
    rd = copy_run(reference_run, tmp_path / "run")
    edit_config(rd, lambda saved: saved["algo"]["model"].update(name=value))
    before = files(rd)
    with pytest.raises(RunFolderError) as e:
        run(run_cfg(rd, "resume=true"))
    assert str(e.value) == (
        f"{rd}/config.yaml: algo.model.name = {value!r} reads {what}, which a run folder's config may not (it "
        f"would be resolved on the resuming machine); replace it with the plain value the run used"
    )
    assert files(rd) == before


def train(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "train_q_rag.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_readmes_continue_line(tmp_path):
    """``python train_q_rag.py resume=true hydra.run.dir=<run>`` as README writes it composed the
    default preset (qa2, contriever) instead of the run's config, failed on its data, and had
    already rewritten the run's .hydra/overrides.yaml and config.yaml with it."""
    rd = tmp_path / "run"
    first = train(*TINY_RUN, "envs.task=qa1_single-supporting-fact", "envs.max_steps=1", f"hydra.run.dir={rd}")
    assert first.returncode == 0, first.stderr[-3000:]
    # the result line the console prints is in the run's log too (issue 47 item 10)
    result = next(x for x in first.stdout.splitlines() if x.startswith("[Q-RAG] best validation return"))
    assert result in (rd / "train_q_rag.log").read_text()
    hydra_files = {k: v for k, v in files(rd).items() if k.startswith(".hydra/")}
    assert "- envs.task=qa1_single-supporting-fact" in hydra_files[".hydra/overrides.yaml"].decode()

    before = {k: v for k, v in files(rd).items() if k != "train_q_rag.log"}
    own = f"error: resume=true continues {rd} with its own config (config.yaml); this command changes "
    for change, first in (("envs.max_steps=3", "envs.max_steps: 1 (run) -> 3"), ("learner=dqn", "algo.objective")):
        refused = train("resume=true", f"hydra.run.dir={rd}", change)
        assert refused.returncode == 2, refused.stderr[-3000:]
        assert refused.stderr.startswith(own + first) and len(refused.stderr.strip().splitlines()) == 1
        assert {k: v for k, v in files(rd).items() if k != "train_q_rag.log"} == before

    # the run's own group choices repeated (the issue's `paths=embedded algo=minilm`) change nothing
    more = train("resume=true", f"hydra.run.dir={rd}", "paths=embedded", "algo=minilm", "steps_count=2")
    assert more.returncode == 0, more.stderr[-3000:]
    assert [r["step"] for r in metrics(rd)] == [0, 1, 2]
    assert {k: v for k, v in files(rd).items() if k.startswith(".hydra/")} == hydra_files
    saved = yaml.safe_load((rd / "config.yaml").read_text())
    assert (saved["steps_count"], saved["envs"]["task"]) == (2, "qa1_single-supporting-fact")
