"""RULER's two QA tasks built offline from the shipped real records (docs/DATA_OTHER.md, "RULER QA
test sets"): ``qa_squad`` (RULER's ``qa_1``, SQuAD v2.0 dev, single hop) and ``qa_hotpot``
(``qa_2``, HotpotQA distractor dev, multi hop).

Reimplements NVIDIA/RULER ``scripts/data/synthetic/qa.py`` with its prompt from ``constants.py``
('qa'): the question's own paragraphs plus distractor paragraphs of the same dataset fill the
context up to the token budget, shuffled and numbered ``Document 1:`` ... Records are in current
RULER's format (``index``, ``input``, ``outputs``, ``length``, ``answer_prefix``) plus
``gold_docs`` (the numbers of the documents that hold the question's gold paragraphs; the loader,
envs/data/ruler_qa.py, maps them to chunks) and ``question_id`` (the dataset's id).

As RULER:

* documents: HotpotQA's paragraph is ``title + "\\n" + "".join(sentences)``, SQuAD's its
  ``context``; the pool is every distinct paragraph of the source;
* a HotpotQA question keeps all ten of its own paragraphs (its two gold ones and its eight
  distractors) and draws the rest from the pool; a SQuAD question keeps its one paragraph, then
  the other paragraphs of the same article (all of them if they fit, else a random subset), then
  the rest of the pool;
* answers: HotpotQA's ``answer``; every ``text`` of SQuAD's ``answers`` (repeats kept); SQuAD's
  unanswerable questions are never asked;
* length: the input, answer prefix included, plus RULER's 32-token QA answer budget fits the
  target, counted by the counting tokenizer (RULER counts with the evaluated model's).

Not reproduced (each changes which documents a sample holds, not how it is built):

* RULER asks the first N questions of the file; here N questions drawn with ``derive_rng(seed,
  "ruler-qa", task, "questions")``, the same N at every length (the first 100 SQuAD questions fall
  on 41 paragraphs of two articles, the drawn ones on 92 paragraphs of all 16 answered articles);
* Python's ``random`` stream: sample i of (task, split, length) draws from ``derive_rng(seed,
  "ruler-qa", task, split, length, i)``, so a file made in pieces equals the file made at once;
* RULER searches one document count per file on sample 0 and lowers it by 10 for a sample that
  does not fit; here each sample is fitted (an estimate from per-document token counts, then exact
  counts of the assembled input, shrinking until it fits), as the NIAH generator does;
* RULER shuffles every sample's documents with the same fixed seed; here with the sample's own;
* RULER repeats its whole pool when the budget asks for more documents than it holds (at 1M, its
  SQuAD pool of 1 204 paragraphs about six times, the gold paragraph with it). Here a paragraph
  is never repeated: when a source's pool is used up the other source's pool fills the rest
  (``FALLBACK``), so every gold paragraph is one document and "all gold retrieved" stays defined.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from envs.data.niah_generator import TokenCounter
from envs.seeding import derive_rng

# RULER's QA prompt (constants.py 'qa'), base model template; the answer prefix follows it
TEMPLATE = (
    "Answer the question based on the given documents. Only give me the answer and do not output any other "
    "words.\n\nThe following are given documents.\n\n{context}\n\nAnswer the question based on the given "
    "documents. Only give me the answer and do not output any other words.\n\nQuestion: {query}"
)
ANSWER_PREFIX = " Answer:"
DOCUMENT = "Document {i}:\n{document}"
SEPARATOR = "\n\n"
TOKENS_TO_GENERATE = 32  # RULER's answer budget for QA
QA_TASKS = {"qa_squad": "squad", "qa_hotpot": "hotpotqa"}  # task -> the source its questions come from
FALLBACK = {"squad": "hotpotqa", "hotpotqa": "squad"}  # whose pool fills the rest once a pool is used up


@dataclass(frozen=True)
class Question:
    qid: str
    question: str
    outputs: tuple[str, ...]
    own: tuple[int, ...]  # pool indices the sample always holds (its gold among them)
    gold: tuple[int, ...]
    near: tuple[int, ...] = ()  # drawn before the rest of the pool (SQuAD: the same article's paragraphs)


@dataclass
class Source:
    """One dataset: its distinct paragraphs (``docs``) and its answerable questions."""

    name: str
    docs: list[str]
    questions: list[Question]


def hotpot_paragraph(title: str, sentences: Sequence[str]) -> str:
    return f"{title}\n{''.join(sentences)}"


def load_hotpot(folder: str | Path) -> Source:
    """Questions: ``subset_test.jsonl.gz`` (the original distractor layout, sentence-level
    supporting facts), gold = the paragraphs of their supporting titles. Pool: the paragraphs of
    every ``subset_*.jsonl.gz`` record, one per title; an original-layout record's text wins over
    an IRCoT-layout one (whose ``paragraph_text`` joins the sentences with a space)."""
    folder = Path(folder)
    files = sorted(folder.glob("subset_*.jsonl.gz"))
    if not any(f.name == "subset_test.jsonl.gz" for f in files):
        raise FileNotFoundError(f"{folder / 'subset_test.jsonl.gz'} is missing (the HotpotQA test questions)")
    records = {f.name: [json.loads(line) for line in gzip.open(f, "rt", encoding="utf-8")] for f in files}
    text: dict[str, str] = {}
    for recs in records.values():  # original layout first, whatever the file
        for r in recs:
            for title, sentences in r.get("context", []):
                text.setdefault(title, hotpot_paragraph(title, sentences))
    for recs in records.values():
        for r in recs:
            for c in r.get("contexts", []):
                text.setdefault(c["title"], f"{c['title']}\n{c['paragraph_text']}")
    titles = list(text)
    index = {t: i for i, t in enumerate(titles)}
    questions = []
    for r in records["subset_test.jsonl.gz"]:
        own_titles = [t for t, _ in r["context"]]
        if any(hotpot_paragraph(t, s) != text[t] for t, s in r["context"]):
            # the pool keeps one text per title: a question must see its own paragraphs
            raise ValueError(f"HotpotQA {r['_id']}: a paragraph title has two texts in {folder}")
        gold = sorted({index[t] for t, _ in r["supporting_facts"]})
        questions.append(
            Question(r["_id"], r["question"], (r["answer"],), tuple(index[t] for t in own_titles), tuple(gold))
        )
    return Source("hotpotqa", [text[t] for t in titles], questions)


def load_squad(path: str | Path) -> Source:
    """SQuAD v2.0's own layout (``data`` -> articles -> ``paragraphs`` -> ``context``, ``qas``):
    the pool is every distinct context, the questions every answerable one."""
    with gzip.open(path, "rt", encoding="utf-8") if str(path).endswith(".gz") else open(path, encoding="utf-8") as f:
        data = json.load(f)["data"]
    index: dict[str, int] = {}
    for article in data:
        for p in article["paragraphs"]:
            index.setdefault(p["context"], len(index))
    questions = []
    for article in data:
        same = [index[p["context"]] for p in article["paragraphs"]]
        for p in article["paragraphs"]:
            own = index[p["context"]]
            for q in p["qas"]:
                if not q["answers"]:  # unanswerable (is_impossible), as RULER leaves them out
                    continue
                outputs = tuple(a["text"] for a in q["answers"])
                questions.append(
                    Question(q["id"], q["question"], outputs, (own,), (own,), tuple(i for i in same if i != own))
                )
    return Source("squad", list(index), questions)


class Pools:
    """Both sources with their paragraphs' token counts (counted once) and the count of each
    ``Document i:`` header."""

    def __init__(self, sources: dict[str, Source], counter: TokenCounter):
        self.sources = sources
        self.counter = counter
        self._headers: list[int] = []

    @cached_property
    def tokens(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(self.counter(s.docs), dtype=np.int64) for k, s in self.sources.items()}

    @cached_property
    def separator(self) -> int:
        """Tokens the separator adds between two documents (2 for GPT-2: its pre-tokenizer splits
        the two newlines, which alone are one token)."""
        a, b = "Text.", DOCUMENT.format(i=1, document="Text.")
        whole, parts = self.counter([a + SEPARATOR + b]), self.counter([a, b])
        return whole[0] - sum(parts)

    def headers(self, n: int) -> np.ndarray:
        """Token counts of the headers ``Document 1:`` .. ``Document n:`` (with their newline)."""
        have = len(self._headers)
        if n > have:
            self._headers += self.counter([DOCUMENT.format(i=i, document="") for i in range(have + 1, n + 1)])
        return np.asarray(self._headers[:n], dtype=np.int64)


def render(docs: Sequence[str], query: str) -> str:
    context = SEPARATOR.join(DOCUMENT.format(i=i + 1, document=d) for i, d in enumerate(docs))
    return TEMPLATE.format(context=context, query=query)


def make_sample(
    task: str, index: int, q: Question, target_tokens: int, rng: np.random.Generator, pools: Pools
) -> dict[str, Any]:
    home = pools.sources[QA_TASKS[task]]
    other = pools.sources[FALLBACK[home.name]]
    # candidates in the order they are taken: the near ones, the rest of the pool, the other pool
    taken = set(q.own) | set(q.near)
    rest = np.asarray([i for i in range(len(home.docs)) if i not in taken], dtype=np.int64)
    near = np.asarray(q.near, dtype=np.int64)
    order = [(home.name, int(i)) for i in near[rng.permutation(len(near))]]
    order += [(home.name, int(i)) for i in rest[rng.permutation(len(rest))]]
    order += [(other.name, int(i)) for i in rng.permutation(len(other.docs))]
    place_seed = int(rng.integers(2**63))  # every fitting attempt shuffles with the same draws
    budget = target_tokens - TOKENS_TO_GENERATE
    own = [(home.name, i) for i in q.own]
    doc_tokens = np.asarray([pools.tokens[s][i] for s, i in own + order], dtype=np.int64)

    def text_of(k: int) -> tuple[str, list[tuple[str, int]]]:
        chosen = own + order[:k]
        chosen = [chosen[int(j)] for j in np.random.default_rng(place_seed).permutation(len(chosen))]
        docs = [pools.sources[s].docs[i] for s, i in chosen]
        return render(docs, q.question) + ANSWER_PREFIX, chosen

    # estimate: the frame, then per document its header, its text and the separator before it
    frame = pools.counter([render([], q.question) + ANSWER_PREFIX])[0]
    per_doc = doc_tokens + pools.headers(len(doc_tokens)) + pools.separator
    fits = frame + np.cumsum(per_doc) <= budget  # [m] = whether own + order[: m + 1 - len(own)] fits
    k = max(0, int(np.count_nonzero(fits)) - len(own))
    text, chosen = text_of(k)
    length = pools.counter([text])[0]
    mean = float(per_doc.mean())
    while length > budget and k > 0:
        k = max(0, k - max(1, math.ceil((length - budget) / mean)))
        text, chosen = text_of(k)
        length = pools.counter([text])[0]
    if length > budget:
        raise ValueError(
            f"{task}: {target_tokens} tokens cannot hold question {q.qid}'s own {len(own)} paragraph(s) and "
            f"{TOKENS_TO_GENERATE} answer tokens ({length} input tokens at the least)"
        )
    gold = {(home.name, i) for i in q.gold}
    return {
        "index": index,
        "input": text[: -len(ANSWER_PREFIX)],
        "outputs": list(q.outputs),
        "length": length + TOKENS_TO_GENERATE,
        "answer_prefix": ANSWER_PREFIX,
        "gold_docs": [n + 1 for n, doc in enumerate(chosen) if doc in gold],
        "question_id": q.qid,
    }


def generate_qa(
    task: str, num_samples: int, target_tokens: int, seed: int, split: str, pools: Pools, start: int = 0
) -> list[dict[str, Any]]:
    """Samples ``start`` .. ``start + num_samples - 1`` of (task, split, target length): sample i
    asks question ``order[i]`` of the task's source (one order per seed and task, whatever the
    length) and draws its documents from its own generator, so pieces join to the whole file."""
    if task not in QA_TASKS:
        raise ValueError(f"unknown RULER QA task {task!r}; known: {sorted(QA_TASKS)}")
    questions = pools.sources[QA_TASKS[task]].questions
    if start + num_samples > len(questions):
        raise ValueError(f"{task}: {start + num_samples} samples asked, the source has {len(questions)} questions")
    order = derive_rng(seed, "ruler-qa", task, "questions").permutation(len(questions))
    return [
        make_sample(
            task,
            i,
            questions[int(order[i])],
            target_tokens,
            derive_rng(seed, "ruler-qa", task, split, target_tokens, i),
            pools,
        )
        for i in range(start, start + num_samples)
    ]


# ---------------------------------------------------------------- the shipped SQuAD subset


def squad_subset(dev: dict[str, Any], test: dict[str, Any], drop: Sequence[str]) -> dict[str, Any]:
    """SQuAD v2.0 dev as the CS224N default project split it (chrischute/squad ``data/dev-v2.0.json``:
    16 articles with their questions and answers; ``data/test-v2.0.json``: the other 19 with the
    answers withheld): every article in SQuAD's layout, the withheld half's paragraphs without
    their unanswered questions, and the articles named in ``drop`` (not SQuAD's) left out."""
    articles = [a for a in dev["data"] if a["title"] not in drop]
    for a in test["data"]:
        if a["title"] not in drop:
            articles.append(
                {"title": a["title"], "paragraphs": [{"context": p["context"], "qas": []} for p in a["paragraphs"]]}
            )
    return {"version": dev["version"], "data": articles}
