"""A run folder from someone else is data: evaluation takes from its config.yaml only what
describes the trained model and its environment (rl/run/evaluate.py RUN_KEYS), never the feedback
server, the output folder or a value read from the evaluating machine's environment."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rl.run.eval_config import EvalError, merge_eval_config
from tests.eval.conftest import eval_cfg, write_run_config

EVIL = "http://203.0.113.9:8000/v1"


def saved_with(run_dir: Path, edit) -> None:
    """A run folder whose config.yaml was edited by its author (``edit`` changes the plain dict)."""
    write_run_config(run_dir)
    saved = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"), resolve=False)
    edit(saved)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(saved)))


def test_run_config_cannot_choose_the_feedback_server(tmp_path):
    """It made the evaluation POST every test prompt, with the evaluator's API key, to its server."""

    def llm(saved):
        saved["feedback"] = {"type": "llm", "use_api": True, "api_base_url": EVIL, "model": "x"}

    saved_with(tmp_path, llm)
    merged = merge_eval_config(eval_cfg(tmp_path))
    assert merged.feedback.type == "gt"
    assert EVIL not in OmegaConf.to_yaml(merged)
    # the evaluating user picks the LLM reward, with their own server
    own = merge_eval_config(eval_cfg(tmp_path, "feedback=llm"))
    assert own.feedback.type == "babilong_em" and own.feedback.api_base_url == "http://localhost:10001/v1"


def test_run_config_cannot_choose_where_evaluation_writes(tmp_path):
    def elsewhere(saved):
        saved["output_dir"] = str(tmp_path / "victim")
        saved["eval"] = {"haystack_cache": {"dir": str(tmp_path / "victim")}}

    saved_with(tmp_path / "run", elsewhere)
    merged = merge_eval_config(eval_cfg(tmp_path / "run"))
    assert merged.output_dir is None
    assert "victim" not in OmegaConf.to_yaml(merged)


@pytest.mark.parametrize(
    "value, what",
    [
        ("${oc.env:QRAG_API_KEY}", "the resolver oc.env:"),
        ("x-${oc.env:QRAG_API_KEY,none}", "the resolver oc.env:"),
        ("${oc.decode:${oc.env:QRAG_API_KEY}}", "the resolver oc.decode:"),
        ("${feedback.api_base_url}", "the key feedback.api_base_url"),
        ("${...pretrained_path}", "the relative key ...pretrained_path"),  # passed as inside the run's keys
    ],
)
def test_run_config_cannot_read_the_evaluators_environment(tmp_path, monkeypatch, value, what):
    """``${oc.env:...}`` in a saved config was resolved at merge time: the secret landed in the
    .meta.json and in the error line."""
    monkeypatch.setenv("QRAG_API_KEY", "sk-evaluators-own-key-0123456789")

    def env(saved):
        saved["algo"]["model"]["name"] = value

    saved_with(tmp_path, env)
    with pytest.raises(EvalError) as e:
        merge_eval_config(eval_cfg(tmp_path))
    assert str(e.value) == (
        f"{tmp_path}/config.yaml: algo.model.name = {value!r} reads {what}, which a run folder's config may not "
        f"(it would be resolved on the evaluating machine); replace it with the plain value the run used"
    )
    assert "sk-evaluators" not in str(e.value)


def test_plain_references_of_a_run_config_still_resolve(tmp_path):
    """``algo.scheduler.total: ${steps_count}`` (a key the evaluation does not take) gets the saved value."""
    write_run_config(tmp_path)
    saved = OmegaConf.to_container(OmegaConf.load(tmp_path / "config.yaml"), resolve=False)
    assert saved["algo"]["scheduler"]["total"] == "${steps_count}"
    merged = merge_eval_config(eval_cfg(tmp_path))
    assert merged.algo.scheduler.total == OmegaConf.load(tmp_path / "config.yaml").steps_count
    assert "steps_count" not in merged


