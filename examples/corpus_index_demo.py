"""Index a large corpus built from the repository's own data and time retrieval from it
(docs/RETRIEVER_TOOL.md, "Corpus index"). Prints one JSON line.

    python examples/corpus_index_demo.py --out /tmp/cidx --model offline:minilm --n-passages 1000000 --device cuda
    python examples/corpus_index_demo.py --out /tmp/cidx --run runs/<run> --n-passages 30000 --device cpu

The corpus (deterministic, written once to ``<out>/corpus.jsonl``): every distinct real HotpotQA and
MuSiQue paragraph shipped under data/ (their gold paragraphs, so the questions have answers in
it), then windows of 1 to 10 consecutive sentences of the public-domain books of the PG19
stand-in noise corpus (data/babilong/pg19-with-sentences), interleaved by start sentence so that
any prefix mixes the widths; ``--n-passages`` keeps the first N. The questions are the shipped
HotpotQA and MuSiQue test questions.

``--run`` uses a trained run; ``--model`` builds an UNTRAINED Q-network from a model folder (or
``offline:minilm``) with the HotpotQA environment's settings (no positions): good for timing and
for the recall of an approximate index against exact search, not for retrieval quality, and
labelled so in the output. The index is built (or resumed, if ``<out>/index`` holds an interrupted
build) with the run's chunk encoder; the questions are answered with exact search (torch over the
shards, on the GPU when there is one) and with a FAISS approximate index (``--approx``; skipped
when faiss is not installed), and ``recall_of_exact_picks`` says how much of the exact picks the
approximate index found. ``--time-limit`` stops cleanly between shards or questions and reports
what was done (a rerun resumes the indexing).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rl.tool.corpus_index import CorpusIndex, default_settings, recall_of  # noqa: E402
from rl.tool.corpus_search import faiss_module  # noqa: E402
from rl.tool.retriever import QRAGRetriever  # noqa: E402

WIDTHS = range(1, 11)  # sentences per book window


class TimeUp(Exception):
    pass


def real_paragraphs() -> list[dict[str, Any]]:
    """Distinct (title, text) paragraphs of the shipped HotpotQA and MuSiQue subsets."""
    seen: set[tuple[str, str]] = set()
    out = []

    def add(source: str, title: str, text: str) -> None:
        if text.strip() and (title, text) not in seen:
            seen.add((title, text))
            out.append({"id": f"{source}/{len(out)}", "title": title, "text": text})

    for split in ("test", "train"):
        for line in gzip.open(ROOT / f"data/hotpotqa/subset_{split}.jsonl.gz", "rt", encoding="utf-8"):
            row = json.loads(line)
            if "context" in row:  # the original distractor layout
                for title, sentences in row["context"]:
                    add("hotpotqa", title, " ".join(sentences))
            else:  # the IRCoT layout
                for para in row["contexts"]:
                    add("hotpotqa", para["title"], para["paragraph_text"])
        for line in gzip.open(ROOT / f"data/musique/subset_{split}.jsonl.gz", "rt", encoding="utf-8"):
            for para in json.loads(line)["paragraphs"]:
                add("musique", para["title"], para["paragraph_text"])
    return out


def book_windows(n: int) -> list[dict[str, Any]]:
    """The first ``n`` windows of consecutive sentences of the noise books, by start sentence."""
    out: list[dict[str, Any]] = []
    if n <= 0:
        return out
    for split in ("train", "test"):
        for b, line in enumerate(gzip.open(ROOT / f"data/babilong/pg19-with-sentences/{split}.jsonl.gz", "rt")):
            book = json.loads(line)
            sents = [s.strip() for s in book["sentences"] if s.strip()]
            for i in range(len(sents)):
                for w in WIDTHS:
                    if i + w <= len(sents):
                        out.append(
                            {
                                "id": f"pg19-{split}/{b}/{i}+{w}",
                                "title": book["title"],
                                "text": " ".join(sents[i : i + w]),
                            }
                        )
                        if len(out) == n:
                            return out
    return out


def write_corpus(path: Path, n: int) -> int:
    """``<out>/corpus.jsonl`` of ``n`` passages, written once (atomically: a complete file is reused,
    so a resumed index sees the same corpus)."""
    if path.is_file():
        return sum(1 for _ in path.open(encoding="utf-8"))
    rows = real_paragraphs()[:n]
    rows += book_windows(n - len(rows))
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    return len(rows)


def questions(n: int) -> list[str]:
    out = []
    for line in gzip.open(ROOT / "data/hotpotqa/subset_test.jsonl.gz", "rt", encoding="utf-8"):
        out.append(json.loads(line)["question"])
    for line in gzip.open(ROOT / "data/musique/subset_test.jsonl.gz", "rt", encoding="utf-8"):
        out.append(json.loads(line)["question"])
    return out[:n]


def untrained_run(folder: Path, model: str) -> Path:
    """A run folder holding an untrained Q-network of ``model`` with the HotpotQA settings (the
    shape eval_retriever.py reads: config.yaml + model_best.pt)."""
    from hydra import compose, initialize_config_dir

    from rl.run.build import qnet_from_cfg
    from rl.run.config import without_hydra

    if (folder / "model_best.pt").is_file():
        return folder
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("training", ["envs=hotpotqa", "algo=minilm", f"algo.model.name={model}", "device=cpu"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(OmegaConf.to_yaml(without_hydra(cfg)))
    qnet = qnet_from_cfg(cfg, torch.device("cpu"))
    state = {
        "learner": {"agent": qnet.state_dict()},
        "config": OmegaConf.to_container(without_hydra(cfg), resolve=True),
    }
    torch.save(state, folder / "model_best.pt")
    return folder


def answer(index: CorpusIndex, asked: list[str], deadline: float, group: int) -> tuple[list[Any], float]:
    """Results for the questions (stopping at the deadline) and seconds per question."""
    out: list[Any] = []
    t0 = time.perf_counter()
    for lo in range(0, len(asked), group):
        if time.time() > deadline:
            break
        out += index.retrieve_batch(asked[lo : lo + group])
    return out, (time.perf_counter() - t0) / max(1, len(out))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="working folder: corpus.jsonl, index/, untrained_run/")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--run", help="a trained run folder")
    who.add_argument("--model", help="a model folder or offline:minilm: an UNTRAINED Q-network (timing, recall)")
    p.add_argument("--n-passages", type=int, default=1_000_000)
    p.add_argument("--questions", type=int, default=100)
    p.add_argument("--device", default="auto")
    p.add_argument("--shard-size", type=int, default=50_000)
    p.add_argument("--approx", choices=("ivf", "hnsw"), default="ivf")
    p.add_argument("--ivf-nlist", type=int, default=None, help="null: min(4·√N, N/39)")
    p.add_argument("--ivf-nprobe", type=int, default=32)
    p.add_argument("--hnsw-ef-search", type=int, default=128)
    p.add_argument("--candidates", type=int, default=64)
    p.add_argument(
        "--time-limit", type=float, default=540.0, help="seconds; checked between shards and question groups"
    )
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args()
    deadline = time.time() + a.time_limit
    a.out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"stopped": None}
    t0 = time.perf_counter()
    n = write_corpus(a.out / "corpus.jsonl", a.n_passages)
    result["s_to_write_corpus"] = round(time.perf_counter() - t0, 1)
    run = Path(a.run) if a.run else untrained_run(a.out / "untrained_run", a.model)
    retriever = QRAGRetriever.from_run(run, device=a.device)
    device = retriever.qnet.device
    result |= {
        "card": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "retriever": str(run) if a.run else f"UNTRAINED Q-network from {a.model} (HotpotQA settings, no positions)",
        "positions": str(retriever.cfg.envs.positions_processor),
        "n_passages": n,
        "corpus": "distinct HotpotQA+MuSiQue paragraphs of data/, then PG19 stand-in windows of 1-10 sentences",
    }
    s = default_settings()
    s.shard_size, s.title_sep, s.candidates = a.shard_size, " ", a.candidates
    s.ivf_nlist, s.ivf_nprobe, s.hnsw_ef_search = a.ivf_nlist, a.ivf_nprobe, a.hnsw_ef_search

    def check_time(k: int) -> None:
        if time.time() > deadline:
            raise TimeUp

    from rl.tool.shard_store import MANIFEST, ShardStore

    had = ShardStore.open(a.out / "index").n_chunks if (a.out / "index" / MANIFEST).is_file() else 0
    result["chunks_indexed_before"] = had  # > 0: a resumed (or reused) index, whose s_to_index is the rest's
    t0 = time.perf_counter()
    try:
        store = CorpusIndex.build(retriever, a.out / "index", str(a.out / "corpus.jsonl"), settings=s,
                                  progress=not a.no_progress, on_shard=check_time)  # fmt: skip
    except TimeUp:
        done = ShardStore.open(a.out / "index").n_chunks
        result |= {"stopped": f"time limit while indexing ({done} of {n} chunks; rerun to resume)"}
        result |= {"n_indexed": done, "s_indexing": round(time.perf_counter() - t0, 1)}
        finish(result, device)
        return
    result |= {"s_to_index": round(time.perf_counter() - t0, 1), "tokens": store.manifest["tokens"]}
    result["n_shards"] = store.n_shards
    asked = questions(a.questions)
    group = int(retriever.cfg.eval_group_size)
    s.search = "exact"
    exact_index = CorpusIndex.open(retriever, a.out / "index", s)
    result["exact"] = exact_index.describe()
    exact, per_q = answer(exact_index, asked, deadline, group)
    result["s_per_question"] = {"exact": round(per_q, 4)}
    result["n_questions"] = len(exact)
    del exact_index  # frees the GPU copy of the embeddings
    faiss = faiss_module()
    if faiss is None:
        result["approx"] = "skipped: faiss is not installed (pip install faiss-cpu)"
    elif len(exact) < len(asked):
        result["stopped"] = "time limit during the exact questions"
    else:
        s.search = a.approx
        t0 = time.perf_counter()
        approx_index = CorpusIndex.open(retriever, a.out / "index", s)  # builds (and saves) the FAISS index
        result["s_to_build_or_load_faiss"] = round(time.perf_counter() - t0, 1)
        result["approx"] = approx_index.describe()
        result["faiss"] = faiss.__version__
        approx, per_q = answer(approx_index, asked, deadline, group)
        result["s_per_question"]["approx"] = round(per_q, 4)
        result |= recall_of(approx, exact[: len(approx)])
        result["approx_states_searched_exactly"] = approx_index.search.fallbacks
        if len(approx) < len(exact):
            result["stopped"] = f"time limit after {len(approx)} approximate questions"
    finish(result, device)


def finish(result: dict[str, Any], device: torch.device) -> None:
    result["peak_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    if device.type == "cuda":
        result["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
