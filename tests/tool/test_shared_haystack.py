"""Many questions over one haystack (rl/model/tokens/per_sample.py's Haystack, QNetwork.prepare(..., share=True)): the
chunks are tokenised and embedded once for all the questions, with the same picks and Q-values as
separate retrievals, and two chunk lists that differ in one chunk are never confused."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from omegaconf import open_dict

from envs.feedback import build_feedback
from rl.eval.beam import beam_episodes
from rl.eval.greedy import greedy_episodes
from rl.model.fast import encoding as encoding_module
from rl.model.tokens import tokenize as tokens_module
from rl.tool.retriever import QRAGRetriever
from tests.conftest import chunk_embeddings

from .conftest import eval_cfg
from .test_api import samples_of


def retriever_in_groups_of(run: Path, size: int) -> QRAGRetriever:
    """The tiny run's retriever as if the run had been saved with ``eval_group_size=size`` (the
    tool steps greedy episodes in groups of the run's eval_group_size)."""
    retriever = QRAGRetriever.from_eval_config(eval_cfg(run, "envs.num_sentences=12"))
    with open_dict(retriever.cfg):
        retriever.cfg.eval_group_size = size
    return retriever


@pytest.fixture(scope="module")
def grouped(tiny_run: Path) -> QRAGRetriever:
    """Greedy episodes stepped in groups of 2, so 5 questions take three groups."""
    return retriever_in_groups_of(tiny_run, 2)


@pytest.fixture(scope="module")
def single(tiny_run: Path) -> QRAGRetriever:
    """Groups of 1: every state is encoded alone, as a separate retrieval encodes it."""
    return retriever_in_groups_of(tiny_run, 1)


@pytest.fixture(scope="module")
def haystack(grouped: QRAGRetriever) -> tuple[list[str], list[str]]:
    """A real qa1 haystack (12 sentences) and five questions asked of it (the four test stories'
    questions, then a longer one)."""
    samples = samples_of(grouped)
    questions = [s["question"] for s in samples] + [f"After the last move, {samples[0]['question'].lower()}"]
    return list(samples[0]["chunks"]), questions


@contextmanager
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Chunk rows embedded and chunk texts tokenised, counted where every path goes through: the
    encoding path's calls on action sequences and the chunk tokeniser (one-shot and streamed)."""
    seen = {"rows": 0, "tokenised": 0}
    call = encoding_module.EncodingPath.__call__

    def spy_call(self, encoder, seqs, *args, chunks=False, **kwargs):
        if chunks:
            seen["rows"] += len(seqs)
        return call(self, encoder, seqs, *args, chunks=chunks, **kwargs)

    def spy_stream(original):
        def stream(tokenizer, chunks, *args, **kwargs):
            seen["tokenised"] += len(chunks)
            return original(tokenizer, chunks, *args, **kwargs)

        return stream

    with monkeypatch.context() as m:
        m.setattr(encoding_module.EncodingPath, "__call__", spy_call)
        m.setattr(tokens_module, "stream_chunk_tokens", spy_stream(tokens_module.stream_chunk_tokens))
        m.setattr(encoding_module, "stream_chunk_tokens", spy_stream(encoding_module.stream_chunk_tokens))
        yield seen


def picks(results) -> list[list[tuple[int, float]]]:
    return [[(p.index, p.q_value) for p in r.picks] for r in results]


@pytest.mark.parametrize("planner", ["greedy", "beam"])
def test_one_text_many_questions_embeds_once_and_picks_as_separate_calls(
    single: QRAGRetriever, haystack, monkeypatch: pytest.MonkeyPatch, planner: str
) -> None:
    chunks, questions = haystack
    separate = [single.retrieve(q, chunks, planner=planner, steps=3) for q in questions]
    with counted(monkeypatch) as seen:
        shared = single.retrieve_batch(questions, chunks, planner=planner, steps=3)
    assert seen == {"rows": len(chunks), "tokenised": len(chunks)}  # once, not once per question
    assert picks(shared) == picks(separate)  # exactly: same chunk embeddings, states encoded alone
    tok, prefix = single.qnet.inputs.tokenizer, single.qnet.inputs.query_prefix
    haystack_len = sum(len(tok(c)["input_ids"]) for c in chunks)
    assert [r.text_tokens for r in shared] == [len(tok(prefix + q)["input_ids"]) + haystack_len for q in questions]


