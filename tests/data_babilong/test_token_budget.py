"""BabiLong's token-budget mode against the official generator (booydar/babilong
``babilong_utils.py``: SentenceSampler.get_sample, NoiseInjectionDataset.__getitem__;
``data/create_tasks.py``: length - 300, max_n_facts = length // 8, GPT-2's tokenizer), and the
token length every sample records."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from envs.data.babi import load_babi_file
from envs.data.babilong import BabiLongDataset, CorpusTokenCounts, TokenBudget, assemble_gaps, fill_noise
from envs.data.length_tokenizer import length_tokenizer
from envs.data.noise import NoiseSampler
from envs.data.registry import build_dataset

from .conftest import BABI_DIR, EMBEDDED, FIXTURES, REPO


@pytest.fixture(scope="module")
def gpt2():
    return length_tokenizer("gpt2")


def test_shipped_gpt2_gives_gpt2_ids(gpt2):
    # ids of the npm package gpt-3-encoder's own JavaScript encoder on these texts
    def ids(t):
        return gpt2.tok(t, add_special_tokens=False)["input_ids"]

    assert ids(" Hello world, this is GPT-2 tokenization.") == [
        18435,
        995,
        11,
        428,
        318,
        402,
        11571,
        12,
        17,
        11241,
        1634,
        13,
    ]
    assert ids(" naïve café") == [41492, 40304]
    assert gpt2.count(["Hello world, this is GPT-2 tokenization.", "naïve café"]) == [12, 2]  # " " + text


class FixedRuns:
    """A sampler stand-in whose runs are given (the real one draws them at random)."""

    def __init__(self, corpus, runs):
        self.corpus, self.runs = corpus, runs

    def runs_to_book_end(self, rng):
        yield from self.runs


def official_get_sample(token_lists, sample_size, min_len):
    """SentenceSampler.get_sample's loop, as written there, on pre-tokenised sentences."""
    sample, total_len = [], 0
    for tokenized in token_lists:
        if min_len is not None and len(tokenized) < min_len:
            continue
        total_len += len(tokenized)
        sample.append(tokenized)
        if total_len >= sample_size:
            cutoff = total_len - sample_size
            if cutoff > 0:
                sample[-1] = sample[-1][:-cutoff]
            return sample
    raise AssertionError("corpus too short")


def test_fill_noise_worked_case(gpt2):
    # one-letter words are one GPT-2 token each after a space: a sentence of n words is n tokens
    words = "a b c d e f".split()
    lens = [12, 4, 15, 9, 11, 20]
    book = [" ".join([w] * n) for w, n in zip(words, lens)]
    assert gpt2.count(book) == lens
    counts = CorpusTokenCounts([book], gpt2)
    out, got = fill_noise(FixedRuns([book], [(0, 0, 6)]), counts, 30, 10, None)
    # 4 and 9 are under 10 tokens: skipped; 12 + 15 = 27, then 11 overshoots: cut to 3 tokens
    assert got == [12, 15, 3] and out == [book[0], book[2], "e e e"]
    assert fill_noise(FixedRuns([book], [(0, 0, 6)]), counts, 27, 10, None)[1] == [12, 15]  # exact: no cut
    assert fill_noise(FixedRuns([book], []), counts, 0, 10, None) == ([], [])  # facts fill the budget


@pytest.mark.parametrize("seed", range(5))
def test_fill_noise_matches_the_official_loop(gpt2, seed):
    rng = np.random.default_rng(seed)
    corpus = [
        [
            " ".join(
                rng.choice(
                    ["the", "sea", "was", "calm", ",", "and", "Ahab", "slept", "."], size=int(rng.integers(1, 30))
                )
            )
            for _ in range(60)
        ]
        for _ in range(3)
    ]
    target = int(rng.integers(50, 400))
    runs = [(1, 17, 60), (0, 0, 60), (2, 5, 60)]
    out, lens = fill_noise(FixedRuns(corpus, runs), CorpusTokenCounts(corpus, gpt2), target, 10, None)
    stream = [gpt2.tok(" " + s, add_special_tokens=False)["input_ids"] for b, lo, hi in runs for s in corpus[b][lo:hi]]
    want = official_get_sample(stream, target, 10)
    assert lens == [len(t) for t in want] and sum(lens) == target
    assert out[:-1] == [gpt2.tok.decode(t).strip() for t in want[:-1]]
    assert out[-1] == gpt2.tok.decode(want[-1]).strip()  # the cut sentence is its first tokens' text


def test_gap_assembly_is_the_official_insertion():
    facts, noise = ["F0", "F1", "F2", "F3"], ["n0", "n1", "n2"]
    for seed in range(30):
        chunks, fidx = assemble_gaps(facts, noise, np.random.default_rng(seed))
        # official: updated_sample[pos] gets the facts of gap pos, then noise[pos]; flattened
        gaps = np.sort(np.random.default_rng(seed).choice(len(noise) + 1, size=len(facts), replace=True))
        slots = [[] for _ in range(len(noise) + 1)]
        for f, g in zip(facts, gaps):
            slots[g].append(f)
        for g, n in enumerate(noise):
            slots[g].append(n)
        assert chunks == [x for s in slots for x in s]
        assert [chunks[j] for j in fidx] == facts
    shared = [seed for seed in range(30) if len(set(np.random.default_rng(seed).choice(4, size=4, replace=True))) < 4]
    assert shared  # several facts in one gap happens (positions drawn with replacement)
    assert assemble_gaps(["F"], [], np.random.default_rng(0)) == (["F"], [0])


