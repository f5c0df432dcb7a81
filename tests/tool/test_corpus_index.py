"""The corpus index (rl/tool/corpus_index.py) against QRAGRetriever over the same chunk list: exact
search gives the same picks and Q-values (greedy, Q-stop, beam), with and without positions, and
with query and passage prefixes; FAISS approximate searches are measured against it; a build
interrupted after a shard resumes to the same bytes; a foreign run, a changed corpus and malformed
lines are refused by name."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from rl.tool.corpus_files import CorpusError, iter_chunks
from rl.tool.corpus_index import CorpusIndex, default_settings, recall_of
from rl.tool.corpus_search import faiss_module
from rl.tool.retriever import QRAGRetriever, fill_run_from_index, split_text
from rl.tool.shard_store import IndexStoreError
from tests.conftest import ROOT
from tests.eval.conftest import TRAIN_OVERRIDES, write_run_config

from .conftest import eval_cfg

BOOK = ROOT / "data" / "examples" / "persuasion_ch1_qa1.txt"  # 82 sentences, four planted qa1 facts
QUESTIONS = [json.loads(x)["question"] for x in (ROOT / "data/examples/persuasion_ch1_qa1.questions.jsonl").open()][:3]
QUESTIONS += ["Which magazine was started first?"]


def hotpot_paragraphs(n_questions: int) -> list[dict]:
    """The real HotpotQA paragraphs of the first test questions, as corpus records."""
    rows = []
    with gzip.open(ROOT / "data" / "hotpotqa" / "subset_test.jsonl.gz", "rt", encoding="utf-8") as f:
        for k, line in zip(range(n_questions), f):
            for title, sentences in json.loads(line)["context"]:
                rows.append({"id": f"{k}/{title}", "title": title, "text": " ".join(sentences)})
    return rows


def settings(**changes) -> object:
    node = default_settings()
    node.title_sep = " "  # the qa1 run has no title rule of its own: HotpotQA's
    for k, v in changes.items():
        node[k] = v
    return node


@pytest.fixture(scope="session")
def none_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The evaluation tests' tiny run (untrained 1-layer MiniLM, qa1) without positions: Q is a
    plain inner product, as in the open-domain runs."""
    from omegaconf import OmegaConf as OC

    from rl.run.build import qnet_from_cfg
    from rl.run.config import without_hydra

    run_dir = tmp_path_factory.mktemp("none_run")
    cfg = write_run_config(run_dir, TRAIN_OVERRIDES + ["envs.positions_processor=none"])
    qnet = qnet_from_cfg(cfg, torch.device("cpu"))
    state = {"learner": {"agent": qnet.state_dict()}, "config": OC.to_container(without_hydra(cfg), resolve=True)}
    torch.save(state, run_dir / "model_best.pt")
    return run_dir


@pytest.fixture(scope="module")
def plain(none_run: Path) -> QRAGRetriever:
    return QRAGRetriever.from_eval_config(eval_cfg(none_run))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[str]]:
    """A text file and a JSONL file (with titles and ids) and the chunk list they make."""
    folder = tmp_path_factory.mktemp("corpus")
    rows = hotpot_paragraphs(5)
    jsonl = folder / "hotpot.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    chunks = split_text(BOOK.read_text(encoding="utf-8-sig"))[0] + [r["title"] + " " + r["text"] for r in rows]
    return [BOOK, jsonl], chunks


def picks(results) -> list[list[tuple[int, float]]]:
    return [[(p.index, p.q_value) for p in r.picks] for r in results]


def assert_same_picks(got: list[list[tuple[int, float]]], want: list[list[tuple[int, float]]]) -> None:
    """The same chunks in the same order; Q-values equal within fp32 rounding (the index scores one
    state at a time, the tool all states of a step in one batched product, rl/model/qfunc.py)."""
    assert [[i for i, _ in r] for r in got] == [[i for i, _ in r] for r in want]
    assert [q for r in got for _, q in r] == pytest.approx([q for r in want for _, q in r], rel=1e-6, abs=1e-7)


