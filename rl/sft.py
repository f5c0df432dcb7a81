"""Supervised baseline "multi-step RAG w. SFT" (paper Table 3; SPEC §4.5), ``algo.objective: sft``.

The paper names only "the Beam-Retriever trajectory-supervision loss on gold facts"; the rebuild's
definition (the exact loss is [unspecified]): for every training sample take the teacher-forced gold
trajectory (gold chunks in document order, at most T of them). At step t the state is the question
plus the first t gold chunks, the available chunks are all others, and the loss is the softmax
cross-entropy of Q(s_t, ·) over the available chunks with the next gold chunk as the target.

Same agent (encoders E_s, E_a, state layout, rotation by the chunk position codes of s_t) and the
same greedy evaluation as Q-RAG; only the learning signal differs. No rollouts, no target values:
the target encoders and α are unused (α is kept as a constant attribute for the trainer's logs).
Interface as :class:`rl.pqn.PQNLearner`: ``micro_step() -> scalars``, ``optimizer_step``,
``state_dict``/``load_state_dict``, ``counters``, ``stats``, ``env``, ``alpha``, ``optimizer``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from envs.env import Episode, VecRetrievalEnv
from envs.types import sf_known
from rl.agent import QRAGAgent
from rl.learner_base import LearnerBase

MAX_DRAWS_PER_TRANSITION = 100  # give up when the training set has (almost) no gold facts


def teacher_trajectory(sample: dict[str, Any], max_steps: int) -> list[int]:
    """Gold chunk indices in document order, truncated to the step budget T."""
    if not sf_known(sample):
        return []
    return sorted(set(int(i) for i in sample["sf_idx"]))[:max_steps]


class SFTLearner(LearnerBase):
    def __init__(self, agent: QRAGAgent, env: VecRetrievalEnv, algo_cfg: Any, cfg: Any, legacy: Any = None):
        # batch_size = minimum teacher-forced transitions per micro-step; rollout_len is nominal
        # (for the trainer's batch log); α and the policy generator are unused by this objective.
        super().__init__(agent, env, algo_cfg, cfg)

    # -- data -----------------------------------------------------------------------------
    def draw_episodes(self) -> list[Episode]:
        """Training samples drawn by the env's reset generator (checkpointed with the env) until
        they hold at least ``batch_size`` teacher-forced transitions."""
        eps: list[Episode] = []
        n, draws = 0, 0
        while n < self.batch_size:
            draws += 1
            if draws > MAX_DRAWS_PER_TRANSITION * self.batch_size:
                raise RuntimeError("algo.objective=sft needs training samples with gold chunks (sf_idx); "
                                   f"none found in {draws - 1} draws from the {self.env.name} set")
            ep = self.env.reset_random(0)
            steps = len(teacher_trajectory(ep.sample, self.env.max_steps))
            if steps:
                eps.append(ep)
                n += steps
        return eps

    # -- loss -----------------------------------------------------------------------------
    def trajectory_logits(self, ep: Episode) -> tuple[torch.Tensor, torch.Tensor]:
        """Q(s_t, ·) over the chunks of ``ep``'s sample for every teacher-forced state (unavailable
        chunks at −inf), with gradient, encoders in train mode: (logits [T′, N], targets [T′])."""
        agent, gold = self.agent, teacher_trajectory(ep.sample, self.env.max_steps)
        chunks = agent.embed(agent.action_enc, [agent.action_ids(ep, j) for j in range(ep.n_chunks)],
                             train=True, grad=True)  # [N, d], un-rotated
        states = agent.embed(agent.state_enc, [agent.state_ids(ep, self.env.sort_by_index, selected=gold[:t])
                                               for t in range(len(gold))], train=True, grad=True)  # [T′, d]
        avail = torch.ones((len(gold), ep.n_chunks), dtype=torch.bool, device=agent.device)
        rows = []
        for t in range(len(gold)):
            avail[t, gold[:t]] = False
            # the env's own position codes for "gold[:t] selected" (SPEC §3), one sample pass
            codes = dataclasses.replace(ep, available=avail[t], selected=gold[:t]).codes(self.env.pos)
            rows.append(agent.rotate(chunks, codes) @ states[t].float())
        logits = torch.stack(rows).masked_fill(~avail, float("-inf"))
        return logits, torch.tensor(gold, device=agent.device)

    def loss_on(self, eps: Sequence[Episode], scale: float = 1.0) -> dict[str, float]:
        """Backpropagate ``scale`` × mean cross-entropy over all teacher-forced transitions of
        ``eps``, one sample at a time (activations of one haystack in memory). Returns scalars."""
        n_total = sum(len(teacher_trajectory(ep.sample, self.env.max_steps)) for ep in eps)
        ce_sum, q_sum, correct = 0.0, 0.0, 0
        for ep in eps:
            logits, target = self.trajectory_logits(ep)
            ce = F.cross_entropy(logits, target, reduction="sum")
            (ce * (scale / n_total)).backward()
            with torch.no_grad():
                ce_sum += float(ce)
                q_sum += float(logits.gather(1, target[:, None]).sum())
                correct += int((logits.argmax(1) == target).sum())
        return {"qf_loss": ce_sum / n_total, "q_mean": q_sum / n_total, "sft_acc": correct / n_total,
                "transitions": float(n_total)}

    # -- one micro-step -------------------------------------------------------------------
    def micro_step(self) -> dict[str, float]:
        eps = self.draw_episodes()
        scalars = self.loss_on(eps, 1.0 / self.k_accum)
        self.counters.micro_steps += 1
        self.counters.env_steps += int(scalars["transitions"])
        self.counters.episodes += len(eps)
        if self.counters.micro_steps % self.k_accum == 0:
            scalars.update(self.optimizer_step())
        return scalars

    def optimizer_step(self) -> dict[str, float]:
        """SPEC §5.5 steps 1-4 and 8 (clip, AdamW, scheduler, zero, stale caches); no α, no EMA."""
        scalars = self.gradient_step()
        self.finish_step()
        return scalars

    def state_dict(self) -> dict[str, Any]:
        return {"objective": "sft", **super().state_dict()}
