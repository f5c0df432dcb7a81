"""The SFT losses (rl/learners/sft.py) against straightforward computations written from their
definitions: every chunk and every teacher-forced state embedded alone (no padding, no batching),
position codes from the env's per-state path, gold chunks in document order. The default:
cross-entropy as logsumexp over the available chunks minus the gold chunk's Q, every hop, mean
over transitions. Round 4's rules (``legacy.sft_binary_loss``, ``legacy.sft_stop_at_first_miss``):
per hop the mean over available chunks of −log σ(±Q), hops after the first wrong greedy pick left
out, summed per sample, mean over samples; each switch alone too.
Same loss and gradients up to float noise, however samples are grouped."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from rl.learners.sft import SFTLearner, teacher_trajectory
from rl.run.train import Trainer

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


def reference_terms(learner, eps):
    """Per sample, per teacher-forced hop: (Q over all chunks, availability, gold chunk)."""
    qnet, env = learner.qnet, learner.env
    out = []
    for ep in eps:
        gold = sorted(set(int(i) for i in ep.sample["sf_idx"]))[: env.max_steps]
        u = embed_unpadded(qnet.action_enc, [qnet.inputs.action_ids(ep, j) for j in range(ep.n_chunks)])
        states = embed_unpadded(
            qnet.state_enc, [qnet.inputs.state_ids(ep, selected=gold[:t]) for t in range(len(gold))]
        )
        hops = []
        for t, s in enumerate(states):
            avail = torch.ones(ep.n_chunks, dtype=torch.bool)
            avail[gold[:t]] = False
            state = dataclasses.replace(ep, available=avail, selected=gold[:t])  # the env's state "gold[:t] held"
            codes = state.codes(env.pos)
            hops.append(((u if codes is None else qnet.rope(u, codes)) @ s, avail, gold[t]))
        out.append(hops)
    return out


def reference_loss(learner, eps, binary=False, early_stop=False):
    """Σ over trained hops of the hop's loss, over all transitions (binary: over samples)."""
    total, n_transitions = torch.zeros(()), 0
    for hops in reference_terms(learner, eps):
        alive = True  # Beam Retriever trains no hop after its beam lost the gold path
        for q, avail, g in hops:
            cand = torch.nonzero(avail).flatten().tolist()
            n_transitions += 1
            if alive and binary:
                total = total + torch.stack([-F.logsigmoid(q[j] if j == g else -q[j]) for j in cand]).mean()
            elif alive:
                total = total + torch.logsumexp(q[avail], 0) - q[g]
            alive = alive and not (early_stop and cand[int(q[cand].argmax())] != g)
    return total / (len(eps) if binary else n_transitions)


def reference_ranks(learner, eps, early_stop):
    """(mean rank of the gold chunk among the available ones, share of hops trained)."""
    ranks, trained, n = 0, 0, 0
    for hops in reference_terms(learner, eps):
        alive = True
        for q, avail, g in hops:
            ranks += 1 + sum(int(q[j] > q[g]) for j in torch.nonzero(avail).flatten().tolist())
            trained, n = trained + alive, n + 1
            alive = alive and not (early_stop and int(torch.where(avail, q, -torch.inf).argmax()) != g)
    return ranks / n, trained / n


def grads(qnet):
    return [None if p.grad is None else p.grad.clone() for p in qnet.trainable_parameters()]


@pytest.mark.parametrize("binary, early_stop", [(False, False), (True, True), (True, False), (False, True)])
def test_sft_loss_and_gradients_match_the_definition(tiny_cfg, monkeypatch, binary, early_stop):
    switches = [f"legacy.sft_binary_loss={binary}".lower(), f"legacy.sft_stop_at_first_miss={early_stop}".lower()]
    trainer = Trainer(tiny_cfg(*SFT, *switches))
    learner, qnet = trainer.learner, trainer.qnet
    assert isinstance(learner, SFTLearner) and learner.env.pos.processor == "relative"
    assert qnet.positions == learner.env.pos and qnet.inputs.sort_by_index == learner.env.sort_by_index
    assert (learner.binary, learner.stop_at_first_miss) == (binary, early_stop)
    for m in qnet.modules():  # dropout off: both sides must draw no random masks
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    eps = learner.draw_episodes()
    assert len(eps) >= 3 and all(len(teacher_trajectory(ep.sample, 2)) == 2 for ep in eps)
    lens = {len(qnet.inputs.action_ids(ep, j)) for ep in eps for j in range(ep.n_chunks)}
    assert len(lens) > 1  # chunks of mixed lengths: padding and length buckets are exercised
    with torch.no_grad():  # some sample stops early: the test tells early stopping from none
        stopped = reference_loss(learner, eps, binary, early_stop=True).item()
        assert stopped != pytest.approx(reference_loss(learner, eps, binary, early_stop=False).item())

    for processor in ("relative", "none"):  # rotated chunks; plain dot products
        # the reference reads the env's settings, the network its own (bound when it was built)
        learner.env.pos = qnet.positions = dataclasses.replace(learner.env.pos, processor=processor)
        check_against_reference(learner, eps, monkeypatch, binary, early_stop)


def check_against_reference(learner, eps, monkeypatch, binary, early_stop):
    qnet = learner.qnet
    qnet.zero_grad(set_to_none=True)
    qnet.state_enc.train(), qnet.action_enc.train()
    ref = reference_loss(learner, eps, binary, early_stop)
    ref.backward()
    with torch.no_grad():
        rank, trained = reference_ranks(learner, eps, early_stop)
    want = grads(qnet)
    assert sum(g is not None for g in want) > 0
    scale = max(float(w.abs().max()) for w in want if w is not None)  # float noise is relative to this

    for budget in (DEFAULT_GROUP_TOKENS, 1):  # all samples in one pass; one sample per pass
        monkeypatch.setattr(SFTLearner, "GROUP_TOKENS", budget)
        assert len(learner.groups(eps)) == (1 if budget > 1 else len(eps))
        qnet.zero_grad(set_to_none=True)
        scalars = learner.loss_on(eps)
        assert scalars["transitions"] == 2 * len(eps)
        assert scalars["ce_loss"] == pytest.approx(ref.item(), rel=1e-5, abs=1e-6)
        assert scalars["gold_rank"] == pytest.approx(rank) and scalars["hops_trained"] == pytest.approx(trained)
        for w, g in zip(want, grads(qnet)):
            if w is None:
                assert g is None or float(g.abs().max()) <= 1e-5 * scale
            else:
                torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5 * scale)