RULES = [{"steps": 3}, {"planner": "beam", "steps": 3, "beam_width": 3, "beam_expand": 2}]


def test_chunks_of_a_text_file_are_split_text_of_the_whole(corpus) -> None:
    text = BOOK.read_text(encoding="utf-8-sig")
    got = [c for c in iter_chunks([BOOK], "sentences", None) if c.source == 0]
    chunks, spans = split_text(text)
    assert [c.text for c in got] == chunks and [(c.start, c.end) for c in got] == spans
    lines = "a line\n\n  another one  \r\nlast"
    path = corpus[0][1].parent / "lines.txt"
    path.write_text(lines, encoding="utf-8", newline="")
    got = list(iter_chunks([path], "lines", None))
    assert [c.text for c in got] == split_text(lines.replace("\r\n", "\n"), "lines")[0]
    assert [c.line for c in got] == [1, 3, 4]


@pytest.fixture(scope="module")
def wanted(plain: QRAGRetriever, corpus) -> dict[str, list]:
    """QRAGRetriever's results over the corpus's chunk list: greedy, beam and a Q-stop threshold
    that stops some questions after one pick and lets the others go on."""
    chunks = corpus[1]
    out = {str(rules): plain.retrieve_batch(QUESTIONS, chunks, **rules) for rules in RULES}
    second = sorted(r.picks[1].q_value for r in out[str(RULES[0])])
    out["stop"] = (second[1] + second[2]) / 2
    out["stopped"] = plain.retrieve_batch(QUESTIONS, chunks, steps=4, stop_threshold=out["stop"])
    assert len({len(r.picks) for r in out["stopped"]}) > 1
    return out


def test_exact_index_equals_the_retriever(plain: QRAGRetriever, corpus, wanted, tmp_path: Path) -> None:
    files, chunks = corpus
    CorpusIndex.build(plain, tmp_path / "idx", [str(f) for f in files], settings=settings(), progress=False)
    # torch over the shards; FAISS IndexFlatIP candidates re-scored (the extra `index`)
    for search in ("exact", "flat") if faiss_module() else ("exact",):
        index = CorpusIndex.open(plain, tmp_path / "idx", settings(search=search))
        assert index.store.n_shards == 1 and index.store.n_chunks == len(chunks)
        for rules in RULES:
            want = wanted[str(rules)]
            got = index.retrieve_batch(QUESTIONS, **rules)
            assert_same_picks(picks(got), picks(want))  # one shard = evaluation's own chunk embeddings
            assert [p.chunk for r in got for p in r.picks] == [p.chunk for r in want for p in r.picks]
            assert [r.text_tokens for r in got] == [r.text_tokens for r in want]
        got = index.retrieve_batch(QUESTIONS, steps=4, stop_threshold=wanted["stop"])
        assert_same_picks(picks(got), picks(wanted["stopped"]))
    text = [p for r in got for p in r.picks]
    assert all(BOOK.read_text(encoding="utf-8-sig")[p.start : p.end] == p.chunk for p in text if p.index < 82)
    record = index.retrieve(" ".join(chunks[82].split()[:12]), steps=1).picks[0]  # a paragraph's own words
    assert (record.index, record.chunk, record.start) == (82, chunks[82], None)
    assert record.id == "0/" + record.title and chunks[82].startswith(record.title + " ")
    assert record.source.endswith("hotpot.jsonl") and record.line == 1


