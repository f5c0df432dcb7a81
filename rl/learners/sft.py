"""Supervised baseline "multi-step RAG w. SFT" (paper Table 3; DESIGN §4.5), ``learner=sft``.

The same Q-network and greedy evaluation as Q-RAG, trained on teacher-forced gold trajectories
(the gold chunks in document order, at most T): at hop t the state holds the first t gold chunks
and Q(s_t, a) scores every chunk. The loss is Beam Retriever's per-hop classification "which
available chunk is hop t's gold one", as a softmax cross-entropy of Q(s_t, ·) over the available
chunks, every hop trained, mean over transitions.

Two legacy switches (envs/legacy.py, DESIGN §11 #49-50) restore round 4's rules, under which the
baseline did not learn: ``sft_binary_loss`` classifies every chunk on its own (binary
cross-entropy with logit Q averaged over a hop's chunks, summed over hops, mean over samples), and
``sft_stop_at_first_miss`` trains no hop after the first wrong greedy pick (Beam Retriever's early
stop at beam width 1). No rollouts and no target values: target encoders, α and the acting
generator are unused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from envs.env import Episode, VecRetrievalEnv
from envs.types import sf_known
from rl.learners.base import LearnerBase, RunSettings
from rl.model.qnetwork import QNetwork
from rl.schema import Schema

MAX_DRAWS_PER_TRANSITION = 100  # give up when the training set has (almost) no gold facts


@dataclass
class Hyper(Schema):
    """``algo.sft.hyperparams`` (``learner=sft``): none of its own. Optimiser, schedule and clipping
    are algo.optimizer, algo.scheduler and algo.max_grad_norm, shared with every learner; the
    round-4 rules are legacy switches (envs/legacy.py)."""


def teacher_trajectory(sample: dict[str, Any], max_steps: int) -> list[int]:
    """Gold chunk indices in document order, truncated to the step budget T."""
    if not sf_known(sample):
        return []
    return sorted(set(int(i) for i in sample["sf_idx"]))[:max_steps]


def hop_losses(logits: torch.Tensor, target: torch.Tensor, binary: bool) -> torch.Tensor:
    """Per teacher-forced hop of one sample, the loss of hop t's gold chunk ``target[t]`` among the
    available chunks (``logits`` [T′, N] holds −inf at unavailable ones): softmax cross-entropy, or
    with ``binary`` the mean over available chunks of the binary cross-entropy with logit Q and
    label "is hop t's gold chunk" (round 4). Returns [T′]."""
    if not binary:
        return F.cross_entropy(logits, target, reduction="none")
    avail = torch.isfinite(logits)
    labels = torch.zeros_like(logits).scatter_(1, target[:, None], 1.0)
    bce = F.binary_cross_entropy_with_logits(logits.masked_fill(~avail, 0.0), labels, reduction="none")
    return (bce * avail).sum(1) / avail.sum(1)


def trained_hops(logits: torch.Tensor, target: torch.Tensor, stop_at_first_miss: bool) -> torch.Tensor:
    """Which hops are trained, as 0/1 floats [T′]: all, or with ``stop_at_first_miss`` those whose
    earlier greedy picks were all gold (Beam Retriever at beam width 1, round 4)."""
    if not stop_at_first_miss:
        return torch.ones(len(target), device=logits.device)
    hit = (logits.argmax(1) == target).float()
    return torch.cat([hit.new_ones(1), torch.cumprod(hit, 0)[:-1]])


def gold_ranks(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Rank of each hop's gold chunk among the available ones (1 = the greedy pick) [T′]."""
    return 1 + (logits > logits.gather(1, target[:, None])).sum(1)


