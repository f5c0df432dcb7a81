"""A checkpoint whose checksum entry was deleted (issue 36 item 13) still loads, as files of older
versions must, but not without a word."""

from __future__ import annotations

import logging

import torch

from runstore import CHECKSUM_KEY, load_checkpoint, save_checkpoint


def test_a_checkpoint_without_its_checksum_loads_with_a_warning(tmp_path, caplog):
    path = tmp_path / "model_best.pt"
    save_checkpoint({"w": torch.ones(3)}, path)
    with caplog.at_level(logging.WARNING, logger="runstore"):
        load_checkpoint(path)
    assert not caplog.records  # an intact file: silent
    state = torch.load(path, weights_only=True)
    del state[CHECKSUM_KEY]
    torch.save(state, path)
    with caplog.at_level(logging.WARNING, logger="runstore"):
        assert torch.equal(load_checkpoint(path)["w"], torch.ones(3))
    assert [r.getMessage() for r in caplog.records] == [
        f"{path} has no checksum entry: loaded unchecked (written before checksums, or edited)"
    ]