def test_the_streamed_build_of_a_gpu_writes_the_same_shards(
    plain: QRAGRetriever, corpus, tmp_path: Path, monkeypatch
) -> None:
    """On a GPU a large shard is tokenised on a thread while it is embedded
    (EncodingPath.tokenize_and_embed); forced here on the CPU, in small slices, it must write the
    shards and token counts of the one-pass build."""
    from rl.model.fast import encoding

    files = [str(f) for f in corpus[0]]
    CorpusIndex.build(plain, tmp_path / "plain", files, settings=settings(shard_size=60), progress=False)
    monkeypatch.setattr(encoding, "STREAM_FIRST_SLICE", 8)
    monkeypatch.setattr(type(plain.qnet.encoding), "streams", lambda self, n: True)
    CorpusIndex.build(plain, tmp_path / "streamed", files, settings=settings(shard_size=60), progress=False)
    a, b = (json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("plain", "streamed"))
    assert a["shards"] == b["shards"] and a["tokens"] == b["tokens"] and len(a["shards"]) > 1
    for shard in a["shards"]:
        emb = [np.load(tmp_path / d / f"{shard['name']}.emb.npy") for d in ("plain", "streamed")]
        np.testing.assert_allclose(emb[1], emb[0], rtol=1e-5, atol=1e-6)


