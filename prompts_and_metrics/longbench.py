"""LongBench (THUDM/LongBench, v1): per-subset metric, answer length, prompts (docs/SCORING.md).

The metrics reproduce LongBench's ``metrics.py`` / ``eval.py``: the same normalisations, the same
third-party scorers (``rouge`` for ROUGE-L, ``jieba`` for Chinese words, ``fuzzywuzzy`` for code
similarity), the first-line cut for the few-shot subsets, the maximum over all gold answers and
the LongBench-E length buckets. Scores are fractions (LongBench prints them × 100).

The prompt templates are this project's own wording; LongBench's own ``dataset2prompt.json`` can be
passed to the reader instead (``--prompt_file``), since both use ``{context}`` and ``{input}``.
"""

from __future__ import annotations

import logging
import re
import string
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prompts_and_metrics.metrics import normalize_answer

# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------

# LongBench's Chinese punctuation set, removed (with ASCII punctuation) by the Chinese normaliser.
_ZH_PUNCT = "！？｡。＂＃＄％＆＇（）＊＋，－／：；＜＝＞＠［＼］＾＿｀｛｜｝～｟｠｢｣､、〃》「」『』【】〔〕〖〗〘〙〚〛〜〝〞〟〰〾〿–—‘’‛“”„‟…‧﹏."
_ALL_PUNCT = set(string.punctuation + _ZH_PUNCT)


def normalize_zh(s: str) -> str:
    """Lower-case, drop ASCII and Chinese punctuation, drop all whitespace."""
    return "".join(ch for ch in s.lower() if ch not in _ALL_PUNCT and not ch.isspace())


def _zh_words(text: str) -> list[str]:
    import jieba

    jieba.setLogLevel(logging.WARNING)  # no dictionary-loading chatter on every reader run
    return list(jieba.cut(text, cut_all=False))


def token_f1(pred: Sequence[str], gold: Sequence[str]) -> float:
    """Multiset F1 of two token lists; 0 without overlap (so also when either is empty)."""
    hit = sum((Counter(pred) & Counter(gold)).values())
    if hit == 0:
        return 0.0
    prec, rec = hit / len(pred), hit / len(gold)
    return 2 * prec * rec / (prec + rec)


def qa_f1(prediction: str, gold: str, all_classes: Sequence[str] | None = None) -> float:
    """English QA F1: SQuAD normalisation, whitespace tokens."""
    return token_f1(normalize_answer(prediction).split(), normalize_answer(gold).split())


def qa_f1_zh(prediction: str, gold: str, all_classes: Sequence[str] | None = None) -> float:
    """Chinese QA F1: jieba words, each normalised by :func:`normalize_zh`, empty ones dropped."""
    p = [w for w in map(normalize_zh, _zh_words(prediction)) if w]
    g = [w for w in map(normalize_zh, _zh_words(gold)) if w]
    return token_f1(p, g)


def rouge_l(prediction: str, gold: str, all_classes: Sequence[str] | None = None) -> float:
    """ROUGE-L F of the ``rouge`` package (summary-level LCS); any failure of that package (an
    empty or punctuation-only side, recursion on very long texts) scores 0, as in LongBench."""
    from rouge import Rouge

    try:
        return float(Rouge().get_scores([prediction], [gold], avg=True)["rouge-l"]["f"])
    except Exception:  # LongBench catches everything here; a failed comparison counts as 0
        return 0.0


def rouge_l_zh(prediction: str, gold: str, all_classes: Sequence[str] | None = None) -> float:
    """ROUGE-L over jieba words joined by spaces."""
    return rouge_l(" ".join(_zh_words(prediction)), " ".join(_zh_words(gold)))


def classification(prediction: str, gold: str, all_classes: Sequence[str] | None = None) -> float:
    """1 / (number of class names found) when the gold class is among the class names occurring in
    the prediction, else 0. Names that are proper substrings of the gold are discarded first, in
    LongBench's way: while scanning the list it removes from, so the name right after a removed
    one is never examined (kept here for identical numbers)."""
    if not all_classes:
        raise ValueError("classification needs the record's all_classes")
    found = [c for c in all_classes if c in prediction]
    k = 0
    while k < len(found):
        name = found[k]
        k += 1
        if name in gold and name != gold:
            found.remove(name)  # the list shifts left under the scan: its next name is skipped
    return 1.0 / len(found) if gold in found else 0.0


