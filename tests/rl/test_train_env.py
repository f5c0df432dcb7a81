"""The training environments' dataset skips the length tokenizer; evaluation datasets keep num_tokens."""

import torch

from envs.data.registry import build_dataset
from envs.feedback import build_feedback
from rl.run.build import train_env
from tests.conftest import compose_cfg


def test_training_samples_skip_num_tokens_evaluation_samples_keep_it():
    cfg = compose_cfg(["experiment=demo", "envs.num_sentences=8"])
    for vf in (0.0, 0.2):  # the whole training set, and the training part of a train/validation split
        train = build_dataset(cfg.envs, "train", 0, vf)
        env = train_env(cfg, train, build_feedback(cfg.feedback, cfg.envs, "train"), torch.device("cpu"), 0)
        env.reset_all()
        assert "num_tokens" not in env.episodes[0].sample
        assert "num_tokens" not in train[1]
        if vf:  # the validation part is another dataset object: still counted
            assert build_dataset(cfg.envs, "validation", 0, vf)[0]["num_tokens"] > 0
    assert build_dataset(cfg.envs, "test", 0)[0]["num_tokens"] > 0
