"""Answer and retrieval metrics (docs/EVALUATION.md, docs/READERS.md; per-benchmark official rules: docs/SCORING.md).

Every metric is a pure function of strings / index lists. Names are stable: the reader scripts
write them into JSONL records and summaries.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

# Version of the answer scoring written into every reader output line. Bump it whenever a metric
# changes; the readers then rescore older lines from the model output they stored.
# 1 (no field): the first release (robust acc, SQuAD F1 everywhere); 2: official rules (docs/SCORING.md).
SCORING_VERSION = 2

# --------------------------------------------------------------------------------------------
# Retrieval metrics (DESIGN §9.2)
# --------------------------------------------------------------------------------------------


def fact_metrics(pred_idx: Iterable[int], sf_idx: Iterable[int], missing: int = 0) -> dict[str, float]:
    """Fact EM (all gold retrieved, extras allowed), precision, recall and F1 over index sets.

    ``missing``: gold paragraphs that the context lacks (HotpotQA fullwiki). They count in the
    gold, as in the official supporting-fact evaluation, so recall is found / (present + missing)
    and EM is 0 whenever one is missing. Both sets empty (and nothing missing) -> everything 1.0
    (nothing to find, nothing wrongly found).
    """
    p, g = set(pred_idx), set(sf_idx)
    if not p and not g and not missing:
        return {"em": 1.0, "precision": 1.0, "recall": 1.0, "f1": 1.0}
    hit = len(p & g)
    precision = hit / len(p) if p else 0.0
    recall = hit / (len(g) + missing) if g or missing else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    em = 1.0 if g <= p and not missing else 0.0
    return {"em": em, "precision": precision, "recall": recall, "f1": f1}


def sample_fact_metrics(pred_idx: Iterable[int], sample: Any) -> dict[str, float] | None:
    """Fact metrics of one retrieval of ``sample``; None when its gold is unknown (``sf_known``
    false, or no gold at all), never EM 1.0 against an empty gold set. ``sf_missing`` (gold that
    the context lacks, HotpotQA fullwiki under the official rule) counts as gold not found."""
    missing = int(sample.get("sf_missing", 0))
    if not sample.get("sf_known", True) or not (sample["sf_idx"] or missing):
        return None
    return fact_metrics(pred_idx, sample["sf_idx"], missing)


# --------------------------------------------------------------------------------------------
# BabiLong / NIAH (docs/SCORING.md)
# --------------------------------------------------------------------------------------------

_ROOMS = ["bathroom", "bedroom", "garden", "hallway", "kitchen", "office"]

# The official label sets of booydar/babilong (babilong/metrics.py). qa19 holds the twelve
# two-step routes that bAbI's path task can produce: opposite pairs (n,s / e,w) never occur,
# repeated directions (n,n, ...) do.
TASK_LABELS: dict[str, list[str]] = {
    **{t: _ROOMS for t in ("qa1", "qa2", "qa3", "qa4", "qa11", "qa12", "qa13")},
    "qa5": ["Bill", "Fred", "Jeff", "Mary", "apple", "football", "milk"],
    **{t: ["no", "yes"] for t in ("qa6", "qa9", "qa17", "qa18")},
    "qa7": ["none", "one", "three", "two"],
    "qa8": ["apple", "football", "milk", "nothing"],
    "qa10": ["maybe", "no", "yes"],
    "qa14": ["bedroom", "cinema", "kitchen", "office", "park", "school"],
    "qa15": ["cat", "mouse", "sheep", "wolf"],
    "qa16": ["gray", "green", "white", "yellow"],
    "qa19": ["e,e", "e,n", "e,s", "n,e", "n,n", "n,w", "s,e", "s,s", "s,w", "w,n", "w,s", "w,w"],
    "qa20": ["bedroom", "bored", "garden", "hungry", "kitchen", "thirsty", "tired"],
}

BABI_TASKS = tuple(f"qa{i}" for i in range(1, 21))
NIAH_TASKS = ("niah", "niahmv")


def task_key(task: str) -> str:
    """Short task key from a long or short name.

    ``qa3_three-supporting-facts`` / ``qa3`` -> ``qa3``; ``niah``, ``niah_single_1`` -> ``niah``;
    ``niahmv``, ``mv_niah``, ``niah_multivalue`` -> ``niahmv``. Unknown names raise ValueError.
    """
    t = task.strip().lower()
    m = re.match(r"^qa(\d+)(?:_|$)", t)
    if m and 1 <= int(m.group(1)) <= 20:
        return f"qa{int(m.group(1))}"
    if "niah" in t:
        return "niahmv" if ("mv" in t or "multivalue" in t or "multi_value" in t) else "niah"
    raise ValueError(f"unknown task {task!r}: expected qa1..qa20 (short or full bAbI file name), niah or niahmv")


def babilong_em(output: str, target: str) -> float:
    """The Q-RAG reference's exact match (kept as is).

    Strip spaces and periods from both ends of the output, take its last whitespace-separated
    token, split that and the target on commas, compare as sets. Case-sensitive.
    """
    cleaned = output.strip(" .")
    tokens = cleaned.split()
    last = tokens[-1] if tokens else ""
    return 1.0 if set(last.split(",")) == set(target.split(",")) else 0.0


def _official_babilong_text(output: str) -> str:
    """The official scorer's output preprocessing: lower-case, keep the text before the first
    '.', then before an echoed ``<context>`` / ``<example>``. The official code also splits on
    ``'Question'``, but after lower-casing, so that split never fires: it is left out here."""
    text = output.lower().split(".")[0]
    return text.split("<context>")[0].split("<example>")[0]


def _contains_substring(label: str, text: str) -> bool:
    return label in text


def _contains_word(label: str, text: str) -> bool:
    return re.search(rf"(?<![a-z0-9]){re.escape(label)}(?![a-z0-9])", text) is not None


def _compare_answers(output: str, target: str, question: str, task: str, contains) -> float:
    key = task_key(task)
    if key in NIAH_TASKS:
        raise ValueError(f"BabiLong accuracy scores bAbI tasks, not {key}; NIAH uses string_match_all")
    labels = {lab.lower() for lab in TASK_LABELS[key]}
    text = _official_babilong_text(output)
    q = question.lower()
    # a label named in the question is never the answer (qa3: "before the office")
    found = {lab for lab in labels if contains(lab, text)} - {lab for lab in labels if contains(lab, q)}
    target = target.lower()
    if "," in target and len(target) > 3:  # several objects (qa8 "apple,milk"); qa19's "n,e" is one label
        parts = target.split(",")
        return 1.0 if all(p in found for p in parts) and len(found) == len(parts) else 0.0
    return 1.0 if target in found and len(found) == 1 else 0.0


def babilong_acc(output: str, target: str, question: str, task: str) -> float:
    """BabiLong accuracy, identical to the official ``compare_answers`` (booydar/babilong).

    Output: lower-cased, cut at its first '.', then at an echoed ``<context>`` / ``<example>``.
    Labels (the task's label set) are found as *substrings* of that text and of the lower-cased
    question; labels of the question are dropped. Correct iff the found set is exactly the
    target: one label, or, for a comma-separated target longer than 3 characters (qa8), all its
    parts and nothing else. Official quirk kept: qa7 never credits ``none`` (``one`` is inside it).
    """
    return _compare_answers(output, target, question, task, _contains_substring)


def babilong_acc_fixed(output: str, target: str, question: str, task: str) -> float:
    """The official rule with labels matched as whole words instead of substrings: qa7's
    ``none`` no longer also counts as ``one``, and yes/no tasks no longer read ``no`` inside
    ``know``/``not``/``nothing``. Reported beside the official number as ``acc_fixed``."""
    return _compare_answers(output, target, question, task, _contains_word)


def babilong_f1(output: str, target: str, task: str) -> float:
    """The Q-RAG reference's label F1: the task labels occurring as *substrings* of each
    lower-cased side (so 'no' matches inside 'none') give a predicted and a gold set; set F1.
    An output naming no label scores 0 (the reference gave 1.0 when neither side held a label,
    which its incomplete qa19 list made common)."""
    key = task_key(task)
    if key in NIAH_TASKS:
        raise ValueError("babilong_f1 scores bAbI tasks; use niah_metrics for NIAH")
    labels = [lab.lower() for lab in TASK_LABELS[key]]
    out, tgt = output.lower(), target.lower()
    p = {lab for lab in labels if lab in out}
    g = {lab for lab in labels if lab in tgt}
    hit = len(p & g)
    if hit == 0:
        return 0.0
    prec, rec = hit / len(p), hit / len(g)
    return 2 * prec * rec / (prec + rec)


def ruler_postprocess(prediction: str) -> str:
    """RULER's prediction cleanup (scripts/eval/evaluate.py): strip, turn control characters
    (\\x00-\\x1f) into newlines, strip again."""
    return re.sub(r"[\x00-\x1f]", "\n", prediction.strip()).strip()


def string_match_all(prediction: str, references: Sequence[str]) -> float:
    """RULER's NIAH metric for one sample: the share of references found, case-insensitively,
    as substrings of the (post-processed) prediction. RULER reports the mean × 100."""
    pred = ruler_postprocess(prediction).lower()
    return sum(1.0 for r in references if r.lower() in pred) / len(references)


def string_match_part(prediction: str, references: Sequence[str]) -> float:
    """RULER's QA metric for one sample: 1 if any reference occurs, case-insensitively, as a
    substring of the (post-processed) prediction, else 0. RULER reports the mean × 100."""
    pred = ruler_postprocess(prediction).lower()
    return max(1.0 if r.lower() in pred else 0.0 for r in references)


_UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_NUM_RE = re.compile(r"(?<![\w.-])\d+(?![\w-])")
_ENUMERATOR_RE = re.compile(r"(?m)^\s*\d+[.)](?=\s)")


def niah_values(output: str, question: str = "") -> set[str]:
    """Value-shaped tokens (uuids, whole numbers) of a NIAH answer, lower-cased; list
    enumerators (``1.`` / ``2)`` at a line start) and values restated from the question (the
    uuid keys of multikey_3) are not answers."""
    text = _ENUMERATOR_RE.sub(" ", output.lower())
    found = set(_UUID_RE.findall(text))
    found |= set(_NUM_RE.findall(_UUID_RE.sub(" ", text)))
    q = question.lower()
    return {v for v in found if v not in q}


def niah_metrics(output: str, target: str, question: str = "") -> dict[str, float]:
    """NIAH / multi-value NIAH: ``string_match_all`` (RULER's metric, the headline) over the
    comma-separated gold values, and a set F1 between :func:`niah_values` and the gold set."""
    gold = [g.strip() for g in target.split(",") if g.strip()]
    if not gold:
        raise ValueError(f"NIAH target {target!r} holds no value")
    found = niah_values(output, question)
    gold_set = {g.lower() for g in gold}
    hit = len(found & gold_set)
    f1 = 0.0 if hit == 0 else 2 * hit / (len(found) + len(gold_set))
    return {"string_match_all": string_match_all(output, gold), "f1": f1}


def synthetic_scores(output: str, target: str, question: str, task: str) -> dict[str, float]:
    """All per-sample reader metrics of a BabiLong / NIAH record (``output`` with any reasoning
    block already removed). bAbI: ``acc`` (official), ``acc_fixed``, ``em`` (reference rule),
    ``f1`` (label F1). NIAH: ``string_match_all`` (RULER), ``em``, ``f1``."""
    key = task_key(task)
    scores = {"em": babilong_em(output, target)}
    if key in NIAH_TASKS:
        scores.update(niah_metrics(output, target, question))
    else:
        scores.update(
            acc=babilong_acc(output, target, question, key),
            acc_fixed=babilong_acc_fixed(output, target, question, key),
            f1=babilong_f1(output, target, key),
        )
    return scores


# --------------------------------------------------------------------------------------------
# Open-domain QA: SQuAD style (DESIGN §9.5) and the HotpotQA / 2Wiki official F1
# --------------------------------------------------------------------------------------------

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    """SQuAD normalisation in SQuAD's order: lower-case, drop punctuation, articles -> spaces,
    collapse whitespace (the leading strip is implied by the final split/join)."""
    s = s.strip().lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def squad_em(prediction: str, gold: str) -> float:
    return 1.0 if normalize_answer(prediction) == normalize_answer(gold) else 0.0


def squad_f1(prediction: str, gold: str, legacy_empty: bool = False) -> float:
    """Token-multiset F1 after normalisation.

    SQuAD convention (default): if either side normalises to no tokens, F1 = 1 iff both do.
    ``legacy_empty`` (``legacy.qa_f1_empty_conventions``): the reference's rule, empty gold gives
    recall 1 and empty prediction precision 1, so F1 > 0 is possible with one side empty.
    """
    p, g = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not legacy_empty:
        if not p or not g:
            return 1.0 if p == g else 0.0
        common = Counter(p) & Counter(g)
        hit = sum(common.values())
        if hit == 0:
            return 0.0
        prec, rec = hit / len(p), hit / len(g)
        return 2 * prec * rec / (prec + rec)
    hit = sum((Counter(p) & Counter(g)).values())
    prec = hit / len(p) if p else 1.0
    rec = hit / len(g) if g else 1.0
    return 2 * prec * rec / (prec + rec) if prec + rec > 0 else 0.0


# HotpotQA's and 2WikiMultihopQA's official F1 (hotpot_evaluate_v1.py, 2wikimultihop_evaluate_v1.1.py):
# when either normalised side is one of these and the two differ, F1 is 0.
_SPECIAL_ANSWERS = ("yes", "no", "noanswer")


def hotpot_f1(prediction: str, gold: str) -> float:
    """The official HotpotQA / 2Wiki answer F1: SQuAD normalisation and token-multiset F1, but 0
    when either normalised side is ``yes`` / ``no`` / ``noanswer`` and they differ
    (``The answer is yes.`` vs ``yes`` -> 0; plain token F1 gives 0.5). No overlap (both sides
    empty included) -> 0, as in the official code."""
    p, g = normalize_answer(prediction), normalize_answer(gold)
    if (p in _SPECIAL_ANSWERS or g in _SPECIAL_ANSWERS) and p != g:
        return 0.0
    hit = sum((Counter(p.split()) & Counter(g.split())).values())
    if hit == 0:
        return 0.0
    prec, rec = hit / len(p.split()), hit / len(g.split())
    return 2 * prec * rec / (prec + rec)


# Benchmarks the open-QA reader scores, keyed by the dataset names the loaders use (envs.name /
# a record's ``source``): which official answer F1 applies.
QA_BENCHMARKS = ("hotpotqa", "2WikiMultihopQA", "musique", "ruler_qa", "squad")
_HOTPOT_RULE = ("hotpotqa", "2WikiMultihopQA")


def qa_scores(
    prediction: str,
    answer: str,
    aliases: Sequence[str] | None = None,
    ignore_aliases: bool = False,
    legacy_empty: bool = False,
    benchmark: str = "squad",
) -> dict[str, float]:
    """Per-sample answer metrics, each the maximum over ``answer`` and its aliases (unless
    ``ignore_aliases``, ``legacy.ignore_answer_aliases``).

    ``EM``: SQuAD exact match after normalisation (every benchmark). ``F1``: the benchmark's
    official answer F1: HotpotQA / 2Wiki apply the yes/no/noanswer rule (:func:`hotpot_f1`),
    with ``F1_plain`` (token F1 without that rule) beside it; MuSiQue, RULER QA and SQuAD use
    :func:`squad_f1`. RULER QA adds ``string_match_part`` (RULER's headline metric).
    """
    if benchmark not in QA_BENCHMARKS:
        raise ValueError(f"unknown QA benchmark {benchmark!r}; choose one of {', '.join(QA_BENCHMARKS)}")
    golds = [answer] + ([] if ignore_aliases else [a for a in (aliases or []) if a is not None])
    plain = max(squad_f1(prediction, g, legacy_empty=legacy_empty) for g in golds)
    scores = {"EM": max(squad_em(prediction, g) for g in golds), "F1": plain}
    if benchmark in _HOTPOT_RULE:
        scores["F1"] = max(hotpot_f1(prediction, g) for g in golds)
        scores["F1_plain"] = plain
    if benchmark == "ruler_qa":
        scores["string_match_part"] = string_match_part(prediction, golds)
    return scores