def _share_equal_to(prediction: str, number: str) -> float:
    numbers = re.findall(r"\d+", prediction)
    return sum(1 for n in numbers if n == number) / len(numbers) if numbers else 0.0


def count(prediction: str, gold: str, all_classes: Sequence[str] | None = None) -> float:
    """Share of the numbers in the prediction that equal the gold count."""
    return _share_equal_to(prediction, str(gold))


def _retrieval(prediction: str, gold: str, pattern: str) -> float:
    m = re.search(pattern, gold)
    if m is None:
        raise ValueError(f"gold answer {gold!r} names no paragraph ({pattern})")
    return _share_equal_to(prediction, m.group(1))


def retrieval(prediction: str, gold: str, all_classes: Sequence[str] | None = None) -> float:
    """Share of the numbers in the prediction that equal the gold ``Paragraph N``."""
    return _retrieval(prediction, gold, r"Paragraph (\d+)")


def retrieval_zh(prediction: str, gold: str, all_classes: Sequence[str] | None = None) -> float:
    """Share of the numbers in the prediction that equal the gold ``段落N``."""
    return _retrieval(prediction, gold, r"段落(\d+)")


def code_sim(prediction: str, gold: str, all_classes: Sequence[str] | None = None) -> float:
    """fuzzywuzzy ``ratio`` / 100 between the gold line and the first predicted line that holds no
    backtick, ``#`` or ``//`` (empty when every line does)."""
    with warnings.catch_warnings():
        # without python-Levenshtein fuzzywuzzy warns and uses difflib, as in LongBench's own setup
        warnings.simplefilter("ignore")
        from fuzzywuzzy import fuzz

    line = next(
        (ln for ln in prediction.lstrip("\n").split("\n") if "`" not in ln and "#" not in ln and "//" not in ln), ""
    )
    return fuzz.ratio(line, gold) / 100


METRICS: dict[str, Callable[..., float]] = {
    "qa_f1": qa_f1,
    "qa_f1_zh": qa_f1_zh,
    "rouge": rouge_l,
    "rouge_zh": rouge_l_zh,
    "classification": classification,
    "retrieval": retrieval,
    "retrieval_zh": retrieval_zh,
    "count": count,
    "code_sim": code_sim,
}

# --------------------------------------------------------------------------------------------
# Subsets
# --------------------------------------------------------------------------------------------

_QA = "Answer the question from the passages below. Reply with the answer only, no other words.\n\n{context}\n\nQuestion: {input}\nAnswer:"
_QA_ZH = "请根据下面的文字回答问题，只给出答案，不要输出其他内容。\n\n{context}\n\n问题：{input}\n回答："


@dataclass(frozen=True)
class Subset:
    """metric: a METRICS key. max_new_tokens: LongBench's generation length for the subset.
    first_line: score only the first line of the output (few-shot subsets). query: the retrieval
    question when the record's ``input`` is empty (no question: summaries, counting, code).
    prompt: the reader template (``{context}``, ``{input}``)."""

    metric: str
    max_new_tokens: int
    prompt: str
    first_line: bool = False
    query: str = ""