def test_grouped_questions_embed_once_and_pick_as_separate_calls(
    grouped: QRAGRetriever, haystack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three groups (2 + 2 + 1 questions): one embedding serves them all; the Q-values agree with
    separate calls up to the batching of state encodings (as tests/tool/test_api.py's)."""
    chunks, questions = haystack
    text = " ".join(chunks)  # split once inside retrieve_batch
    separate = [grouped.retrieve(q, text, steps=3) for q in questions]
    with counted(monkeypatch) as seen:
        shared = grouped.retrieve_batch(questions, text, steps=3)
    assert seen["rows"] == shared[0].n_chunks == seen["tokenised"]
    for a, b in zip(shared, separate):
        assert [p.index for p in a.picks] == [p.index for p in b.picks]
        assert [p.q_value for p in a.picks] == pytest.approx([p.q_value for p in b.picks], abs=1e-5)


def test_stop_threshold_over_a_shared_text(single: QRAGRetriever, haystack) -> None:
    chunks, questions = haystack
    full = single.retrieve_batch(questions, chunks, steps=3)
    q = sorted(r.picks[1].q_value for r in full)[2]  # some questions stop before step 2, some do not
    shared = single.retrieve_batch(questions, chunks, steps=3, stop_threshold=q)
    separate = [single.retrieve(x, chunks, steps=3, stop_threshold=q) for x in questions]
    assert picks(shared) == picks(separate)
    assert 1 in {len(r.picks) for r in shared} and max(len(r.picks) for r in shared) > 1


def test_chunk_lists_that_differ_in_one_chunk_are_two_haystacks(
    single: QRAGRetriever, haystack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same length, same first and last chunk, one middle chunk changed: each question is answered
    over its own list (the changed chunk is picked where it wins), both lists embedded in full."""
    chunks, questions = haystack
    other = list(chunks)
    other[5] = "Mary went back to the cellar."  # a place no qa1 story names
    lists = [chunks, list(chunks), other, list(other)]  # equal neighbours share (groups of 1 keep the last)
    qs = [questions[0]] * 4
    separate = [single.retrieve(q, c, steps=3) for q, c in zip(qs, lists)]
    with counted(monkeypatch) as seen:
        got = single.retrieve_batch(qs, lists, steps=3)
    assert seen["rows"] == 2 * len(chunks)  # two haystacks, the equal copies shared
    assert picks(got) == picks(separate)
    assert picks(got)[0] == picks(got)[1] != picks(got)[2] == picks(got)[3]


def test_evaluation_samples_sharing_a_haystack_share_one_embedding(
    grouped: QRAGRetriever, haystack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Evaluation's loops (greedy in groups of 2, beam one sample at a time) over samples whose chunk
    lists are equal but distinct objects, as a loader builds them: embedded once, also when the next
    group shares a haystack with the previous group's first sample; a sample over another haystack
    in between is embedded itself, and a haystack is embedded again after a group without it (only
    the previous group's haystacks are kept, so memory stays bounded)."""
    chunks, questions = haystack
    qnet, cfg = grouped.qnet, grouped.cfg
    fb = build_feedback(cfg.feedback, cfg.envs, "test", str(cfg.envs.task), grouped.legacy)
    data = [
        {"id": k, "question": q, "answer": "", "chunks": list(chunks), "sf_idx": [], "sf_known": False}
        for k, q in enumerate(questions)
    ]
    other = dict(data[0], chunks=chunks[:-1])
    n = len(chunks)
    settings = grouped.settings(3, None, "greedy", 4, 3)
    for order, rows in (
        ([0, 1, 2, 3, 4], n),
        ([0, "other", 1, 2, 3], n + n - 1),  # groups (A, B), (A, A), (A)
        (["other", "other", 0, 1, "other"], n - 1 + n + n - 1),  # (B, B), (A, A), (B)
    ):
        samples = [other if k == "other" else data[k] for k in order]
        with counted(monkeypatch) as seen:
            records = list(greedy_episodes(qnet, samples, range(len(samples)), fb, settings))
        assert seen["rows"] == rows and len(records) == len(samples), order
    with counted(monkeypatch) as seen:
        list(beam_episodes(qnet, data, range(len(data)), fb, settings, 2, 2))
    assert seen["rows"] == n
    with counted(monkeypatch) as seen:
        list(beam_episodes(qnet, [data[0], data[1], other, data[2]], range(4), fb, settings, 2, 2))
    assert seen["rows"] == 3 * n - 1


def test_shared_embeddings_are_one_tensor_and_go_stale_with_the_weights(grouped: QRAGRetriever, haystack) -> None:
    """The questions' episodes read one [N, d] tensor (no copy per question); a weight change makes
    it stale for all of them, and the re-embedded tensor equals a fresh embedding."""
    from envs.env import Episode

    chunks, questions = haystack
    qnet = grouped.qnet
    eps = [Episode(0, {"question": q, "chunks": chunks}, torch.ones(len(chunks), dtype=torch.bool)) for q in questions]
    held = qnet.prepare(eps, share=True, embed=True)
    assert all(h is held[0] for h in held)
    u = chunk_embeddings(qnet, eps[0], "online", train=False)
    assert all(chunk_embeddings(qnet, ep, "online", train=False) is u for ep in eps)
    tokens = [qnet.inputs.tokens.get(ep) for ep in eps]
    assert all(t.action_chunks is tokens[0].action_chunks for t in tokens)
    qnet.weights_version += 1  # an optimiser step or a loaded checkpoint
    v = chunk_embeddings(qnet, eps[1], "online", train=False)
    assert v is not u and all(chunk_embeddings(qnet, ep, "online", train=False) is v for ep in eps)
    want = qnet._embed(qnet.action_enc, [qnet.inputs.action_ids(eps[0], j) for j in range(len(chunks))], train=False)
    torch.testing.assert_close(v, want, rtol=1e-5, atol=1e-6)
    del eps, held, tokens
    assert len(qnet.inputs.haystacks) == 0  # the haystack died with its episodes
