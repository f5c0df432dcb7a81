"""Bad input files and bad config values: one error line each, naming the file (and line) or
the key, and what to do; nothing written before the check."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from envs.data.babi import load_babi_file
from envs.data.noise import load_noise_corpus
from envs.errors import DatasetFormatError
from rl.run.validate import ConfigError, check_eval, check_group_choices, check_training
from tests.conftest import ROOT, TINY, compose_cfg

FIXTURES = ROOT / "tests" / "fixtures" / "babi"
GOOD = FIXTURES / "qa1_single-supporting-fact_test.txt"


def test_babi_question_without_tab_names_file_and_line():
    path = FIXTURES / "question_without_tab.txt"
    with pytest.raises(DatasetFormatError) as e:
        load_babi_file(path)
    assert str(e.value) == (
        f"{path}:3: question without answer: expected '<n> <question>\\t<answer>\\t<supporting "
        f"ids>' (tab-separated); restore the tabs"
    )


@pytest.mark.parametrize(
    "name, message",
    [
        (  # the tabs of a question turned into spaces: it used to become a statement of the story
            "question_tabs_as_spaces.txt",
            "question without answer: expected '<n> <question>\\t<answer>\\t<supporting ids>' (tab-separated); "
            "restore the tabs",
        ),
        (  # accepted, then a traceback when the sample was drawn (and again at every resume)
            "question_without_support.txt",
            "expected '<n> <question>\\t<answer>\\t<supporting ids>' with the supporting line numbers as the "
            "third and last field; every question names the statements "
            "that answer it",
        ),
        (
            "statement_with_tab.txt",
            "expected a statement '<n> <text>' (no tab, no '?') or a question '<n> <question>?\\t<answer>\\t"
            "<supporting ids>'",
        ),
    ],
)
def test_babi_line_shape_names_file_and_line(name, message):
    path = FIXTURES / name
    with pytest.raises(DatasetFormatError) as e:
        load_babi_file(path)
    line = 2 if name == "statement_with_tab.txt" else 3
    assert str(e.value) == f"{path}:{line}: {message}"


def test_binary_txt(tmp_path):
    path = tmp_path / "qa1_single-supporting-fact_train.txt"
    path.write_bytes(GOOD.read_bytes()[:40] + b"\xff\xfe\x00\x01binary")
    with pytest.raises(
        DatasetFormatError,
        match=r"^" + str(path) + r": not UTF-8 text \(byte 0xff at offset 40 "
        r"of a decoded block\); is it a binary file\? Rebuild or re-download it$",
    ):
        load_babi_file(path)


@pytest.mark.parametrize("damage", ["truncated", "not_gzip", "corrupt"])
def test_bad_gz(tmp_path, damage):
    path = tmp_path / "qa1_single-supporting-fact_train.txt.gz"
    data = gzip.compress(GOOD.read_bytes() * 20)
    data = {
        "truncated": data[: len(data) // 2],
        "not_gzip": b"plain text, not gzip\n" * 4,
        "corrupt": data[:20] + bytes(b ^ 0x5A for b in data[20:60]) + data[60:],
    }[damage]
    path.write_bytes(data)
    with pytest.raises(DatasetFormatError) as e:
        load_babi_file(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: not a complete gzip file (")
    assert msg.endswith("); it is corrupt or was cut short: rebuild or re-download it")
    assert "\n" not in msg


def test_noise_corpus_of_empty_books(tmp_path):
    path = tmp_path / "train.jsonl.gz"
    path.write_bytes(gzip.compress(b"".join(json.dumps({"sentences": []}).encode() + b"\n" for _ in range(3))))
    with pytest.raises(DatasetFormatError) as e:
        load_noise_corpus(path)
    assert str(e.value) == f"{path.resolve()}: expected at least one book with sentences (3 books, all empty)"


def test_noise_corpus_of_empty_sentences(tmp_path):
    """Books of empty strings used to train on haystacks of empty chunks."""
    path = tmp_path / "train.jsonl.gz"
    path.write_bytes(gzip.compress(b"".join(json.dumps({"sentences": ["", " "]}).encode() + b"\n" for _ in range(3))))
    with pytest.raises(DatasetFormatError) as e:
        load_noise_corpus(path)
    assert str(e.value) == (
        f"{path.resolve()}: expected sentences with text (3 books, 6 sentences, all empty or blank); rebuild the "
        f"corpus (scripts/build_noise_corpus.py)"
    )


def test_noise_corpus_of_mostly_empty_books_still_draws(tmp_path):
    """5 000 empty books and one real one: the sampler gave up after 100 empty draws (a traceback
    mid-run); it now draws until it meets the real book, as the reference did."""
    import numpy as np

    from envs.data.noise import NoiseSampler

    path = tmp_path / "train.jsonl"
    books = [{"sentences": []}] * 5000 + [{"sentences": ["The only sentence."]}]
    path.write_text("".join(json.dumps(b) + "\n" for b in books))
    sampler = NoiseSampler(load_noise_corpus(path), 100)
    assert sampler.draw(3, np.random.default_rng(0)) == ["The only sentence."] * 3


BAD_VALUES = {
    "batch_size=abc": "batch_size='abc': expected an integer >= 1",
    "batch_size=0": "batch_size=0: expected an integer >= 1",
    "eval_interval=0": "eval_interval=0: expected an integer >= 1",
    "envs_parallel=0": "envs_parallel=0: expected an integer >= 1",
    "envs.max_steps=0": "envs.max_steps=0: expected an integer >= 1",
    "envs.num_sentences=0": "envs.num_sentences=0: expected an integer >= 1 or a list of them",
    "envs.num_sentences=[50,0]": "envs.num_sentences=[50, 0]: expected an integer >= 1 or a list of them",
    "envs.name=nope": "unknown dataset name 'nope' (envs.name); known: ['2WikiMultihopQA', 'babilong', "
    "'babilong_hf', 'combined', 'hotpotqa', 'longbench', 'musique', 'niah', 'ruler_qa']",
    "eval_split=bogus": "eval_split='bogus': expected one of validation, test",
    "algo.optimizer.lr=-1e-5": "algo.optimizer.lr=-1e-05: expected a number > 0 and <= 1",
    "precision=bogus": "precision='bogus': expected one of auto, tf32, fp32, bf16",
    "envs.num_sentences=/../../escaped/x": "envs.num_sentences='/../../escaped/x': expected an integer >= 1 or a list of them",
    "envs.task=../../escaped": "envs.task='../../escaped': expected a plain name (letters, digits, _ . + = , -; "
    "no / and no leading dot)",
    "+feedback.api_key=sk-secret": "feedback.api_key: keys are not taken from the config (it is saved in config.yaml, "
    "the logs and the checkpoint); remove it and export QRAG_API_KEY=<key> instead",
    # the optimiser, schedule and model keys every learner shares (configs/algo/*.yaml)
    "algo.optimizer.betas=[0.9]": "algo.optimizer.betas=[0.9]: expected two numbers in [0, 1)",
    "algo.scheduler.name=Linear": "algo.scheduler.name='Linear': expected one of WarmupLinear, Cosine",
    "algo.scheduler.ratio=2": "algo.scheduler.ratio=2: expected a number >= 0 and <= 1",
    "algo.scheduler.smooth_warmup=maybe": "algo.scheduler.smooth_warmup='maybe': expected true or false",
    "algo.scheduler.total=abc": "algo.scheduler.total='abc': expected an integer >= 0",
    "algo.max_grad_norm=0": "algo.max_grad_norm=0: expected a number > 0",
    "algo.model.pooling=max": "algo.model.pooling='max': expected one of mean, cls, last",
    "algo.model.predictor.num_layers=0": "algo.model.predictor.num_layers=0: expected an integer >= 1 or null",
    "algo.model.predictor.interpolate_factor=0": "algo.model.predictor.interpolate_factor=0: expected a number > 0",
    "algo.model.random_init=maybe": "algo.model.random_init='maybe': expected true or false",
    "algo.pqn.hyperparams.soft_target=maybe": "algo.pqn.hyperparams.soft_target='maybe': expected true or false",
    "jobs_per_gpu=0": "jobs_per_gpu=0: expected an integer >= 1",
    # values that passed the checks, then failed or trained on NaN (issue 26)
    "algo.optimizer.lr=inf": "algo.optimizer.lr=inf: expected a finite number > 0 and <= 1",
    "algo.optimizer.lr=1e30": "algo.optimizer.lr=1e+30: expected a number > 0 and <= 1",
    "algo.optimizer.weight_decay=inf": "algo.optimizer.weight_decay=inf: expected a finite number >= 0 and <= 10000",
    "algo.pqn.hyperparams.alpha=inf": "algo.pqn.hyperparams.alpha=inf: expected a finite number > 0",
    "feedback.ground_truth.per_fact_reward=nan": "feedback.ground_truth.per_fact_reward=nan: expected a finite number",
    "seed=18446744073709551616": "seed=18446744073709551616: expected an integer >= 0 and <= 18446744073709551615",
    "envs.subsample_size=0": "envs.subsample_size=0: expected an integer >= 1",
    "envs.length=0": "envs.length=0: expected an integer >= 1, or -1 for all",
    "train_samples=0": "train_samples=0: expected -1, or an integer >= 1",
    "train_samples=-2": "train_samples=-2: expected -1, or an integer >= 1",
    # the legacy switches (envs/legacy.py): booleans, and only those that exist
    "legacy.oracle_stop=maybe": "legacy.oracle_stop='maybe': expected true or false",
    "+legacy.oracle_stopp=true": "legacy.oracle_stopp: no such legacy switch; known: babi_drop_last_question, "
    "best_keeps_earliest_tie, "
    "drop_last_transition, dropout_in_targets, eval_resample, fixed_noise_seed, ignore_answer_aliases, "
    "lambda_return_off_by_one, niah_raw_sf, oracle_stop, prompt_extra_question_mark, qa_f1_empty_conventions, "
    "repeat_llm_reward, select_on_test, sft_binary_loss, sft_stop_at_first_miss, silent_llm_failures, "
    "target_topk_before_mask",
    "+speed.turbo=true": "speed.turbo: no such speed switch; known: chunk_cache, compile, cuda_graphs, "
    "fused_adamw, length_bucketing, overlap_tokenization, packed_compile, packed_encoder",
    # a credential under any key name, or read from the environment, would be saved in config.yaml,
    # config_resolved.yaml, .hydra/ and the checkpoint
    "+feedback.vllm_config.api_key=sk-secret": "feedback.vllm_config.api_key: keys are not taken from the config "
    "(it is saved in config.yaml, the logs and the checkpoint); remove it and export QRAG_API_KEY=<key> instead",
    "+algo.model.hf_token=hf_abc": "algo.model.hf_token: credentials are not taken from the config (it is saved in "
    "config.yaml, the logs and the checkpoint); remove it and pass it through an environment variable instead",
    "+envs.password=hunter2": "envs.password: credentials are not taken from the config (it is saved in "
    "config.yaml, the logs and the checkpoint); remove it and pass it through an environment variable instead",
    "+envs.note=sk-abcdefghijklmnopqrstuvwxyz": "envs.note: holds what looks like a credential (it would be saved "
    "to files); remove it",
    "algo.model.name=${oc.env:QRAG_API_KEY}": "algo.model.name: reads the environment variable QRAG_API_KEY, a "
    "credential, into the config (it would be saved in config.yaml, the logs and the checkpoint); remove it",
}

# each learner's own keys (its HYPER dataclass, rl/learners/<name>.py), composed with learner=<name>
LEARNER_BAD_VALUES = {
    (
        "learner=dqn",
        "algo.dqn.hyperparams.buffer_size=0",
    ): "algo.dqn.hyperparams.buffer_size=0: expected an integer >= 1",
    (
        "learner=dqn",
        "algo.dqn.hyperparams.n_step=0",
    ): "algo.dqn.hyperparams.n_step=0: expected an integer >= 1 and <= 127",
    ("learner=dqn", "algo.dqn.hyperparams.epsilon_start=1.5"): "algo.dqn.hyperparams.epsilon_start=1.5: expected a "
    "number >= 0 and <= 1",
    ("learner=dqn", "algo.dqn.hyperparams.epsilon_end=-0.1"): "algo.dqn.hyperparams.epsilon_end=-0.1: expected a "
    "number >= 0 and <= 1",
    ("learner=dqn", "envs.positions_processor=random"): "envs.positions_processor='random': learner=dqn replays "
    "transitions from sample indices and does not keep the codes random positions draw per episode; use relative, "
    "absolute or none",
    ("learner=sarsa", "algo.sarsa.hyperparams.use_target_networks=maybe"): "algo.sarsa.hyperparams."
    "use_target_networks='maybe': expected true or false",
    (
        "learner=sac_d",
        "algo.sac_d.hyperparams.alpha_lr=-1",
    ): "algo.sac_d.hyperparams.alpha_lr=-1: expected a number >= 0",
    ("learner=sft", "algo.optimizer.lr=0"): "algo.optimizer.lr=0: expected a number > 0 and <= 1",
    ("algo.objective=dqn",): "algo.objective='dqn' without algo.dqn.hyperparams: choose the learner with learner=dqn, "
    "not algo.objective alone",
}


@pytest.mark.parametrize("override", list(BAD_VALUES))
def test_each_bad_value_has_its_line(override):
    with pytest.raises(ConfigError) as e:
        check_training(compose_cfg(TINY + [override]))
    assert e.value.lines == [BAD_VALUES[override]]


@pytest.mark.parametrize("overrides", list(LEARNER_BAD_VALUES), ids=" ".join)
def test_each_bad_learner_value_has_its_line(overrides):
    with pytest.raises(ConfigError) as e:
        check_training(compose_cfg(TINY + list(overrides)))
    assert e.value.lines == [LEARNER_BAD_VALUES[overrides]]


def test_a_replay_buffer_larger_than_the_machine_is_refused(monkeypatch):
    """The buffer is allocated up front (30 bytes per transition at T = 2): one line before the run
    folder exists, not a MemoryError after it."""
    import rl.learners.dqn as dqn

    monkeypatch.setattr(dqn, "physical_memory", lambda: 2**30)
    ok = ["learner=dqn", f"algo.dqn.hyperparams.buffer_size={2**30 // 30}"]
    check_training(compose_cfg(TINY + ok))  # just fits
    with pytest.raises(ConfigError) as e:
        check_training(compose_cfg(TINY + ["learner=dqn", "algo.dqn.hyperparams.buffer_size=100000000"]))
    assert e.value.lines == [
        "algo.dqn.hyperparams.buffer_size=100000000: the replay buffer needs 2.8 GiB (30 bytes per transition "
        "at envs.max_steps=2), more than this machine's 1.0 GiB"
    ]


def test_cuda_device_on_a_cpu_machine():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ConfigError) as e:
        check_training(compose_cfg(TINY + ["device=cuda:3"]))
    assert e.value.lines == ["device='cuda:3': expected auto or cpu (no CUDA device here)"]


def test_eval_values(tmp_path):
    cfg = compose_cfg(
        TINY
        + [
            "+num_samples=0",
            "+use_last=false",
            "+overwrite=false",
            "+eval={planner: bem, beam_width: 4, beam_expand: 3, stop_q_threshold: null}",
        ]
    )
    with pytest.raises(ConfigError) as e:
        check_eval(cfg)
    assert e.value.lines == [
        "num_samples=0: expected an integer >= 1, or -1 for all",
        "eval.planner='bem': expected one of greedy, beam",
    ]


def test_unknown_preset_name():
    with pytest.raises(ConfigError) as e:
        check_group_choices(["experiment=demoo", "envs=babilong", "seed=3"], ROOT / "configs")
    assert e.value.lines[0].startswith(
        "experiment=demoo: no configs/experiment/demoo.yaml; known: ablation_no_soft_q, "
    )
    with pytest.raises(ConfigError) as e:
        check_group_choices(["learner=foo"], ROOT / "configs")
    assert e.value.lines == ["learner=foo: no learner named 'foo'; known: dqn, pqn, sac_d, sarsa, sft"]


def _train(args: list[str]) -> subprocess.CompletedProcess:
    """``train_q_rag.py`` with ``args`` in a fresh process (Hydra's own startup included)."""
    return subprocess.run(
        [sys.executable, "train_q_rag.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_cli_refuses_before_writing(tmp_path):
    """Every bad value of the command line gets its error line, and no run folder is created
    (so no .hydra/overrides.yaml holds the key given by mistake)."""
    run_dir = tmp_path / "run"
    bad = ["batch_size=abc", "eval_interval=0", "envs.max_steps=0", "precision=bogus", "+feedback.api_key=sk-secret"]
    bad.append("legacy.oracle_stop=maybe")
    out = _train([*TINY, *bad, f"hydra.run.dir={run_dir}"])
    assert out.returncode == 2, out.stderr[-2000:]
    lines = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert lines == [
        "error: precision='bogus': expected one of auto, tf32, fp32, bf16",
        "error: envs.max_steps=0: expected an integer >= 1",
        "error: legacy.oracle_stop='maybe': expected true or false",
        "error: " + BAD_VALUES["+feedback.api_key=sk-secret"],
        "error: batch_size='abc': expected an integer >= 1",
        "error: eval_interval=0: expected an integer >= 1",
    ]
    assert "Traceback" not in out.stderr
    assert not run_dir.exists()
    out = _train(["experiment=demoo", f"hydra.run.dir={run_dir}"])
    assert out.returncode == 2 and out.stderr.startswith("error: experiment=demoo: no configs/experiment/demoo.yaml")
    assert not run_dir.exists()
    # a learner's own values and the shared schedule (these used to fail only once training began)
    dqn = [
        "learner=dqn",
        "algo.dqn.hyperparams.buffer_size=0",
        "algo.dqn.hyperparams.epsilon_start=1.5",
        "algo.optimizer.lr=-1e-5",
        "algo.scheduler.name=Linear",
        "envs.positions_processor=random",
    ]
    out = _train([*TINY, *dqn, f"hydra.run.dir={run_dir}"])
    assert out.returncode == 2, out.stderr[-2000:]
    assert [line for line in out.stderr.splitlines() if line.startswith("error: ")] == [
        "error: algo.optimizer.lr=-1e-05: expected a number > 0 and <= 1",
        "error: " + BAD_VALUES["algo.scheduler.name=Linear"],
        # the learner's keys in its dataclass's field order (rl/learners/dqn.py), then its cross-key checks
        "error: " + LEARNER_BAD_VALUES[("learner=dqn", "algo.dqn.hyperparams.buffer_size=0")],
        "error: " + LEARNER_BAD_VALUES[("learner=dqn", "algo.dqn.hyperparams.epsilon_start=1.5")],
        "error: " + LEARNER_BAD_VALUES[("learner=dqn", "envs.positions_processor=random")],
    ]
    assert "Traceback" not in out.stderr and not run_dir.exists()


@pytest.mark.parametrize("preset", sorted(p.stem for p in (ROOT / "configs" / "experiment").glob("*.yaml")))
def test_every_preset_passes_the_checks(preset):
    check_training(compose_cfg([f"experiment={preset}", "device=cpu"]))


def test_eval_cli_refuses_before_writing(tmp_path):
    from tests.eval.conftest import write_run_config

    write_run_config(tmp_path / "run")
    out = subprocess.run(
        [sys.executable, "eval_retriever.py", f"pretrained_path={tmp_path}/run", "eval.planner=bem", "num_samples=0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert [line for line in out.stderr.splitlines() if line.startswith("error: ")] == [
        "error: num_samples=0: expected an integer >= 1, or -1 for all",
        "error: eval.planner='bem': expected one of greedy, beam",
    ]
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["config.yaml"]  # not even .eval_hydra/
    out = subprocess.run(
        [sys.executable, "eval_retriever.py", f"pretrained_path={tmp_path}/nowhere"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2 and out.stderr.startswith(
        f"error: pretrained_path={tmp_path}/nowhere: no config.yaml there (expected the folder of a training run"
    )
    assert not (tmp_path / "nowhere").exists()