@pytest.mark.parametrize(
    "missing", ["precision", "eval_group_size", "max_state_length", "envs.sort_by_index", "feedback"]
)
def test_an_older_run_config_evaluates_with_defaults_and_a_warning(tmp_path, caplog, missing):
    """Keys missing from another version's config gave omegaconf tracebacks at evaluation."""

    def drop(saved):
        node = saved
        *parents, leaf = missing.split(".")
        for k in parents:
            node = node[k]
        del node[leaf]

    saved_with(tmp_path, drop)
    with caplog.at_level(logging.WARNING, logger="qrag.eval"):
        merged = merge_eval_config(eval_cfg(tmp_path))
    want = {
        "precision": "auto",
        "eval_group_size": 8,
        "max_state_length": None,
        "envs.sort_by_index": True,
        "feedback": None,
    }[missing]
    if missing == "feedback":
        assert merged.feedback.type == "gt" and not caplog.records  # the evaluator's, as for every run
    else:
        assert OmegaConf.select(merged, missing) == want
        assert [r.getMessage() for r in caplog.records] == [
            f"{tmp_path}/config.yaml lacks {missing}={want!r} (another version of Q-RAG): evaluating with "
            f"today's defaults"
        ]
    from rl.run.validate import check_eval

    check_eval(merged)


def test_a_speed_switch_of_a_newer_version_is_ignored(tmp_path, caplog):
    from rl.model.fast.switches import SpeedSwitches

    def newer(saved):
        saved["speed"]["warp_drive"] = True

    saved_with(tmp_path, newer)
    with caplog.at_level(logging.WARNING, logger="qrag.eval"):
        merged = merge_eval_config(eval_cfg(tmp_path))
    assert "warp_drive" not in merged.speed
    SpeedSwitches.from_run_cfg(merged)  # raised "unknown speed switch(es)"
    assert any("speed switch(es) warp_drive unknown to this version, ignored" in r.getMessage() for r in caplog.records)


def test_a_read_only_run_folder_evaluates_into_output_dir(tmp_path, monkeypatch):
    """Hydra's own folder (.eval_hydra/) defaulted into the run folder even with output_dir=
    elsewhere, so a read-only run folder could not be evaluated at all."""
    import runstore as storage
    from rl.run.callbacks import check_output_folder
    from rl.run.validate import ConfigError

    run, out = tmp_path / "run", tmp_path / "out"
    write_run_config(run)
    base = [f"pretrained_path={run}", "device=cpu"]
    cfg = compose_cfg_hydra(base + [f"output_dir={out}"])
    assert Path(cfg.hydra.run.dir).parent == out / ".eval_hydra"
    real = storage.probe_writable
    monkeypatch.setattr(
        storage, "probe_writable", lambda p: PermissionError(13, "") if run in [p, *p.parents] else real(p)
    )
    check_output_folder(cfg, "eval")
    inside = compose_cfg_hydra(base)
    with pytest.raises(ConfigError) as e:  # the run folder itself as the output: one line, before Hydra writes
        check_output_folder(inside, "eval")
    assert e.value.lines == [
        f"cannot write in {inside.hydra.run.dir} (permission denied); make it writable, or pass "
        f"output_dir=<a writable folder>"
    ]


def compose_cfg_hydra(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    from rl.run.config import PROJECT_ROOT

    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "configs"), version_base="1.3"):
        cfg = compose("testing", overrides=overrides, return_hydra_config=True)
    OmegaConf.resolve(cfg.hydra.run)  # fix ${now:} once, as Hydra does
    return cfg


def test_an_unreachable_feedback_server_is_one_line():
    """It ended in a traceback; FeedbackError is one of both entry points' user errors."""
    import eval_retriever
    import train_q_rag
    from envs.errors import FeedbackError
    from envs.feedback_llm import LLMFeedback
    from prompts_and_metrics.llm.server_backend import ServerBackend
    from tests.readers.conftest import llm_feedback_cfg

    backend = ServerBackend("m", "http://127.0.0.1:9/v1", max_retries=0, timeout_s=2)
    fb = LLMFeedback(llm_feedback_cfg(), task="qa1", backend=backend)
    sample = {"id": "s0", "question": "Where is Mary?", "answer": "garden", "chunks": ["a.", "b."], "sf_idx": [0]}
    fb.reset(0, sample)
    with pytest.raises(FeedbackError) as e:
        fb.step([0], [[0]])
    assert "\n" not in str(e.value) and "127.0.0.1:9" in str(e.value)
    assert FeedbackError in eval_retriever.USER_ERRORS and FeedbackError in train_q_rag.USER_ERRORS


def test_a_checkpoint_without_weights_is_one_line(tmp_path):
    import torch

    from rl.run.load_run import load_qnet
    from runstore import CheckpointLoadError, save_checkpoint

    write_run_config(tmp_path)
    save_checkpoint({"config": {}, "best": 0.0}, tmp_path / "model_best.pt")
    with pytest.raises(CheckpointLoadError) as e:
        load_qnet(merge_eval_config(eval_cfg(tmp_path)), tmp_path / "model_best.pt", torch.device("cpu"))
    assert str(e.value) == (
        f"{tmp_path}/model_best.pt lacks learner.agent (it was not written whole by this version of Q-RAG); "
        f"restore it from a copy"
    )


