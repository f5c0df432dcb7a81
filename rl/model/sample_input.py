"""How a sample is shown to the encoders: its token ids and the states spliced from them (the
chunks' position codes are ``Episode.codes`` with the network's ``positions``); and the clocks
that say when what the network keeps per sample goes stale (DESIGN §2.7, §3, §3.4).

The base of :class:`rl.model.qnetwork.QNetwork`, which adds the encoders, the chunk embeddings and
the Q-function. Everything here is bound when the network is built (the tokenizer, the token
layout and its caps, the prefixes, the position settings, the order of the chunks held) and reads
an episode's ids from the per-sample caches, put there once when its sample enters
(:meth:`QNetwork.prepare <rl.model.qnetwork.QNetwork.prepare>`). Callers hand over episodes or
(episode, chunks held) pairs; they build neither token ids nor position codes. The cached chunk
embeddings hold while the weights (``weights_version``) and, with ``speed.chunk_cache`` off, the
rollout (``tick``) stay the same; the network stamps them with these clocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from envs.env import Episode, PositionSettings
from rl.model.caches import QNetworkCaches
from rl.model.tokens.layout import TokenLayout, token_layout
from rl.model.tokens.ragged import RaggedIds
from rl.model.tokens.splice import action_ids, state_ids
from rl.model.tokens.tokenize import HaystackTokens, SampleTokens, tokenize_chunks, tokenize_sample, with_question


class SampleInput(nn.Module):
    def __init__(
        self,
        tokenizer: Any,
        layout_cfg: dict[str, Any],
        model_max: int,
        query_prefix: str,
        passage_prefix: str,
        positions: PositionSettings,
        sort_by_index: bool,
    ):
        super().__init__()
        self.positions = positions  # how chunk positions are coded (DESIGN §3)
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
        self.caches = QNetworkCaches()  # ids per sample read here; the network keeps its chunk embeddings there too
        self.state_truncations = 0
        self.weights_version = 0  # bumped whenever the weights change: cached embeddings go stale
        self.tick = 0  # bumped at every rollout start; keys the chunk cache when speed.chunk_cache is off

    # -- when cached embeddings go stale -----------------------------------------------------
    def watch(self, optimizer: torch.optim.Optimizer) -> None:
        """Treat every step of ``optimizer`` (over this network's weights) as a weight change."""
        optimizer.register_step_post_hook(lambda *_: self._weights_changed())

    def _weights_changed(self) -> None:
        self.weights_version += 1

    def new_rollout(self) -> None:
        """A rollout starts: with ``speed.chunk_cache`` off, chunks are embedded again from here."""
        self.tick += 1

    def load_state_dict(self, state: Any, strict: bool = True, assign: bool = False) -> Any:
        out = super().load_state_dict(state, strict=strict, assign=assign)
        self._weights_changed()
        return out

    # -- a sample's ids ----------------------------------------------------------------------
    def tokenize(self, sample: dict[str, Any]) -> SampleTokens:
        """Content ids of a sample's question and chunks, cut once at the largest cap (what the
        evaluation haystack cache stores and hands back through :meth:`adopt_tokens`)."""
        return tokenize_sample(
            self.tokenizer, sample["question"], sample["chunks"], self.layout, self.query_prefix, self.passage_prefix
        )

    def adopt_tokens(self, sample: dict[str, Any], tokens: SampleTokens) -> None:
        """Take ``tokens`` (from :meth:`tokenize`, e.g. stored by the evaluation haystack cache)
        for every episode over this very ``sample`` object, for as long as it lives."""
        self.caches.pretokenized.put(sample, tokens)

    def _sample_tokens(self, ep: Episode) -> SampleTokens:
        """The sample's ids as handed over, else only the question over its shared haystack's ids
        (tokenised once for the haystack), else the whole sample tokenised."""
        tokens = self.caches.pretokenized.get(ep.sample)
        if tokens is not None:
            return tokens
        hay = self.caches.haystack_of.get(ep)
        if hay is None:
            return self.tokenize(ep.sample)
        if hay.tokens is None:
            hay.tokens = tokenize_chunks(self.tokenizer, hay.chunks, self.layout, self.passage_prefix)
        return self._with_question(ep, hay.tokens)

    def _with_question(self, ep: Episode, hay: HaystackTokens) -> SampleTokens:
        return with_question(self.tokenizer, ep.sample["question"], hay, self.layout, self.query_prefix)

    def _untokenized(self, ep: Episode) -> bool:
        hay = self.caches.haystack_of.get(ep)
        return self.caches.pretokenized.get(ep.sample) is None and (hay is None or hay.tokens is None)

    def _tokens(self, ep: Episode) -> SampleTokens:
        tokens = self.caches.tokens.get(ep)
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
        tokens = self._tokens(ep)
        if tokens.text_len is not None:
            return tokens.text_len
        n_special = 2 if self.layout.bos is not None else 1
        return len(tokens.question) + n_special + sum(len(c) + n_special for c in tokens.chunks)

    def action_lengths(self, ep: Episode) -> np.ndarray:
        """Content ids [N] each chunk of the episode's sample keeps as an action (SFT's pass sizes)."""
        return np.minimum(RaggedIds.from_lists(self._tokens(ep).action_chunks).lens, self.layout.action_content)

    def state_ids(self, ep: Episode, evaluation: bool = False, selected: Sequence[int] | None = None) -> list[int]:
        """Token ids of the state holding ``selected`` (default: the episode's current selection),
        with the evaluation or the rollout segment cap; what a transition keeps of its state."""
        ids, truncated = self._splice(self._tokens(ep), ep.selected if selected is None else selected, evaluation)
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

    def _action_ids(self, ep: Episode, j: int) -> list[int]:
        return action_ids(self._tokens(ep), j, self.layout)
