"""The export's sentence-transformers folder (rl/tool/export.py), loaded with the real library (the
optional extra `st`, which scripts/install.sh installs): on a trained run, whose state and chunk
encoders differ, ``encode_query`` / ``encode_document`` must give the retriever's own embeddings of
a question alone (the first step's state) and of a chunk, prefixes, caps and pool_scale included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from sentence_transformers import SentenceTransformer

from rl.model.tokens.splice import action_ids, state_ids
from rl.model.tokens.tokenize import tokenize_sample
from rl.tool.retriever import QRAGRetriever

QUESTIONS = ["Where is Mary?", "Where was the football before the kitchen?"]
CHUNKS = [
    "Mary moved to the kitchen.",
    # longer than the tiny run's 16-token chunk cap: both sides must cut it alike
    "John went back to the garden after he had been to the office and to the hallway twice.",
    "The sky is blue.",
]


def own_embeddings(r: QRAGRetriever, questions: list[str], chunks: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """The retriever's state embeddings of each question with nothing retrieved yet, and its chunk
    embeddings, through the Q-network's own tokens and encoding path."""
    q = r.qnet
    per_question = [
        tokenize_sample(q.inputs.tokenizer, x, chunks, q.inputs.layout, q.inputs.query_prefix, q.inputs.passage_prefix)
        for x in questions
    ]
    states = [state_ids(t, [], q.inputs.layout, q.inputs.eval_memory_content)[0] for t in per_question]
    actions = [action_ids(per_question[0], j, q.inputs.layout) for j in range(len(chunks))]
    with torch.no_grad():
        return q._embed(q.state_enc, states, train=False), q._embed(q.action_enc, actions, train=False, chunks=True)


@pytest.fixture(scope="module")
def exported(trained_run: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[QRAGRetriever, Path]:
    """The trained run and its export."""
    r = QRAGRetriever.from_run(trained_run, use_last=True, device="cpu")
    assert (r.qnet.inputs.query_prefix, r.qnet.inputs.passage_prefix) == ("query: ", "passage: ")
    exp = tmp_path_factory.mktemp("st") / "exp"
    done = r.export(exp)
    assert done["sentence_transformer"] and not done["shared_encoders"]
    return r, exp


def test_encode_query_and_document_are_the_retrievers_embeddings(exported: tuple[QRAGRetriever, Path]) -> None:
    r, exp = exported
    folder = exp / "sentence_transformer"
    model = SentenceTransformer(str(folder), device="cpu")
    states, chunks = own_embeddings(r, QUESTIONS, CHUNKS)
    got_q = model.encode_query(QUESTIONS, convert_to_tensor=True)
    got_d = model.encode_document(CHUNKS, convert_to_tensor=True)
    # equal up to float noise: the two sides pad their batches differently
    assert torch.allclose(got_q, states, atol=1e-6, rtol=0)
    assert torch.allclose(got_d, chunks, atol=1e-6, rtol=0)
    assert torch.equal(model.encode(CHUNKS, convert_to_tensor=True), got_d)  # plain encode: the document route
    assert torch.allclose(model.similarity(got_q, got_d), states @ chunks.T, atol=1e-6, rtol=0)
    # the routes hold different encoders: a question through the chunk route is another vector
    crossed = model.encode_document(QUESTIONS, prompt="query: ", convert_to_tensor=True)
    assert (crossed - got_q).abs().max() > 1e-4
    readme = (folder / "README.md").read_text()
    assert readme == (exp / "README.md").read_text()
    assert "encode_query" in readme and "cannot do alone" in readme and "different weights" in readme
    assert json.loads((exp / "qrag_retriever.json").read_text())["sentence_transformer"] is True


def test_each_route_loads_alone_and_gives_the_routers_vectors(exported: tuple[QRAGRetriever, Path]) -> None:
    """Issue 47 item 3: ``query/`` and ``document/`` load with ``SentenceTransformer(folder)`` and
    their plain ``encode`` (prefix included) gives the Router's ``encode_query`` / ``encode_document``."""
    r, exp = exported
    router = SentenceTransformer(str(exp / "sentence_transformer"), device="cpu")
    query = SentenceTransformer(str(exp / "query"), device="cpu")
    document = SentenceTransformer(str(exp / "document"), device="cpu")
    want_q = router.encode_query(QUESTIONS, convert_to_tensor=True)
    want_d = router.encode_document(CHUNKS, convert_to_tensor=True)
    assert torch.equal(query.encode(QUESTIONS, convert_to_tensor=True), want_q)
    assert torch.equal(query.encode_query(QUESTIONS, convert_to_tensor=True), want_q)
    assert torch.equal(document.encode(CHUNKS, convert_to_tensor=True), want_d)
    assert torch.equal(document.encode_document(CHUNKS, convert_to_tensor=True), want_d)
    assert (query.max_seq_length, document.max_seq_length) == (
        r.qnet.inputs.eval_memory_content + 2,
        r.qnet.inputs.layout.action_cap,
    )
    assert query.similarity_fn_name == document.similarity_fn_name == "dot"
    assert (exp / "query" / "README.md").read_text() == (exp / "README.md").read_text()