class SFTLearner(LearnerBase):
    NAME = "sft"
    LOSS = "ce_loss"
    HYPER = Hyper
    LEGACY = ("sft_binary_loss", "sft_stop_at_first_miss")

    def __init__(
        self,
        qnet: QNetwork,
        env: VecRetrievalEnv,
        run: RunSettings,
        hp: Hyper,
        sft_binary_loss: bool = False,
        sft_stop_at_first_miss: bool = False,
    ):
        # batch_size = minimum teacher-forced transitions per micro-step; rollout_len is nominal
        # (for the trainer's batch log); the policy generator is unused by this objective.
        super().__init__(qnet, env, run)
        self.hp = hp
        self.binary, self.stop_at_first_miss = sft_binary_loss, sft_stop_at_first_miss

    def trajectory(self, ep: Episode) -> list[int]:
        """The teacher-forced gold trajectory of ``ep``'s sample."""
        return teacher_trajectory(ep.sample, self.env.max_steps)

    # -- data -----------------------------------------------------------------------------
    def draw_episodes(self) -> list[Episode]:
        """Training samples drawn by the env's reset generator (checkpointed with the env) until
        they hold at least ``batch_size`` teacher-forced transitions."""
        episodes: list[Episode] = []
        n, draws = 0, 0
        while n < self.batch_size:
            draws += 1
            if draws > MAX_DRAWS_PER_TRANSITION * self.batch_size:
                raise RuntimeError(
                    "learner=sft needs training samples with gold chunks (sf_idx); "
                    f"none found in {draws - 1} draws from the {self.env.name} set"
                )
            ep = self.env.reset_random(0)
            steps = len(self.trajectory(ep))
            if steps:
                episodes.append(ep)
                n += steps
        self.qnet.prepare(episodes)
        return episodes

    # -- loss -----------------------------------------------------------------------------
    # Samples whose framed chunk and state tokens add up to at most this many share one
    # forward/backward pass (a larger haystack goes alone): activation memory stays bounded
    # without a backward pass and an encoder call per sample.
    GROUP_TOKENS = 1 << 15

    def group_logits(self, episodes: Sequence[Episode], train: bool = True) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per sample, Q(s_t, ·) over its chunks for every teacher-forced state (unavailable chunks
        at −inf) and the gold chunks: (logits [T′, N], targets [T′]); with ``train``, with gradient
        and encoders in train mode, else gradient-free in eval mode (experiments/round5/sft_probe.py); one
        length-bucketed encoder pass over all the samples' chunks and one over all their
        teacher-forced states."""
        golds = [self.trajectory(ep) for ep in episodes]
        held = [[gold[:t] for t in range(len(gold))] for gold in golds]
        device = self.qnet.device
        return [
            (logits.masked_fill(~avail, float("-inf")), torch.tensor(gold, device=device))
            for (logits, avail), gold in zip(self.qnet.held_scores(episodes, held, train), golds)
        ]

    def groups(self, episodes: Sequence[Episode]) -> list[list[Episode]]:
        """Consecutive samples packed into passes of at most GROUP_TOKENS framed tokens."""
        inputs = self.qnet.inputs
        layout = inputs.layout
        out: list[list[Episode]] = []
        used = 0
        for ep in episodes:
            lens = inputs.action_lengths(ep)
            steps = len(self.trajectory(ep))
            # a state holds the question and at most T′−1 segments of memory_content tokens
            cost = int(lens.sum()) + layout.n_special * ep.n_chunks + steps * steps * (layout.memory_content + 1)
            if not out or used + cost > self.GROUP_TOKENS:
                out.append([])
                used = 0
            out[-1].append(ep)
            used += cost
        return out

    def loss_on(self, episodes: Sequence[Episode], scale: float = 1.0) -> dict[str, float]:
        """Backpropagate ``scale`` × the loss of ``episodes``: the trained hops' losses summed, over
        the number of transitions (round 4's binary loss: over the number of samples), one backward
        pass per group of samples (:meth:`groups`). Returns scalars, ``gold_rank`` the mean rank of
        the gold chunk among a hop's available chunks (1 = the greedy pick)."""
        n_total = sum(len(self.trajectory(ep)) for ep in episodes)
        denom = len(episodes) if self.binary else n_total
        sums = torch.zeros(5, device=self.qnet.device)  # Σ loss, Σ Q(s, gold), correct argmax, hops trained, Σ rank
        for group in self.groups(episodes):
            parts = self.group_logits(group)
            trained = [trained_hops(logits, target, self.stop_at_first_miss) for logits, target in parts]
            loss = sum(
                (hop_losses(logits, target, self.binary) * w).sum() for (logits, target), w in zip(parts, trained)
            )
            (loss * (scale / denom)).backward()
            with torch.no_grad():
                sums[0] += loss.detach()
                for (logits, target), w in zip(parts, trained):
                    sums[1] += logits.gather(1, target[:, None]).sum()
                    sums[2] += (logits.argmax(1) == target).sum()
                    sums[3] += w.sum()
                    sums[4] += gold_ranks(logits, target).sum()
        loss_sum, q_sum, correct, n_trained, rank_sum = sums.tolist()  # one device sync per micro-step
        return {
            "ce_loss": loss_sum / denom,
            "q_mean": q_sum / n_total,
            "sft_acc": correct / n_total,
            "hops_trained": n_trained / n_total,
            "gold_rank": rank_sum / n_total,
            "transitions": float(n_total),
        }

    # -- one micro-step -------------------------------------------------------------------
    def micro_step(self) -> dict[str, float]:
        episodes = self.draw_episodes()
        scalars = self.loss_on(episodes, 1.0 / self.k_accum)
        self.counters.env_steps += int(scalars["transitions"])
        self.counters.episodes += len(episodes)
        if self.end_micro_step():
            scalars.update(self.optimizer_step())  # no α, no EMA
        return scalars

    def state_dict(self) -> dict[str, Any]:
        return {"objective": "sft", **super().state_dict()}