SUBSETS: dict[str, Subset] = {
    "narrativeqa": Subset(
        "qa_f1",
        128,
        "Answer the question about the story below as briefly as possible, with a "
        "single phrase if you can, and no explanation.\n\nStory: {context}\n\nQuestion: {input}\nAnswer:",
    ),
    "qasper": Subset(
        "qa_f1",
        128,
        "Answer the question about the scientific article below as briefly as possible. "
        'If the article does not answer it, write "unanswerable"; answer a yes/no question with '
        '"yes", "no" or "unanswerable". No explanation.\n\nArticle: {context}\n\n'
        "Question: {input}\nAnswer:",
    ),
    "multifieldqa_en": Subset("qa_f1", 64, _QA),
    "multifieldqa_zh": Subset("qa_f1_zh", 64, _QA_ZH),
    "hotpotqa": Subset("qa_f1", 32, _QA),
    "2wikimqa": Subset("qa_f1", 32, _QA),
    "musique": Subset("qa_f1", 32, _QA),
    "dureader": Subset("rouge_zh", 128, "请根据下面的文章回答问题。\n\n文章：{context}\n\n问题：{input}\n回答："),
    "gov_report": Subset(
        "rouge",
        512,
        "Below is a report by a government agency. Summarise it in about one page.\n\nReport:\n{context}\n\nSummary:",
        query="What are the main findings of the report?",
    ),
    "qmsum": Subset(
        "rouge",
        512,
        "Below is a meeting transcript and a query. Answer the query in one or more "
        "sentences.\n\nTranscript:\n{context}\n\nQuery: {input}\nAnswer:",
    ),
    "multi_news": Subset(
        "rouge",
        512,
        "Below are several news articles. Summarise all of them in about one page.\n\nNews:\n{context}\n\nSummary:",
        query="What are the main events in the news?",
    ),
    "vcsum": Subset(
        "rouge_zh",
        512,
        "下面是一段会议记录，请总结会议的内容。\n\n会议记录：\n{context}\n\n会议总结：",
        query="会议的主要内容是什么？",
    ),
    "trec": Subset(
        "classification",
        64,
        "Classify the type of the last question. Labelled examples:\n\n{context}\n{input}",
        first_line=True,
    ),
    "triviaqa": Subset(
        "qa_f1",
        32,
        "Answer the last question from its passage, with the answer only. Examples come first.\n\n{context}\n\n{input}",
        first_line=True,
    ),
    "samsum": Subset(
        "rouge",
        128,
        "Summarise the last dialogue in a few short sentences. Examples come first.\n\n{context}\n\n{input}",
        first_line=True,
    ),
    "lsht": Subset(
        "classification",
        64,
        "请判断最后一条新闻的类别。下面先给出一些带类别的例子。\n\n{context}\n{input}",
        first_line=True,
    ),
    "passage_count": Subset(
        "count",
        32,
        "Below are paragraphs from Wikipedia, some of them repeated. How many "
        "different paragraphs are there once duplicates are removed? Reply with the number "
        "only.\n\n{context}\n\nNumber of different paragraphs:",
        query="How many different paragraphs are there?",
    ),
    "passage_retrieval_en": Subset(
        "retrieval",
        32,
        "Below are numbered paragraphs from Wikipedia and a summary "
        "of one of them. Which paragraph is summarised? Reply in the form "
        '"Paragraph N".\n\n{context}\n\nSummary:\n{input}\n\nThe answer is:',
    ),
    "passage_retrieval_zh": Subset(
        "retrieval_zh",
        32,
        "下面是若干编号的段落和其中一段的摘要。摘要出自哪一段？请按"
        '"段落N"的格式回答。\n\n{context}\n\n摘要：\n{input}\n\n答案是：',
    ),
    "lcc": Subset(
        "code_sim",
        64,
        "Complete the code below with its next line.\n{context}Next line of code:\n",
        query="Which code is the next line of this file most likely to use?",
    ),
    "repobench-p": Subset(
        "code_sim", 64, "Complete the code below with its next line.\n{context}{input}Next line of code:\n"
    ),
}


def subset(dataset: str) -> Subset:
    if dataset not in SUBSETS:
        raise ValueError(f"unknown LongBench subset {dataset!r}; known: {', '.join(SUBSETS)}")
    return SUBSETS[dataset]


def longbench_score(dataset: str, prediction: str, answers: Sequence[str], all_classes: Sequence[str] | None) -> float:
    """One sample's LongBench score: the subset's metric, maximum over the gold answers, on the
    first line of the prediction for the few-shot subsets (trec, triviaqa, samsum, lsht)."""
    sub = subset(dataset)
    if sub.first_line:
        prediction = prediction.lstrip("\n").split("\n")[0]
    metric = METRICS[sub.metric]
    return max([0.0] + [metric(prediction, g, all_classes) for g in answers])


LENGTH_BUCKETS = ("0-4k", "4-8k", "8k+")


def length_bucket(length: int) -> str:
    """LongBench-E's bucket of a sample's ``length`` (words; characters for Chinese)."""
    return "0-4k" if length < 4000 else "4-8k" if length < 8000 else "8k+"