# -- issue 36 item 8: the run's data paths, and file content in errors --------------------------
SECRET = "QRAG_API_KEY=sk-live-0123456789"


def test_run_config_cannot_point_evaluation_at_a_file_outside_the_data_roots(tmp_path):
    """It made evaluation open a file of secrets, and the bAbI loader's error printed its first line."""
    secrets = tmp_path / "secrets.env"
    secrets.write_text(SECRET + "\n")

    def point(saved):
        saved["envs"]["facts_test_path"] = str(secrets)

    saved_with(tmp_path / "run", point)
    with pytest.raises(EvalError) as e:
        merge_eval_config(eval_cfg(tmp_path / "run"))
    assert str(e.value) == (
        f"{tmp_path}/run/config.yaml: envs.facts_test_path = {secrets} lies outside the data roots "
        "(configs/paths/*.yaml's data_root and ruler_root); a run folder's config may not choose which local "
        "files evaluation reads: to read it, pass +envs.facts_test_path=<path> (or +paths.<key>=<folder>) on the "
        "command line"
    )
    # the evaluating user may name any file; the retriever tool reads no data file at all
    mine = merge_eval_config(eval_cfg(tmp_path / "run", f"+envs.facts_test_path={secrets}"))
    assert mine.envs.facts_test_path == str(secrets)
    assert merge_eval_config(eval_cfg(tmp_path / "run"), reads_data=False).envs.facts_test_path == str(secrets)


def test_run_paths_cannot_climb_out_of_a_data_root_or_move_the_root(tmp_path):
    def climb(saved):
        saved["envs"]["noise_test_path"] = "${paths.data_root}/../../../etc/passwd"

    saved_with(tmp_path / "climb", climb)
    with pytest.raises(EvalError, match=r"envs\.noise_test_path = .*/etc/passwd lies outside the data roots"):
        merge_eval_config(eval_cfg(tmp_path / "climb"))

    def move(saved):
        saved["paths"]["data_root"] = str(tmp_path / "home")

    saved_with(tmp_path / "move", move)
    with pytest.raises(EvalError, match=r"envs\.noise_test_path = .*/home/babilong/pg19-with-sentences/test lies"):
        merge_eval_config(eval_cfg(tmp_path / "move"))
    # the same root named by the evaluating user is theirs to read
    merged = merge_eval_config(eval_cfg(tmp_path / "move", f"+paths.data_root={tmp_path / 'home'}"))
    assert merged.envs.noise_test_path == f"{tmp_path}/home/babilong/pg19-with-sentences/test"


def test_a_training_file_outside_the_roots_counts_only_when_evaluation_tests_on_it(tmp_path):
    def train_outside(saved):
        saved["envs"]["facts_train_path"] = str(tmp_path / "secrets.env")

    saved_with(tmp_path / "run", train_outside)
    merge_eval_config(eval_cfg(tmp_path / "run"))  # the test split reads facts_test_path only
    with pytest.raises(EvalError, match=r"envs\.facts_train_path = .*secrets\.env lies outside the data roots"):
        merge_eval_config(eval_cfg(tmp_path / "run", "envs.test_split=train"))


def test_every_committed_run_folder_still_evaluates(committed_runs):
    """The committed rounds' run folders (in the open and in their archives) record
    ``${paths.root_dir}/data/...``: all under the data roots."""
    from rl.run.config import PROJECT_ROOT

    trees = [PROJECT_ROOT / "experiments", *committed_runs.values()]
    configs = sorted(c for tree in trees for c in tree.glob("**/config.yaml"))
    assert len(configs) >= 40
    for config in configs:
        merge_eval_config(eval_cfg(config.parent))


@pytest.mark.parametrize("lines", [[SECRET], ["1 Mary went to the garden.", SECRET]])
def test_a_loader_error_never_shows_the_files_content(tmp_path, lines):
    from envs.data.babi import load_babi_file
    from envs.errors import DatasetFormatError

    path = tmp_path / "qa1_single-supporting-fact_test.txt"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetFormatError) as e:
        load_babi_file(path)
    assert str(e.value) == f"{path}:{len(lines)}: expected '<line number> <text>' with a numeric line number"
