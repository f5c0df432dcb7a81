"""A model folder whose weights are a pickle ``pytorch_model.bin`` (issue 36 item 10): refused in
one line naming the folder, and nothing in the file runs."""

from __future__ import annotations

import shutil

import pytest
import torch

from rl.model.embedder import ModelLoadError, load_backbone, resolve_model_path
from rl.model.model_keys import ModelKeys


class Payload:
    def __reduce__(self):
        return (print, ("code from the weights file ran",))


def test_a_pickle_weights_file_is_one_line_and_runs_nothing(tmp_path, capfd):
    folder = tmp_path / "model"
    shutil.copytree(resolve_model_path("offline:minilm"), folder)
    for f in folder.glob("*.safetensors"):
        f.unlink()
    torch.save({"embeddings.word_embeddings.weight": Payload()}, folder / "pytorch_model.bin")
    with pytest.raises(ModelLoadError, match=r"^model folder .*model: its weights file holds objects other than"):
        load_backbone(ModelKeys(name=str(folder)))
    assert "code from the weights file ran" not in capfd.readouterr().out
