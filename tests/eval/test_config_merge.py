"""DESIGN §8.6 merge rule: CLI > testing.yaml > the run's saved (unresolved) config."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from envs.data.registry import build_dataset
from envs.legacy import Legacy
from rl.run.eval_config import EvalError, merge_eval_config
from rl.run.eval_records import eval_stem

from .conftest import compose_cfg, eval_cfg


def test_priority_cli_over_testing_over_saved(config_run: Path) -> None:
    cfg = merge_eval_config(eval_cfg(config_run))
    # BabiLong default: the official token budget of testing.yaml ("1K"), whatever unit the run trained in
    assert (cfg.envs.length_unit, cfg.envs.num_tokens, cfg.envs.num_sentences) == ("tokens", 1000, 10)
    assert cfg.seed == 42  # testing.yaml beats the run's seed 7
    assert cfg.envs.max_steps == 2  # testing.yaml null = keep the run's value
    assert cfg.envs.task == "qa1_single-supporting-fact"
    assert cfg.algo.model.predictor.num_layers == 1  # untouched training keys survive
    cli = merge_eval_config(eval_cfg(config_run, "envs.num_sentences=1200", "envs.max_steps=4", "seed=3"))
    assert (cli.envs.num_sentences, cli.envs.max_steps, cli.seed) == (1200, 4, 3)
    assert cli.envs.length_unit == "sentences"  # a sentence count asks for the reference's sizing
    both = merge_eval_config(eval_cfg(config_run, "envs.num_sentences=1200", "envs.length_unit=tokens"))
    assert (both.envs.length_unit, both.envs.num_tokens) == ("tokens", 1000)  # an explicit unit wins


def test_overrides_reach_the_dataset(config_run: Path) -> None:
    cfg = merge_eval_config(eval_cfg(config_run, "envs.num_sentences=40", "envs.task=qa2_two-supporting-facts"))
    assert cfg.envs.facts_test_path.endswith("qa2_two-supporting-facts_test.txt")
    ds = build_dataset(cfg.envs, "test", int(cfg.seed), 0.0, Legacy.from_cfg(cfg.legacy))
    assert len(ds[0]["chunks"]) == 40


def test_undeclared_training_key_needs_plus(config_run: Path) -> None:
    cfg = merge_eval_config(eval_cfg(config_run, "+algo.model.pool_scale=0.5"))
    assert cfg.algo.model.pool_scale == 0.5


def test_missing_pretrained_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EvalError, match="pretrained_path is required"):
        merge_eval_config(compose_cfg("testing", []))
    with pytest.raises(EvalError, match="no config.yaml"):
        merge_eval_config(eval_cfg(tmp_path))


def test_eval_env_replaces_only_the_test_env(config_run: Path) -> None:
    cfg = merge_eval_config(eval_cfg(config_run, "eval_env=babilong_hf"))
    assert cfg.envs.name == "babilong_hf"
    assert cfg.envs.max_steps == 2 and cfg.envs.positions_processor == "relative"  # the run's
    assert cfg.envs.task == "qa1_single-supporting-fact"  # BabiLong task kept
    saved = OmegaConf.load(config_run / "config.yaml")
    assert cfg.max_action_length == saved.max_action_length  # encoder settings untouched
    assert eval_stem(cfg) == "eval_seed42_hf4k"
    cli = merge_eval_config(eval_cfg(config_run, "eval_env=niah", "envs.max_steps=5"))
    assert (cli.envs.name, cli.envs.max_steps, cli.envs.test_split) == ("niah", 5, "test4k")
    assert eval_stem(cli) == "eval_seed42_test4k_T5"  # T other than the run's (2): named


def test_file_names_follow_settings(config_run: Path) -> None:
    assert eval_stem(merge_eval_config(eval_cfg(config_run, "seed=1", "envs.num_sentences=160"))) == "eval_seed1_ns160"
    beam = merge_eval_config(
        eval_cfg(config_run, "eval.planner=beam", "eval.beam_width=2", "eval.beam_expand=2", "use_last=true")
    )
    assert eval_stem(beam) == "eval_seed42_nt1000_last_beam2x2"
    tokens = merge_eval_config(eval_cfg(config_run, "envs.length_unit=tokens", "envs.num_tokens=32000"))
    assert eval_stem(tokens) == "eval_seed42_nt32000"  # BabiLong's official token sizing
    stop = merge_eval_config(eval_cfg(config_run, "eval.stop_q_threshold=0.5", "+legacy.oracle_stop=true"))
    assert eval_stem(stop) == "eval_seed42_nt1000_qstop0.5_oracle"


def test_eval_file_names_of_the_other_datasets(config_run: Path) -> None:
    """Each dataset names its files by what sets its test samples (envs/data/ specs)."""
    stems = {
        env: eval_stem(merge_eval_config(eval_cfg(config_run, f"eval_env={env}", *extra)))
        for env, extra in [
            ("niah", ["envs.test_split=test16k"]),
            ("ruler_qa", []),
            ("hotpotqa", []),
            ("musique", []),
            ("longbench", ["envs.task=trec", "+envs.longbench_e=true"]),
            ("babilong_hf", ["+envs.context_length=32k"]),
        ]
    }
    assert stems == {
        "niah": "eval_seed42_test16k",
        "ruler_qa": "eval_seed42_test",
        # a dataset naming no part of its own, not the run's: named (HotpotQA and MuSiQue apart)
        "hotpotqa": "eval_seed42_hotpotqa",
        "musique": "eval_seed42_musique",
        "longbench": "eval_seed42_lb-trec_e",
        "babilong_hf": "eval_seed42_hf32k",
    }
    niah = merge_eval_config(eval_cfg(config_run, "eval_env=niah"))
    assert niah.envs.task == "mv_niah"  # another family: the run's bAbI task is not carried over
    from rl.run.eval_records import eval_meta

    hf = merge_eval_config(eval_cfg(config_run, "eval_env=babilong_hf", "+envs.context_length=32k"))
    meta = {name: eval_meta(c, config_run / "model_best.pt", "sha256:x") for name, c in [("niah", niah), ("hf", hf)]}
    assert (meta["hf"]["context_length"], meta["hf"]["num_sentences"], meta["hf"]["length"]) == ("32k", None, None)
    assert (meta["niah"]["context_length"], meta["niah"]["split"]) == (None, "test4k")
    assert meta["niah"]["data_path"].endswith("niah_multivalue") and meta["hf"]["task"] == "qa1_single-supporting-fact"


# A run folder written before the token mode and before the dead keys went (experiments/h200_minilm: a real run of then).
REPO = Path(__file__).resolve().parents[2]
OLD_RUN = REPO / "experiments" / "h200_minilm" / "qa1" / "config.yaml"


def test_old_run_folder_is_upgraded_once(tmp_path: Path) -> None:
    from rl.run.config import upgrade_run_config
    from rl.run.eval_records import eval_meta

    saved = OmegaConf.to_container(OmegaConf.load(OLD_RUN), resolve=False)
    assert "length_unit" not in saved["envs"] and "env" in saved["envs"]  # the fixture is what it claims
    up = upgrade_run_config(saved)
    assert "env" not in up["envs"] and "test_env" not in up["envs"]
    assert "input_dim" not in up["algo"]["model"]["predictor"] and "max_seq_len" not in up["algo"]["model"]["predictor"]
    assert (up["envs"]["length_unit"], up["envs"]["length_tokenizer"]) == ("sentences", "gpt2")  # what that run used
    assert saved["envs"]["env"] == {"max_steps": "${envs.max_steps}"}  # the input is not modified
    run = tmp_path / "old_run"
    run.mkdir()
    (run / "config.yaml").write_text(OLD_RUN.read_text())
    cfg = merge_eval_config(eval_cfg(run, "envs.num_sentences=1200"))
    assert eval_stem(cfg) == "eval_seed42_ns1200"
    meta = eval_meta(cfg, run / "model_best.pt", "sha256:x")
    assert meta["length"] == {"unit": "sentences", "tokenizer": "gpt2"} and meta["num_sentences"] == 1200
    assert meta["data_path"].endswith("qa1_single-supporting-fact_test.txt")
    tokens = merge_eval_config(eval_cfg(run, "envs.length_unit=tokens", "envs.num_tokens=8000"))
    assert eval_stem(tokens) == "eval_seed42_nt8000" and tokens.envs.prompt_reserve_tokens == 300
    # configs/envs/hotpotqa.yaml reads paths.hotpotqa_dir, which that run's paths node predates
    assert up["paths"]["hotpotqa_dir"] == "${paths.data_root}/hotpotqa" and "hotpotqa_dir" not in saved["paths"]
    hotpot = merge_eval_config(eval_cfg(run, "eval_env=hotpotqa"))
    assert hotpot.envs.data_path == f"{hotpot.paths.data_root}/hotpotqa/"


def test_eval_meta_names_the_data_it_read(tmp_path: Path) -> None:
    """settings.data_sha256 is the uncompressed content's sha256, as data/babilong/babi/MANIFEST.json records it."""
    import json

    from rl.run.eval_records import eval_meta

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(OLD_RUN.read_text())
    data = REPO / "data/babilong"
    manifest = json.loads((data / "babi/MANIFEST.json").read_text())
    want = {e["file"]: e["sha256"] for e in manifest["files"]}
    name = "qa1_single-supporting-fact_test.txt"
    real = merge_eval_config(eval_cfg(run, f"+envs.facts_test_path={data}/babi/en-10k/{name}"))
    assert eval_meta(real, run / "model_best.pt", "sha256:x")["data_sha256"] == want[f"en-10k/{name}.gz"]
    generated = merge_eval_config(eval_cfg(run, f"+envs.facts_test_path={data}/babi-generated/en-10k/{name}"))
    got = eval_meta(generated, run / "model_best.pt", "sha256:x")["data_sha256"]
    assert len(got) == 64 and got not in want.values()
    missing = merge_eval_config(eval_cfg(run, f"+envs.facts_test_path={tmp_path}/{name}"))
    assert eval_meta(missing, run / "model_best.pt", "sha256:x")["data_sha256"] is None
