"""The SFT loss (rl/agents/sft.py) against a straightforward computation written from its definition:
every chunk and every teacher-forced state embedded alone (no padding, no batching), position
codes from the env's per-state path, cross-entropy as logsumexp over the available chunks minus
the gold chunk's Q. Same loss and gradients up to float noise, however samples are grouped."""

import dataclasses

import pytest
import torch

from rl.agents.sft import SFTLearner, teacher_trajectory
from rl.trainer import Trainer

DEFAULT_GROUP_TOKENS = SFTLearner.GROUP_TOKENS
SFT = ["learner=sft", "batch_size=6", "final_eval_episodes=0", "eval_episodes=2"]  # qa2, T = 2


def embed_unpadded(encoder, seqs):
    """Embeddings of id lists without any padding: sequences of one length share a call."""
    out = [None] * len(seqs)
    for n in sorted({len(x) for x in seqs}):
        rows = [i for i, x in enumerate(seqs) if len(x) == n]
        t = torch.tensor([seqs[i] for i in rows])
        for i, e in zip(rows, encoder(t, torch.ones_like(t), False)):
            out[i] = e
    return torch.stack(out)


def reference_loss(learner, eps):
    agent, env = learner.agent, learner.env
    terms = []
    for ep in eps:
        gold = sorted(set(int(i) for i in ep.sample["sf_idx"]))[: env.max_steps]
        u = embed_unpadded(agent.action_enc, [agent.action_ids(ep, j) for j in range(ep.n_chunks)])
        states = embed_unpadded(
            agent.state_enc, [agent.state_ids(ep, env.sort_by_index, selected=gold[:t]) for t in range(len(gold))]
        )
        for t, s in enumerate(states):
            avail = torch.ones(ep.n_chunks, dtype=torch.bool)
            avail[gold[:t]] = False
            state = dataclasses.replace(ep, available=avail, selected=gold[:t])  # the env's state "gold[:t] held"
            codes = state.codes(env.pos)
            q = (u if codes is None else agent.rope(u, codes)) @ s
            terms.append(torch.logsumexp(q[avail], 0) - q[gold[t]])
    return torch.stack(terms).mean()


def grads(agent):
    return [None if p.grad is None else p.grad.clone() for p in agent.trainable_parameters()]


def test_sft_loss_and_gradients_match_the_definition(tiny_cfg, monkeypatch):
    trainer = Trainer(tiny_cfg(*SFT))
    learner, agent = trainer.learner, trainer.agent
    assert isinstance(learner, SFTLearner) and learner.env.pos.processor == "relative"
    for m in agent.modules():  # dropout off: both sides must draw no random masks
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    eps = learner.draw_episodes()
    assert len(eps) >= 3 and all(len(teacher_trajectory(ep.sample, 2)) == 2 for ep in eps)
    lens = {len(agent.action_ids(ep, j)) for ep in eps for j in range(ep.n_chunks)}
    assert len(lens) > 1  # chunks of mixed lengths: padding and length buckets are exercised

    for processor in ("relative", "none"):  # rotated chunks; plain dot products
        learner.env.pos = dataclasses.replace(learner.env.pos, processor=processor)
        check_against_reference(learner, eps, monkeypatch)


def check_against_reference(learner, eps, monkeypatch):
    agent = learner.agent
    agent.zero_grad(set_to_none=True)
    agent.state_enc.train(), agent.action_enc.train()
    ref = reference_loss(learner, eps)
    ref.backward()
    want = grads(agent)
    assert sum(g is not None for g in want) > 0
    scale = max(float(w.abs().max()) for w in want if w is not None)  # float noise is relative to this

    for budget in (DEFAULT_GROUP_TOKENS, 1):  # all samples in one pass; one sample per pass
        monkeypatch.setattr(SFTLearner, "GROUP_TOKENS", budget)
        assert len(learner.groups(eps)) == (1 if budget > 1 else len(eps))
        agent.zero_grad(set_to_none=True)
        scalars = learner.loss_on(eps)
        assert scalars["transitions"] == 2 * len(eps)
        assert scalars["ce_loss"] == pytest.approx(ref.item(), rel=1e-5, abs=1e-6)
        for w, g in zip(want, grads(agent)):
            if w is None:
                assert g is None or float(g.abs().max()) <= 1e-5 * scale
            else:
                torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5 * scale)
