"""The Q-network: encoders, the Q-function over a sample, and its per-sample caches (DESIGN §2, §3.4, §4.1).

Five roles, three modules: E_s and E_a are trained; E_s′ and E_a′ are EMA targets; the acting
state encoder E_s^π is E_s itself (weights change only at optimiser steps, so an alias equals
the reference's hard copy), run in the dropout mode chosen for acting. How the encoders are run
(bucketing, CUDA graphs, compile, streamed tokenisation) is the speed layer's business: an
:class:`rl.model.fast.encoding.EncodingPath` chosen once here, from the ``speed`` switches.

How a sample is shown to the encoders (its token ids, states and actions) is the network's
:class:`rl.model.tokens.sample_input.SampleInput`, ``inputs``; a sample enters once, through
:meth:`QNetwork.prepare`. The network keeps the chunk embeddings (rl/model/caches.py) and the clocks
that say when they go stale: the weights (``weights_version``) and, with ``speed.chunk_cache`` off,
the rollout (``tick``) (DESIGN §3.4).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from envs.env import Episode, PositionSettings, state_codes
from rl.model.caches import ChunkEmbeddings, QNetworkCaches
from rl.model.embedder import Embedder, load_backbone, load_tokenizer
from rl.model.fast.encoding import EncodingPath
from rl.model.fast.staging import to_device
from rl.model.fast.switches import SpeedSwitches
from rl.model.model_keys import ModelKeys
from rl.model.padded import availability, availability_rows, pad_index, pad_rows
from rl.model.precision import Precision
from rl.model.qfunc import NEG_INF, rotated_scores, twin_heads
from rl.model.rotary import HalfRotary
from rl.model.tokens.per_sample import Haystack
from rl.model.tokens.ragged import FramedIds, RaggedIds
from rl.model.tokens.sample_input import SampleInput
from rl.model.tokens.tokenize import HaystackTokens

log = logging.getLogger(__name__)


class QNetwork(nn.Module):
    """Public, and for whom (the rest is the network's own, named with ``_``): :meth:`prepare`
    (learners, evaluation); :meth:`q_values` (acting, greedy, beam), :meth:`target_heads`
    (soft-value targets), :meth:`state_scores` (DQN's bootstrap), :meth:`online_heads` (the twin-head
    loss), :meth:`held_scores` (SFT); :meth:`embed_chunks`, :meth:`state_embeddings` and ``rope``
    (the corpus index); :meth:`watch`, :meth:`new_rollout`, :meth:`update_targets`,
    :meth:`trainable_parameters`, :meth:`to_device` (training); ``inputs``, a sample's token ids and
    states (its own callers listed there); and what it was built with (encoders, ``positions``,
    ``device``, ``speed``, ``encoding``, ``caches``, the clocks), read by export, evaluation, tests.
    """

    def __init__(
        self,
        model: ModelKeys,
        layout_cfg: dict[str, Any],
        device: torch.device,
        precision: Precision,
        embed_batch_size: int,
        speed: SpeedSwitches,
        positions: PositionSettings,
        sort_by_index: bool,
    ):
        if model.predictor.hidden_dim is not None or model.predictor.output_dim is not None:
            log.warning(
                "algo.model.predictor.hidden_dim/output_dim are accepted and ignored: "
                "Q-RAG applies no head to the pooled embedding"
            )
        tokenizer = load_tokenizer(model)
        backbone = load_backbone(model)
        model_max = int(getattr(backbone.config, "max_position_embeddings", 512))
        if getattr(backbone.config, "model_type", "") in ("xlm-roberta", "roberta", "mpnet"):
            model_max -= 2  # position ids start after the padding index
        prefixes = (model.query_prefix or "", model.passage_prefix or "")
        super().__init__()
        self.positions = positions  # how chunk positions are coded (DESIGN §3)
        self.inputs = SampleInput(tokenizer, layout_cfg, model_max, *prefixes, sort_by_index)
        self.caches = QNetworkCaches()  # the chunk embeddings, stamped with the clocks below
        self.weights_version = 0  # bumped whenever the weights change: cached embeddings go stale
        self.tick = 0  # bumped at every rollout start; keys the chunk cache when speed.chunk_cache is off
        pooling = model.pooling
        self.state_enc = Embedder(backbone, pooling, model.pool_scale, model.normalize)
        self.action_enc = copy.deepcopy(self.state_enc)  # load once, deep-copy
        self.target_state = copy.deepcopy(self.state_enc).requires_grad_(False)
        self.target_action = copy.deepcopy(self.state_enc).requires_grad_(False)
        self.dim = self.state_enc.dim
        self.rope = HalfRotary(self.dim, interpolate_factor=model.predictor.interpolate_factor)
        left_pad = pooling == "last" and self.inputs.layout.padding_side == "left"
        self.device = device
        self.embed_batch_size = int(embed_batch_size)
        self.to(device)
        # from_pretrained returns the backbone in eval mode inside a wrapper that says "train":
        # make every encoder's flag true for all its submodules, since _set_mode trusts it.
        self.state_enc.train()
        self.action_enc.train()
        self.target_state.eval()
        self.target_action.eval()
        self.speed = speed  # the switches in force (read only: the choices are made below, once)
        self.encoding = EncodingPath(
            (self.state_enc, self.action_enc, self.target_state, self.target_action),
            speed,
            self.inputs.layout,
            left_pad,
            device,
            precision.autocast,
            embed_batch_size,
        )

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

    # -- a sample enters ---------------------------------------------------------------------
    def prepare(self, episodes: Sequence[Episode], share: bool = False, embed: bool = False) -> list[Haystack]:
        """Where samples enter the network: each episode's token ids, once (handed over by
        ``inputs.adopt_tokens``, else tokenised); from here on states and chunk embeddings only read
        them. The learners call it when slots are (re)set and for replayed or drawn episodes;
        evaluation (greedy, beam, the retriever tool) when its episodes start.

        ``share`` (evaluation only): join each episode to the :class:`Haystack` of its chunk list,
        shared with every other live episode whose sample holds the same list object or an equal
        one, so the chunks are tokenised and embedded once for all of them
        (rl/model/tokens/per_sample.py); returns those haystacks (one per episode; a caller that
        keeps them keeps them alive for the episodes it prepares next), else []. ``embed`` (evaluation only): also embed the
        chunks with E_a in eval mode, several small samples in one pass, large ones alone; a
        haystack of ``speed.overlap_tokenization`` size is tokenised on a CPU thread while the
        GPU embeds it."""
        inputs = self.inputs
        hays = [inputs.haystacks.join(ep) for ep in episodes] if share else []
        streamed = set()  # ids: Episode is a dataclass whose == compares its tensors
        for ep in episodes:
            if inputs.tokens.get(ep) is not None:
                continue
            if embed and self.encoding.streams(ep.n_chunks) and inputs.untokenized(ep):
                self._stream_chunks(ep)
                streamed.add(id(ep))
            else:
                inputs.tokens.put(ep, inputs.sample_tokens(ep))
        if embed:
            small = [ep for ep in episodes if ep.n_chunks < self.embed_batch_size and id(ep) not in streamed]
            if len(small) > 1:
                self._embed_chunks(small, "online", train=False)
            for ep in episodes:  # cache hits for the small and the streamed ones
                self._embed_chunks([ep], "online", train=False)
        return hays

    def _stream_chunks(self, ep: Episode) -> None:
        """A large haystack's ids and its online chunk embeddings (eval mode), tokenised slice by
        slice on a CPU thread while the GPU embeds (:meth:`EncodingPath.tokenize_and_embed`)."""
        hay, emb = self.embed_chunks(ep.sample["chunks"])
        owner = self._chunk_owner(ep)
        if isinstance(owner, Haystack):
            owner.tokens = hay
        self.inputs.tokens.put(ep, self.inputs.with_question(ep, hay))
        self.caches.chunks["online"].put(owner, ChunkEmbeddings(self._stamp(False), emb))

    @torch.no_grad()
    def embed_chunks(self, texts: Sequence[str]) -> tuple[HaystackTokens, torch.Tensor]:
        """Ids and un-rotated embeddings u_j [N, d] of a chunk list with the online action encoder
        in eval mode (evaluation's chunk embeddings; the corpus index's shards), tokenised while
        embedded when the list is large enough to stream."""
        self._set_mode(self.action_enc, False)
        if self.encoding.streams(len(texts)):
            return self.encoding.tokenize_and_embed(
                self.action_enc, self.inputs.tokenizer, texts, self.dim, self.inputs.passage_prefix
            )
        hay = self.inputs.tokenize_chunks(texts)
        return hay, self.encoding.chunk_sets(self.action_enc, [hay])[0]

    # -- embeddings -----------------------------------------------------------------------
    @staticmethod
    def _set_mode(module: nn.Module, train: bool) -> None:
        """Switch dropout mode only when it differs: ``train()`` walks every submodule, a cost
        the acting loop would pay twice per encoder call."""
        if module.training != train:
            module.train(train)

    def _embed(
        self,
        encoder: Embedder,
        seqs: Any,
        train: bool,
        grad: bool = False,
        out: torch.Tensor | None = None,
        chunks: bool = False,
        bucket_grad: bool = False,
    ) -> torch.Tensor:
        """Embeddings [len(seqs), d] fp32 of id sequences, dropout in ``train`` mode, through the
        Q-network's encoding path (``chunks``, ``bucket_grad``: see :class:`EncodingPath`)."""
        self._set_mode(encoder, train)
        return self.encoding(encoder, seqs, grad=grad, out=out, chunks=chunks, bucket_grad=bucket_grad)

    @torch.no_grad()
    def state_embeddings(self, states: Sequence[list[int]]) -> torch.Tensor:
        """E_s(s) [len(states), d] of state token ids (``inputs.state_ids_of``), eval mode, no
        gradient: the corpus index's greedy and beam steps."""
        return self._embed(self.state_enc, states, train=False)

    def _chunk_owner(self, ep: Episode) -> Episode | Haystack:
        """Whose chunk embeddings the episode uses: its shared haystack's, else its own."""
        hay = self.inputs.haystacks.joined.get(ep)
        return ep if hay is None else hay

    def _stamp(self, train: bool) -> tuple[int, bool, int]:
        """When cached chunk embeddings were made: they hold while the weights, the dropout mode and
        (with ``speed.chunk_cache`` off) the rollout stay the same."""
        return (self.weights_version, train, 0 if self.speed.chunk_cache else self.tick)

    def _embed_chunks(self, episodes: Sequence[Episode], which: str, train: bool) -> None:
        """Embed the chunks of every episode of ``episodes`` whose cached embeddings are missing or
        stale, in one encoder pass over all of them; a haystack several of them share, once."""
        cache = self.caches.chunks[which]
        stamp = self._stamp(train)
        todo: dict[int, tuple[Episode | Haystack, Episode]] = {}  # id(owner) -> (owner, an episode of it)
        for ep in episodes:
            owner = self._chunk_owner(ep)
            hit = cache.get(owner)
            if (hit is None or hit.stamp != stamp) and id(owner) not in todo:
                todo[id(owner)] = (owner, ep)
        if not todo:
            return
        enc = self.action_enc if which == "online" else self.target_action
        self._set_mode(enc, train)
        owners = list(todo.values())
        for (owner, _), emb in zip(
            owners, self.encoding.chunk_sets(enc, [self.inputs.tokens_of(ep) for _, ep in owners])
        ):
            cache.put(owner, ChunkEmbeddings(stamp, emb))

    def _rotate(self, emb: torch.Tensor, codes: torch.Tensor | None) -> torch.Tensor:
        return emb.float() if codes is None else self.rope(emb, codes)

    # -- Q-values ---------------------------------------------------------------------------
    def q_values(
        self,
        episodes: Sequence[Episode],
        train: bool,
        evaluation: bool = False,
        selections: Sequence[Sequence[int]] | None = None,
        states: Sequence[list[int]] | None = None,
    ) -> list[torch.Tensor]:
        """Q(s_i, ·) [N_i] of every chunk of each episode's sample in its current state, or in the
        states of ONE episode holding ``selections`` (the beam planner's members; ``episodes`` that
        episode repeated): Q(s, a) = ⟨E_s(s), R(p̂(a))·E_a(a)⟩ with the online encoders, one state
        pass; ``evaluation``: evaluation's segment cap. ``states``: the current states' ids when the
        caller already holds them (acting keeps them for its transitions, from ``inputs.state_ids``).
        One rotation and one product for all episodes in a padded layout (rl/model/padded.py)."""
        if selections is None:
            selections = [ep.selected for ep in episodes]
            codes = [ep.codes(self.positions) for ep in episodes]
        else:  # every member's relative codes in one pass over its availability
            if any(ep is not episodes[0] for ep in episodes):
                raise ValueError("q_values: with selections, every entry of episodes is the same episode")
            c = episodes[0].codes(self.positions, availability(episodes[0].n_chunks, selections, self.device))
            codes = [None] * len(selections) if c is None else c
        if states is None:
            states = [self.inputs.state_ids(ep, evaluation, sel) for ep, sel in zip(episodes, selections)]
        s_emb = self._embed(self.state_enc, states, train=train)
        u, _ = self._padded_chunks(episodes, "online", train)
        c = None if any(x is None for x in codes) else pad_rows(codes, 0)
        q = rotated_scores(self._rotate(u, c), s_emb, heads=False)
        return [q[i, : ep.n_chunks] for i, ep in enumerate(episodes)]

    def _padded_chunks(
        self, episodes: Sequence[Episode], which: str, train: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(u [R, N_max, d], valid [R, N_max] bool, None when no row has pads): row r the un-rotated
        cached chunk embeddings of ``episodes[r]`` ('online' or 'target' encoder), each distinct
        sample's copied once into the concatenation the rows gather from."""
        self._embed_chunks(episodes, which, train)
        cache = self.caches.chunks[which]
        flat: dict[int, tuple[int, torch.Tensor]] = {}  # id(owner) -> (offset, embeddings)
        offsets, used = [], 0
        for ep in episodes:
            owner = self._chunk_owner(ep)
            if id(owner) not in flat:
                emb = cache.get(owner).emb
                flat[id(owner)] = (used, emb)
                used += emb.shape[0]
            offsets.append(flat[id(owner)][0])
        embs = [e for _, e in flat.values()]
        if len(embs) == 1:  # one sample (one env, or a beam's states): no pads, no copy
            return embs[0].expand(len(episodes), -1, -1), None
        index, valid = pad_index([ep.n_chunks for ep in episodes], offsets)
        index_t, valid_t = to_device(np.stack([index, valid]), self.device)
        return torch.cat(embs)[index_t], valid_t.bool()

    def _chunk_scores(
        self,
        items: Sequence[tuple[Episode, Sequence[int]]],
        s_emb: torch.Tensor,
        which: str,
        train: bool,
        heads: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores of every chunk in the states ``items`` = (episode, chunks held) whose state
        embeddings are ``s_emb`` [S, d], in one padded layout over all samples: (scores [S, N_max]
        or with ``heads`` [S, 2, N_max], availability [S, N_max] bool); row i holds item i's
        sample's N_i chunks, then pads (scored −inf, never available). ``which`` = 'online' or
        'target': the cached chunk embeddings of that encoder. Each state rotates the chunks by
        its own position codes, ã = R(p̂(a))·u_a (:meth:`_sample_scores`)."""
        episodes = [ep for ep, _ in items]
        u, valid = self._padded_chunks(episodes, which, train)
        avail_host, _ = availability_rows([ep.n_chunks for ep in episodes], [sel for _, sel in items])
        avail = to_device(avail_host, self.device)
        scores = rotated_scores(self._rotate(u, state_codes(self.positions, episodes, avail)), s_emb, heads)
        if valid is None:
            return scores, avail
        pads = ~valid.unsqueeze(1) if heads else ~valid
        return scores.masked_fill(pads, NEG_INF), avail

    def _sample_scores(
        self,
        ep: Episode,
        u: torch.Tensor,
        s_emb: torch.Tensor,
        selections: Sequence[Sequence[int]],
        heads: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores of every chunk of ``ep``'s sample in S states of it holding ``selections``, from
        the chunks' un-rotated embeddings ``u`` [N, d] and the states' embeddings ``s_emb`` [S, d]
        (gradients flow through both): (scores, availability [S, N] bool). Each state rotates the
        chunks by its own position codes, ã = R(p̂(a))·u_a; scores are Q(s, a) = ⟨s, ã⟩ [S, N], or
        with ``heads`` both heads q_h = ⟨s_h, ã_h⟩ [S, 2, N] (h = each half of the vectors)."""
        avail = availability(ep.n_chunks, selections, self.device)
        rotated = self._rotate(u.expand(len(selections), -1, -1), ep.codes(self.positions, avail))  # [S, N, d]
        return rotated_scores(rotated, s_emb, heads), avail

    def held_scores(
        self, episodes: Sequence[Episode], held: Sequence[Sequence[Sequence[int]]], train: bool
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per episode, Q(s, ·) [S_i, N_i] of every chunk in the states holding ``held[i]`` (e.g. a
        teacher's first t chunks, t = 0 … S_i − 1) and their availability; ``train``: with gradient
        and encoders in train mode (SFT's loss), else gradient-free in eval mode. One
        length-bucketed encoder pass over all the samples' chunks, one over all their states."""
        inputs = self.inputs
        content = RaggedIds.concat([inputs.tokens_of(ep).action_chunks for ep in episodes])
        chunks = self._embed(
            self.action_enc,
            FramedIds(content, inputs.layout),
            train=train,
            grad=train,
            bucket_grad=train,
        )  # [ΣN, d], un-rotated, same ids as action_ids
        states = self._embed(
            self.state_enc,
            [inputs.state_ids(ep, selected=sel) for ep, sels in zip(episodes, held) for sel in sels],
            train=train,
            grad=train,
            bucket_grad=train,
        )  # [ΣS, d]
        out, c0, s0 = [], 0, 0
        for ep, sels in zip(episodes, held):
            n, steps = ep.n_chunks, len(sels)
            out.append(self._sample_scores(ep, chunks[c0 : c0 + n], states[s0 : s0 + steps], sels, False))
            c0, s0 = c0 + n, s0 + steps
        return out

    @torch.no_grad()
    def target_heads(
        self, items: Sequence[tuple[Episode, Sequence[int]]], train: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Both heads of the target network Q′ for every chunk of the states ``items`` = (episode,
        chunks held): (heads [S, 2, N_max], availability [S, N_max]) in :meth:`_chunk_scores`'s
        padded layout; one target state pass for all of them."""
        return self.state_scores(items, ("target",), train, heads=True)[0]

    @torch.no_grad()
    def state_scores(
        self, items: Sequence[tuple[Episode, Sequence[int]]], which: Sequence[str], train: bool, heads: bool
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """For each network of ``which`` ('online' E_s, E_a; 'target' E_s′, E_a′): the scores of
        every chunk in the states ``items`` = (episode, chunks held) and their availability, in
        :meth:`_chunk_scores`'s padded layout; the states' token ids are built once for all of them."""
        states = [self.inputs.state_ids(ep, selected=sel) for ep, sel in items]
        out = []
        for w in which:
            s_emb = self._embed(self.target_state if w == "target" else self.state_enc, states, train=train)
            out.append(self._chunk_scores(items, s_emb, w, train, heads=heads))
        return out

    def online_heads(
        self, episodes: Sequence[Episode], states: list[list[int]], actions: Sequence[int], codes: Sequence[int]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(q1, q2) [B] of the online network for chosen chunks ``actions`` of the ``episodes``, with
        gradient, dropout on: the states (token ids ``states``, from ``inputs.state_ids``) and chunks
        encoded again, each chunk rotated by its position code p̂(a) in its state (``codes``, from
        ``Episode.code_of`` when acting; unused without positions)."""
        s_emb = self._embed(self.state_enc, states, train=True, grad=True)
        a_emb = self._embed(
            self.action_enc, [self.inputs.action_ids(ep, a) for ep, a in zip(episodes, actions)], train=True, grad=True
        )
        if self.positions.processor != "none":
            a_emb = self.rope(a_emb, to_device(np.asarray(codes, dtype=np.int64), self.device))
        return twin_heads(s_emb, a_emb)

    # -- target updates -------------------------------------------------------------------
    @torch.no_grad()
    def update_targets(self, tau: float) -> None:
        """θ′ ← τ·θ + (1 − τ)·θ′ for both target encoders; buffers copied (DESIGN §5.5 step 6)."""
        for online, target in ((self.state_enc, self.target_state), (self.action_enc, self.target_action)):
            # one multi-tensor kernel per encoder instead of ~200 lerp_ launches (same formula)
            torch._foreach_lerp_(list(target.parameters()), [p.detach() for p in online.parameters()], tau)
            for b, tb in zip(online.buffers(), target.buffers()):
                tb.copy_(b)

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [*self.state_enc.parameters(), *self.action_enc.parameters()]

    def to_device(self, host: np.ndarray) -> torch.Tensor:
        """A host-built array (a learner's rollout tensors) on the network's device, copied without
        waiting for the device's queue: the network owns the pinned copies (rl/model/fast/staging.py)."""
        return to_device(host, self.device)