def test_many_shards_give_the_same_picks(plain: QRAGRetriever, corpus, wanted, tmp_path: Path) -> None:
    files, chunks = corpus
    CorpusIndex.build(
        plain, tmp_path / "idx", [str(f) for f in files], settings=settings(shard_size=37), progress=False
    )
    index = CorpusIndex.open(plain, tmp_path / "idx", settings(search="exact"))
    assert index.store.n_shards == -(-len(chunks) // 37)
    for rules in RULES:
        want = wanted[str(rules)]
        got = index.retrieve_batch(QUESTIONS, **rules)
        assert [[i for i, _ in r] for r in picks(got)] == [[i for i, _ in r] for r in picks(want)]
        # shards are embedded in their own length-bucketed batches: last-bit differences only
        assert [q for r in picks(got) for _, q in r] == pytest.approx([q for r in picks(want) for _, q in r], abs=1e-5)


def test_relative_positions_search_exactly_over_the_shards(tiny_run: Path, corpus, tmp_path: Path) -> None:
    retriever = QRAGRetriever.from_eval_config(eval_cfg(tiny_run))
    assert retriever.cfg.envs.positions_processor == "relative"
    chunks = split_text(BOOK.read_text(encoding="utf-8-sig"))[0]
    CorpusIndex.build(retriever, tmp_path / "idx", [str(BOOK)], settings=settings(shard_size=30), progress=False)
    index = CorpusIndex.open(retriever, tmp_path / "idx", settings())
    assert "relative positions" in index.describe() and index.store.n_shards == 3
    for rules in RULES:
        got, want = (
            index.retrieve_batch(QUESTIONS[:2], **rules),
            retriever.retrieve_batch(QUESTIONS[:2], chunks, **rules),
        )
        assert [[i for i, _ in r] for r in picks(got)] == [[i for i, _ in r] for r in picks(want)]
        assert [q for r in picks(got) for _, q in r] == pytest.approx([q for r in picks(want) for _, q in r], abs=1e-5)
    with pytest.raises(IndexStoreError, match="relative positions, so Q is no plain inner product"):
        CorpusIndex.open(retriever, tmp_path / "idx", settings(search="ivf"))


def test_a_prefixed_run_asks_and_indexes_as_the_retriever(trained_run: Path, tmp_path: Path) -> None:
    """A run with query and passage prefixes: the index makes a question's ids with evaluation's
    call (SampleInput.question_ids) and embeds chunks as evaluation does, so its picks, Q-values
    and text lengths equal the retriever's over the same chunk list."""
    retriever = QRAGRetriever.from_run(trained_run, use_last=True, device="cpu")
    assert (retriever.qnet.inputs.query_prefix, retriever.qnet.inputs.passage_prefix) == ("query: ", "passage: ")
    chunks = split_text(BOOK.read_text(encoding="utf-8-sig"))[0]
    CorpusIndex.build(retriever, tmp_path / "idx", [str(BOOK)], settings=settings(), progress=False)
    index = CorpusIndex.open(retriever, tmp_path / "idx", settings(search="exact"))
    got, want = index.retrieve_batch(QUESTIONS, steps=2), retriever.retrieve_batch(QUESTIONS, chunks, steps=2)
    assert [[i for i, _ in r] for r in picks(got)] == [[i for i, _ in r] for r in picks(want)]
    assert [q for r in picks(got) for _, q in r] == pytest.approx([q for r in picks(want) for _, q in r], abs=1e-5)
    assert [r.text_tokens for r in got] == [r.text_tokens for r in want]


def test_approximate_indexes_are_measured_against_the_exact_one(plain: QRAGRetriever, corpus, tmp_path: Path) -> None:
    pytest.importorskip("faiss")
    files, _ = corpus
    CorpusIndex.build(plain, tmp_path / "idx", [str(f) for f in files], settings=settings(), progress=False)
    exact = CorpusIndex.open(plain, tmp_path / "idx", settings(search="exact")).retrieve_batch(QUESTIONS, steps=3)
    # every list probed: IVF is exhaustive, so the picks are the exact ones by construction
    full = CorpusIndex.open(plain, tmp_path / "idx", settings(search="ivf", ivf_nlist=4, ivf_nprobe=4))
    assert picks(full.retrieve_batch(QUESTIONS, steps=3)) == picks(exact)
    measured = {}
    for name, s in {
        "ivf nprobe 1 of 4": settings(search="ivf", ivf_nlist=4, ivf_nprobe=1, candidates=8),
        "hnsw": settings(search="hnsw", hnsw_m=8, hnsw_ef_search=16, candidates=8),
    }.items():
        index = CorpusIndex.open(plain, tmp_path / "idx", s)
        got = index.retrieve_batch(QUESTIONS, steps=3)
        measured[name] = recall_of(got, exact)
        # whatever was found, its Q-values are the exact ones of the chunks it picked
        for g, e in zip(got, exact):
            if [p.index for p in g.picks[:1]] == [p.index for p in e.picks[:1]]:
                assert g.picks[0].q_value == e.picks[0].q_value
    print(measured)
    assert all(m["recall_of_exact_picks"] >= 0.5 for m in measured.values()), measured  # a broken search finds ~0
    assert (tmp_path / "idx" / "faiss-ivf.index").is_file()  # built once, reused
    assert json.loads((tmp_path / "idx" / "manifest.json").read_text())["faiss"]["ivf"]["nlist"] == 4


class Interrupted(Exception):
    pass


def test_an_interrupted_build_resumes_to_the_same_bytes(plain: QRAGRetriever, corpus, tmp_path: Path) -> None:
    files = [str(f) for f in corpus[0]]
    s = settings(shard_size=40)
    CorpusIndex.build(plain, tmp_path / "whole", files, settings=s, progress=False)

    def stop_after_1(k: int) -> None:
        if k == 1:
            raise Interrupted  # killed once shard 1 is on disk

    with pytest.raises(Interrupted):
        CorpusIndex.build(plain, tmp_path / "cut", files, settings=s, progress=False, on_shard=stop_after_1)
    with pytest.raises(IndexStoreError, match="indexing stopped after 80 chunks"):
        CorpusIndex.open(plain, tmp_path / "cut", s)
    resumed: list[int] = []
    CorpusIndex.build(plain, tmp_path / "cut", files, settings=s, progress=False, on_shard=resumed.append)
    assert resumed[0] == 2  # shards 0 and 1 were not embedded again
    names = sorted(p.name for p in (tmp_path / "whole").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "cut").iterdir())
    for name in names:
        if name != "manifest.json":
            assert (tmp_path / "whole" / name).read_bytes() == (tmp_path / "cut" / name).read_bytes(), name
    m = [json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("whole", "cut")]
    assert m[0] == m[1]


