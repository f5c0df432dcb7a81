"""How a sample is shown to the encoders: its token ids, made once, and the states and actions
spliced from them (DESIGN §2.6, §2.7).

The Q-network holds one (``QNetwork.inputs``), built with it: the tokenizer, the token layout and
its caps, the prefixes and the order of the chunks held are bound then. An episode's ids are made
once, when its sample enters the network (:meth:`QNetwork.prepare
<rl.model.qnetwork.QNetwork.prepare>`), and kept here while the episode lives; states and actions
only read them. Callers hand over episodes or (episode, chunks held) pairs; they build no token ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from envs.env import Episode
from rl.model.tokens.layout import TokenLayout, token_layout
from rl.model.tokens.per_sample import IdentityCache, SharedHaystacks
from rl.model.tokens.ragged import RaggedIds
from rl.model.tokens.splice import action_ids, state_ids
from rl.model.tokens.tokenize import (
    HaystackTokens,
    SampleTokens,
    question_ids,
    tokenize_chunks,
    tokenize_sample,
    with_question,
)


class SampleInput:
    """Public, and for whom: ``state_ids`` (acting and DQN's replay keep a transition's state; the
    network's state passes), ``action_ids`` (the network's action passes), ``text_length`` (the
    records), ``action_lengths`` (SFT); ``tokenize``/``adopt_tokens`` (the evaluation haystack
    cache); ``question_ids``, ``state_ids_of`` (the retriever tool, the corpus index); and for the
    network's :meth:`QNetwork.prepare <rl.model.qnetwork.QNetwork.prepare>`, the per-episode ids
    (``tokens``, ``sample_tokens``, ``untokenized``, ``with_question``, ``tokens_of``) and the
    shared haystacks (``haystacks``)."""

    def __init__(
        self,
        tokenizer: Any,
        layout_cfg: dict[str, Any],
        model_max: int,
        query_prefix: str,
        passage_prefix: str,
        sort_by_index: bool,
    ):
        self.sort_by_index = sort_by_index  # chunks held enter the state in document order, else selection order
        self.tokenizer = tokenizer
        self.layout: TokenLayout = token_layout(
            tokenizer,
            layout_cfg["max_action_length"],
            layout_cfg["max_action_length_in_memory"],
            layout_cfg.get("max_state_length"),
            model_max,
        )
        eval_mem = layout_cfg.get("eval_max_action_length_in_memory")
        self.eval_memory_content = max(1, int(eval_mem) - 2) if eval_mem else self.layout.memory_content
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.tokens: IdentityCache[Episode, SampleTokens] = IdentityCache()  # per episode, put when it enters
        self.pretokenized: IdentityCache[dict, SampleTokens] = IdentityCache()  # per sample, from adopt_tokens
        self.haystacks = SharedHaystacks()  # the chunk lists joined episodes share (evaluation)
        self.state_truncations = 0

    # -- a sample's ids ----------------------------------------------------------------------
    def tokenize(self, sample: dict[str, Any]) -> SampleTokens:
        """Content ids of a sample's question and chunks, cut once at the largest cap (what the
        evaluation haystack cache stores and hands back through :meth:`adopt_tokens`)."""
        return tokenize_sample(
            self.tokenizer, sample["question"], sample["chunks"], self.layout, self.query_prefix, self.passage_prefix
        )

    def tokenize_chunks(self, texts: Sequence[str]) -> HaystackTokens:
        """Content ids of a chunk list alone, cut once at the largest cap."""
        return tokenize_chunks(self.tokenizer, texts, self.layout, self.passage_prefix)

    def question_ids(self, question: str) -> tuple[list[int], int]:
        """A question's content ids as every state holds them, and its length before the cut."""
        return question_ids(self.tokenizer, question, self.layout, self.query_prefix)

    def adopt_tokens(self, sample: dict[str, Any], tokens: SampleTokens) -> None:
        """Take ``tokens`` (from :meth:`tokenize`, e.g. stored by the evaluation haystack cache)
        for every episode over this very ``sample`` object, for as long as it lives."""
        self.pretokenized.put(sample, tokens)

    def sample_tokens(self, ep: Episode) -> SampleTokens:
        """The sample's ids as handed over, else only the question over its shared haystack's ids
        (tokenised once for the haystack), else the whole sample tokenised."""
        tokens = self.pretokenized.get(ep.sample)
        if tokens is not None:
            return tokens
        hay = self.haystacks.joined.get(ep)
        if hay is None:
            return self.tokenize(ep.sample)
        if hay.tokens is None:
            hay.tokens = self.tokenize_chunks(hay.chunks)
        return self.with_question(ep, hay.tokens)

    def with_question(self, ep: Episode, hay: HaystackTokens) -> SampleTokens:
        return with_question(self.tokenizer, ep.sample["question"], hay, self.layout, self.query_prefix)

    def untokenized(self, ep: Episode) -> bool:
        """Neither the sample's ids nor its shared haystack's are made yet."""
        hay = self.haystacks.joined.get(ep)
        return self.pretokenized.get(ep.sample) is None and (hay is None or hay.tokens is None)

    def tokens_of(self, ep: Episode) -> SampleTokens:
        tokens = self.tokens.get(ep)
        if tokens is None:
            raise RuntimeError(
                f"the episode of sample {ep.index} has not entered the Q-network: call "
                "QNetwork.prepare(episodes) when its sample starts (an evaluation episode; a learner's "
                "slots enter through LearnerBase.start_slots)"
            )
        return tokens

    def text_length(self, ep: Episode) -> int:
        """Encoder-token length of the episode's question and every chunk, each with its special
        tokens (the records' ``text_len``, DESIGN §2.7): counted before the cut when the ids were
        made, else (a haystack cache file without it) recounted from the cut ids."""
        tokens = self.tokens_of(ep)
        if tokens.text_len is not None:
            return tokens.text_len
        n_special = self.layout.n_special
        return len(tokens.question) + n_special + sum(len(c) + n_special for c in tokens.chunks)

    def action_lengths(self, ep: Episode) -> np.ndarray:
        """Content ids [N] each chunk of the episode's sample keeps as an action (SFT's pass sizes)."""
        return np.minimum(RaggedIds.from_lists(self.tokens_of(ep).action_chunks).lens, self.layout.action_content)

    # -- states and actions ------------------------------------------------------------------
    def state_ids(self, ep: Episode, evaluation: bool = False, selected: Sequence[int] | None = None) -> list[int]:
        """Token ids of the state holding ``selected`` (default: the episode's current selection),
        with the evaluation or the rollout segment cap; what a transition keeps of its state."""
        ids, truncated = self._splice(self.tokens_of(ep), ep.selected if selected is None else selected, evaluation)
        self.state_truncations += int(truncated)
        return ids

    def state_ids_of(self, tokens: SampleTokens, selected: Sequence[int], evaluation: bool = False) -> list[int]:
        """:meth:`state_ids` over ids the caller tokenised (the corpus index: a question and the
        picked chunks of a corpus no episode holds)."""
        return self._splice(tokens, selected, evaluation)[0]

    def _splice(self, tokens: SampleTokens, selected: Sequence[int], evaluation: bool) -> tuple[list[int], bool]:
        order = sorted(selected) if self.sort_by_index else list(selected)
        mem = self.eval_memory_content if evaluation else self.layout.memory_content
        return state_ids(tokens, order, self.layout, mem)

    def action_ids(self, ep: Episode, j: int) -> list[int]:
        """Token ids of chunk ``j`` of the episode's sample as an action: ``[CLS] c_j [SEP]``."""
        return action_ids(self.tokens_of(ep), j, self.layout)

    def sizes(self) -> dict[str, int]:
        """Entries held (for tests and memory checks)."""
        return {"tokens": len(self.tokens), "pretokenized": len(self.pretokenized)}