def test_budget_and_story_filter_worked_cases():
    assert TokenBudget((1000,)).max_lines() == 87  # (1000 - 300) // 8: create_tasks.py's "1k"
    assert TokenBudget((128000,)).max_lines() == 15962
    assert TokenBudget((0,)).max_lines() is None  # "0k": facts alone, no filter
    assert TokenBudget((4000, 1000)).max_lines() == 87  # a kept story fits every size drawn


def _noise_book():
    return [[f"Sentence number {k} of the old book went on for a while before it ended." for k in range(400)]]


def test_dataset_token_mode(gpt2):
    babi = load_babi_file(FIXTURES / "qa2_two-supporting-facts_test.txt")  # stories of 5, 8, 8, 2 facts
    # budget 340 - 300 = 40 tokens -> at most 5 lines (4 facts + the question): stories 0-2 dropped
    small = BabiLongDataset(babi, _noise_book(), 100, seed=0, split="test", tokenizer=gpt2, tokens=TokenBudget((340,)))
    assert small.ids == [3] and len(small) == 1 and small[0]["id"] == 3
    ds = BabiLongDataset(babi, _noise_book(), 100, seed=0, split="test", tokenizer=gpt2, tokens=TokenBudget((700,)))
    assert ds.ids == [0, 1, 2, 3]
    for i in range(4):
        s, b = ds[i], babi[i]
        assert s["num_tokens"] == 400  # facts + noise fill 700 - 300 exactly
        assert [s["chunks"][j] for j in s["facts_idx"]] == b.facts
        assert [s["chunks"][j] for j in s["sf_idx"]] == [b.facts[r] for r in b.references_idx]
        noise = [c for j, c in enumerate(s["chunks"]) if j not in set(s["facts_idx"])]
        counted = sum(gpt2.count(b.facts)) + sum(gpt2.count(noise))
        assert abs(counted - 400) <= 1  # the cut sentence re-tokenised may differ at its end
    assert (
        ds[2]
        == BabiLongDataset(babi, _noise_book(), 100, seed=0, split="test", tokenizer=gpt2, tokens=TokenBudget((700,)))[
            2
        ]
    )
    with pytest.raises(ValueError, match="length tokenizer"):
        BabiLongDataset(babi, _noise_book(), 100, seed=0, split="test", tokens=TokenBudget((700,)))


def test_sentence_mode_records_num_tokens(gpt2):
    babi = load_babi_file(FIXTURES / "qa2_two-supporting-facts_test.txt")
    ds = BabiLongDataset(babi, _noise_book(), 40, seed=1, split="test", tokenizer=gpt2)
    s = ds[1]
    assert len(s["chunks"]) == 40 and s["num_tokens"] == sum(gpt2.count(s["chunks"]))
    assert "num_tokens" not in BabiLongDataset(babi, _noise_book(), 40, seed=1, split="test")[1]


def _cfg(**envs):
    node = OmegaConf.load(REPO / "configs/envs/babilong.yaml")
    cfg = OmegaConf.create({"paths": {"data_root": str(EMBEDDED), "babi_dir": BABI_DIR}, "envs": node})
    for k, v in envs.items():
        cfg.envs[k] = v
    return cfg


def test_config_token_mode_on_the_shipped_data():
    cfg = _cfg(task="qa3_three-supporting-facts", length_unit="tokens", num_tokens=1000)
    ds = build_dataset(cfg.envs, "test", seed=0)
    babi = load_babi_file(EMBEDDED / "babilong/babi/en-10k/qa3_three-supporting-facts_test.txt")
    kept = [i for i, b in enumerate(babi) if len(b.facts) + 1 <= 87]
    assert len(ds) == len(kept) == 863  # 137 real qa3 test questions have more than 86 facts: too long for "1k"
    for k in (0, 500, len(ds) - 1):
        s = ds[k]
        assert s["id"] == kept[k] and s["num_tokens"] == 700
        assert len(s["chunks"]) > len(s["facts_idx"])  # every sample carries noise
    sentences = build_dataset(_cfg(task="qa3_three-supporting-facts", num_sentences=50).envs, "test", seed=0)
    assert len(sentences) == 1000 and sentences[0]["num_tokens"] > 0
    with pytest.raises(ValueError, match="length_unit must be"):
        build_dataset(_cfg(length_unit="words").envs, "test", seed=0)
    with pytest.raises(OSError, match="length tokenizer '/no/such/tokenizer'"):
        build_dataset(_cfg(length_tokenizer="/no/such/tokenizer").envs, "test", seed=0)


def test_noise_sampler_runs_to_book_end():
    sampler = NoiseSampler([[], ["a", "b", "c"], ["x"] * 5], subsample_size=2)
    runs = sampler.runs_to_book_end(np.random.default_rng(0))
    for _ in range(20):
        b, start, stop = next(runs)
        assert b in (1, 2) and stop == len(sampler.corpus[b]) and 0 <= start < stop