def test_a_foreign_run_or_changed_corpus_is_refused(
    plain: QRAGRetriever, none_run: Path, corpus, tmp_path: Path
) -> None:
    files, _ = corpus
    copy = tmp_path / "book.txt"
    copy.write_text(BOOK.read_text(encoding="utf-8-sig")[:2000], encoding="utf-8")
    CorpusIndex.build(plain, tmp_path / "idx", [str(copy)], settings=settings(), progress=False)
    other = QRAGRetriever.from_eval_config(eval_cfg(none_run))
    with torch.no_grad():
        next(other.qnet.action_enc.parameters()).add_(1e-3)  # another checkpoint's chunk encoder
    with pytest.raises(IndexStoreError, match=r"built with another encoder \(sha256 differ\)"):
        CorpusIndex.open(other, tmp_path / "idx", settings())
    with pytest.raises(IndexStoreError, match=r"built with another chunking \(split differ\)"):
        CorpusIndex.build(plain, tmp_path / "idx", [str(copy)], split="lines", settings=settings(), progress=False)
    copy.write_text(copy.read_text() + " One more sentence.", encoding="utf-8")
    with pytest.raises(IndexStoreError, match="the corpus files changed since"):
        CorpusIndex.build(plain, tmp_path / "idx", [str(copy)], settings=settings(), progress=False)
    with pytest.raises(IndexStoreError, match="no manifest.json"):
        CorpusIndex.open(plain, tmp_path, settings())


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"text": "fine"}', "{not json", '{"text": "x"}'], r"bad\.jsonl:2: not valid JSON"),
        (['{"text": "fine"}', "", '{"body": "x"}'], r"bad\.jsonl:3: 'text' is missing"),
        (['{"text": "  "}'], r"bad\.jsonl:1: 'text' is empty"),
        (['["text"]'], r"bad\.jsonl:1: expected an object"),
        (['{"text": "x", "title": 3}'], r"bad\.jsonl:1: 'title' is int"),
        (
            ['{"text": "x", "title": "T"}'],
            r"bad\.jsonl:1: the record has a title and the run's loader has no title rule",
        ),
    ],
)
def test_malformed_lines_are_named(plain: QRAGRetriever, tmp_path: Path, lines, message) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    s = settings()
    s.title_sep = None  # qa1 has no title rule: a titled record must say how to join
    with pytest.raises(CorpusError, match=message):
        CorpusIndex.build(plain, tmp_path / "idx", [str(bad)], settings=s, progress=False)
    assert not list((tmp_path / "idx").glob("shard-*"))  # the corpus is read through before anything is embedded


def test_cli_builds_then_answers_from_the_index(none_run: Path, corpus, wanted, tmp_path: Path) -> None:
    from tests.tool.test_cli_export import cli

    files, chunks = corpus
    idx = tmp_path / "idx"
    questions = tmp_path / "q.txt"
    questions.write_text("\n".join(QUESTIONS) + "\n", encoding="utf-8")
    out = tmp_path / "answers.jsonl"
    args = [f"index={idx}", f"corpus=[{files[0]},{files[1]}]", "corpus_index.title_sep=' '"]
    done = cli(f"run={none_run}", *args, f"questions={questions}", f"output={out}", "steps=3")
    assert done.returncode == 0, done.stderr
    # auto on the CPU: FAISS's exact flat index (exact torch search without the extra `index`)
    assert ("FAISS flat" if faiss_module() else "exact Q over all") in done.stderr
    rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert_same_picks([[(p["index"], p["q_value"]) for p in r["picks"]] for r in rows], picks(wanted[str(RULES[0])]))
    assert {"source", "line", "id", "title"} <= rows[0]["picks"][0].keys()
    assert OmegaConf.load(idx / "manifest.json")["complete"]
    cfg = OmegaConf.create({"run": "???", "index": str(idx)})
    fill_run_from_index(cfg)  # index= alone: the run it was built with
    assert cfg.run == str(none_run)
    bad = cli(f"run={none_run}", f"index={idx}", "text=/dev/null", "question=x", "corpus_index.candidates=0")
    assert bad.returncode == 2 and "text= and index= exclude each other" in bad.stderr
    assert "corpus_index.candidates=0: expected a whole number >= 1" in bad.stderr
